{{- /* The watcher's container: args, env and ports. */ -}}
{{- define "confighash.watcherContainer" -}}
args:
- watcher
{{- with .Values.namespaces }}
- {{ printf "--namespaces=%s" (join "," (uniq .)) | quote }}
{{- end }}
{{- with include "confighash.sharedArgs" . | trim }}{{ . | nindent 0 }}{{ end }}
{{- with .Values.pacing.waveThreshold }}
- {{ printf "--wave-threshold=%v" . | quote }}
{{- end }}
{{- with .Values.pacing.maxRolling }}
- {{ printf "--max-rolling=%v" . | quote }}
{{- end }}
{{- if .Values.recreateFinishedJobs }}
- --recreate-finished-jobs
{{- end }}
{{- if .Values.runCronJobsOnChange }}
- --run-cronjobs-on-change
{{- end }}
{{- if .Values.pauseDeployments }}
- --pause-deployments
{{- end }}
{{- with .Values.pacing.waveTimeout }}
{{- if ne (toString .) "10m" }}
- {{ printf "--wave-timeout=%s" . | quote }}
{{- end }}
{{- end }}
{{- with .Values.pacing.prometheusURL }}
- {{ printf "--prometheus-url=%s" . | quote }}
{{- end }}
{{- range $name, $query := .Values.pacing.analysisQueries }}
- {{ printf "--analysis-query=%s=%s" $name $query | quote }}
{{- end }}
{{- include "confighash.extraArgs" .Values.watcher.extraArgs }}
{{ include "confighash.env" (dict "own" (include "confighash.watcherEnv" .) "extra" .Values.watcher.extraEnv "at" "watcher.extraEnv") }}
ports:
- {name: ops, containerPort: 8080}
{{- end }}

{{- /* The watcher's own environment variables. */ -}}
{{- define "confighash.watcherEnv" -}}
- name: CONFIGHASH_NAMESPACE
  valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
- name: CONFIGHASH_LEADER_ELECT_IDENTITY
  valueFrom: {fieldRef: {fieldPath: metadata.name}}
{{- with .Values.alerts }}
{{- if .enabled }}
- {name: CONFIGHASH_ALERT_ON_RELOAD, value: "true"}
{{- with .sink }}
- {name: CONFIGHASH_ALERT_SINK, value: {{ . | quote }}}
{{- end }}
- name: CONFIGHASH_ALERT_WEBHOOK_URL
  valueFrom: {secretKeyRef: {name: {{ required "alerts.enabled needs alerts.webhookURLSecret.name" .webhookURLSecret.name | quote }}, key: {{ .webhookURLSecret.key | default "url" | quote }}}}
{{- with .clusterName }}
- {name: CONFIGHASH_CLUSTER_NAME, value: {{ . | quote }}}
{{- end }}
{{- with .additionalInfo }}
- {name: CONFIGHASH_ALERT_ADDITIONAL_INFO, value: {{ . | quote }}}
{{- end }}
{{- with .proxy }}
- {name: CONFIGHASH_ALERT_WEBHOOK_PROXY, value: {{ . | quote }}}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
