{{- /* The webhook's container: args, env, ports and mounts. */ -}}
{{- define "confighash.webhookContainer" -}}
{{- $fullname := include "confighash.fullname" . -}}
args:
- webhook
{{- if not .Values.certManager.enabled }}
- --tls-self-signed-secret={{ $fullname }}-webhook-tls
{{- end }}
{{- if ne $fullname "confighash" }}
- --webhook-configuration={{ $fullname }}
{{- if not .Values.certManager.enabled }}
- --tls-dns-names={{ $fullname }}-webhook.{{ .Release.Namespace }}.svc,{{ $fullname }}-webhook.{{ .Release.Namespace }}.svc.cluster.local
{{- end }}
{{- end }}
{{- with .Values.namespaces }}
- {{ printf "--namespaces=%s" (join "," (uniq .)) | quote }}
{{- end }}
{{- with include "confighash.sharedArgs" . | trim }}{{ . | nindent 0 }}{{ end }}
{{- with .Values.webhook.clientCA.configMap }}
- --client-ca-file=/etc/confighash/client-ca/ca.crt
{{- end }}
{{- with .Values.webhook.clientCA.allowedNames }}
- {{ printf "--client-allowed-names=%s" (join "," .) | quote }}
{{- end }}
{{- with .Values.webhook.restarterImage }}
- {{ printf "--restarter-image=%s" . | quote }}
{{- end }}
{{- with .Values.webhook.admissionCallers }}
- {{ printf "--admission-callers=%s" . | quote }}
{{- end }}
{{- range $flag, $cap := dict "count" .Values.snapshotCap.count "bytes" .Values.snapshotCap.bytes }}
{{- if not (or (kindIs "invalid" $cap) (eq (toString $cap) "")) }}
- --snapshot-max-{{ $flag }}={{ int64 $cap }}
{{- end }}
{{- end }}
{{- include "confighash.extraArgs" .Values.webhook.extraArgs }}
{{ include "confighash.env" (dict "own" (include "confighash.webhookEnv" .) "extra" .Values.webhook.extraEnv "at" "webhook.extraEnv") }}
ports:
- {name: https, containerPort: 8443}
- {name: ops, containerPort: 8080}
{{- if or .Values.certManager.enabled .Values.webhook.clientCA.configMap }}
volumeMounts:
{{- if .Values.certManager.enabled }}
# A whole-Secret mount, never subPath: kubelet swaps it in place on renewal
# and the webhook reloads it.
- {name: tls, mountPath: /etc/confighash/tls, readOnly: true}
{{- end }}
{{- if .Values.webhook.clientCA.configMap }}
- {name: client-ca, mountPath: /etc/confighash/client-ca, readOnly: true}
{{- end }}
{{- end }}
{{- end }}

{{- /* The webhook's own environment variables: its pod, whose image the restarter of
pods restarted in place runs unless webhook.restarterImage names another. */ -}}
{{- define "confighash.webhookEnv" -}}
- name: CONFIGHASH_NAMESPACE
  valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
- name: POD_NAME
  valueFrom: {fieldRef: {fieldPath: metadata.name}}
- name: POD_NAMESPACE
  valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
{{- end }}

{{- /* The webhook's volumes. */ -}}
{{- define "confighash.webhookVolumes" -}}
{{- if or .Values.certManager.enabled .Values.webhook.clientCA.configMap }}
volumes:
{{- if .Values.certManager.enabled }}
- name: tls
  secret: {secretName: {{ include "confighash.fullname" . }}-webhook-tls}
{{- end }}
{{- with .Values.webhook.clientCA.configMap }}
- name: client-ca
  configMap: {name: {{ . | quote }}}
{{- end }}
{{- end }}
{{- end }}
