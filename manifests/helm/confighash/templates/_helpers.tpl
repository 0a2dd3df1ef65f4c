{{- define "confighash.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{- define "confighash.labels" -}}
app.kubernetes.io/part-of: confighash
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end }}

{{- define "confighash.podSecurity" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  seccompProfile: {type: RuntimeDefault}
{{- end }}

{{- define "confighash.containerSecurity" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities: {drop: [ALL]}
{{- end }}

{{- define "confighash.probes" -}}
readinessProbe:
  httpGet: {path: /readyz, port: ops}
  periodSeconds: 5
livenessProbe:
  httpGet: {path: /healthz, port: ops}
  periodSeconds: 10
{{- end }}

{{- define "confighash.antiAffinity" -}}
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels: {app.kubernetes.io/name: {{ . }}}
{{- end }}

{{- /* A LabelSelector in the label-selector syntax of the --*-selector flags. */ -}}
{{- define "confighash.selectorFlag" -}}
{{- $terms := list -}}
{{- range $k, $v := .matchLabels -}}
{{- $terms = append $terms (printf "%s=%s" $k $v) -}}
{{- end -}}
{{- range .matchExpressions -}}
{{- if eq .operator "In" -}}{{- $terms = append $terms (printf "%s in (%s)" .key (join "," .values)) -}}
{{- else if eq .operator "NotIn" -}}{{- $terms = append $terms (printf "%s notin (%s)" .key (join "," .values)) -}}
{{- else if eq .operator "Exists" -}}{{- $terms = append $terms .key -}}
{{- else if eq .operator "DoesNotExist" -}}{{- $terms = append $terms (printf "!%s" .key) -}}
{{- end -}}
{{- end -}}
{{- join "," $terms -}}
{{- end }}

{{- /* A LabelSelector as a CEL condition on variables.labels, the labels of the
request's namespace (the policies in scope-policy.yaml). */ -}}
{{- define "confighash.selectorCEL" -}}
{{- $terms := list -}}
{{- range $k, $v := .matchLabels -}}
{{- $terms = append $terms (printf "(%s in variables.labels && variables.labels[%s] == %s)" (squote $k) (squote $k) (squote $v)) -}}
{{- end -}}
{{- range .matchExpressions -}}
{{- $values := list -}}
{{- range .values }}{{ $values = append $values (squote .) }}{{ end -}}
{{- $in := printf "(%s in variables.labels && variables.labels[%s] in [%s])" (squote .key) (squote .key) (join ", " $values) -}}
{{- if eq .operator "In" -}}{{- $terms = append $terms $in -}}
{{- else if eq .operator "NotIn" -}}{{- $terms = append $terms (printf "!%s" $in) -}}
{{- else if eq .operator "Exists" -}}{{- $terms = append $terms (printf "%s in variables.labels" (squote .key)) -}}
{{- else if eq .operator "DoesNotExist" -}}{{- $terms = append $terms (printf "!(%s in variables.labels)" (squote .key)) -}}
{{- end -}}
{{- end -}}
{{- if $terms }}{{ join " && " $terms }}{{ else }}true{{ end -}}
{{- end }}

{{- /* Whether a request is for an extraKinds entry, in CEL. */ -}}
{{- define "confighash.extraKindIs" -}}
request.resource.group == {{ squote (ternary (dir .apiVersion) "" (contains "/" .apiVersion)) }} && request.resource.resource == {{ squote .resource }}
{{- end }}

{{- /* For an extraKinds entry, in CEL: the object's spec equals the old object's but
along the path of its pod template (watcher-policy.yaml). */ -}}
{{- define "confighash.specButTemplate" -}}
{{- $parts := splitList "." .template -}}
{{- if or (lt (len $parts) 2) (ne (first $parts) "spec") }}{{ fail (printf "extraKinds: %s's template %q is not under spec" .kind .template) }}{{ end -}}
{{- $checks := list -}}
{{- range $i := untilStep 1 (len $parts) 1 -}}
{{- $at := join "." (slice $parts 0 $i) -}}
{{- $key := index $parts $i -}}
{{- $checks = append $checks (printf "object.%s.all(k, k == '%s' || (k in oldObject.%s && object.%s[k] == oldObject.%s[k])) && oldObject.%s.all(k, k == '%s' || k in object.%s)" $at $key $at $at $at $at $key $at) -}}
{{- end -}}
{{- join " && " $checks -}}
{{- end }}

{{- /* Flags both components share, where the values differ from the defaults. */ -}}
{{- define "confighash.sharedArgs" -}}
{{- if not .Values.reloaderAnnotations }}
- --reloader-annotations=false
{{- end }}
{{- if ne (join "," .Values.kinds) "deployments,statefulsets,daemonsets,cronjobs,jobs,rollouts" }}
- {{ printf "--kinds=%s" (join "," .Values.kinds) | quote }}
{{- end }}
{{- if .Values.enableCSIIntegration }}
- --enable-csi-integration
{{- end }}
{{- if and .Values.ignoreConfigMaps .Values.ignoreSecrets }}
{{- fail "ignoreConfigMaps and ignoreSecrets both: nothing would count" }}
{{- else if .Values.ignoreConfigMaps }}
- --resources-to-ignore=configMaps
{{- else if .Values.ignoreSecrets }}
- --resources-to-ignore=secrets
{{- end }}
{{- range .Values.extraKinds }}
- {{ printf "--extra-kind=%s:%s:%s:%s" .apiVersion (required "extraKinds: each needs kind" .kind) .resource .template | quote }}
{{- end }}
{{- with .Values.sourceLabelSelector }}
- {{ printf "--source-label-selector=%s" . | quote }}
{{- end }}
{{- with .Values.pacing.waveSize }}
- {{ printf "--wave-size=%v" . | quote }}
{{- end }}
{{- with .Values.pacing.rolloutWindow }}
- {{ printf "--rollout-window=%s" . | quote }}
{{- end }}
{{- if .Values.pinByDefault }}
- --pin-by-default
{{- end }}
{{- with include "confighash.selectorFlag" .Values.namespaceSelector }}
{{- if ne . "confighash.dev/injection=enabled" }}
- {{ printf "--namespace-selector=%s" . | quote }}
{{- end }}
{{- end }}
{{- with include "confighash.selectorFlag" .Values.everyNamespaceSelector }}
{{- if ne . "confighash.dev/injection=all" }}
- {{ printf "--every-workload-namespace-selector=%s" . | quote }}
{{- end }}
{{- end }}
{{- end }}

{{- /* Pod placement and metadata of a component: (dict "root" $ "values" .Values.watcher "name" "confighash-watcher"). */ -}}
{{- define "confighash.podSpec" -}}
{{- with .values.priorityClassName | default .root.Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.nodeSelector }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.tolerations }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.topologySpreadConstraints }}
topologySpreadConstraints: {{- toYaml . | nindent 2 }}
{{- end }}
{{- if .values.affinity }}
affinity: {{- toYaml .values.affinity | nindent 2 }}
{{- else }}
{{ include "confighash.antiAffinity" .name }}
{{- end }}
{{- end }}
