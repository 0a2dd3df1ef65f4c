{{- /* The name in the components' labels, app.kubernetes.io/name: <name>-webhook and
<name>-watcher. Unlike most charts', neither it nor the fullname follows the release's
name: the Deployments' selectors could not change with it, and the kustomize install has
the same names. */ -}}
{{- define "confighash.name" -}}
{{- $name := .Values.nameOverride | default "confighash" -}}
{{- if gt (len $name) 40 }}{{ fail (printf "nameOverride %q: at most 40 characters, so that %s-webhook fits a label value" $name $name) }}{{ end -}}
{{- $name -}}
{{- end }}

{{- /* The prefix of the name of every object the chart installs. */ -}}
{{- define "confighash.fullname" -}}
{{- $name := .Values.fullnameOverride | default (include "confighash.name" .) -}}
{{- if gt (len $name) 40 }}{{ fail (printf "fullnameOverride %q: at most 40 characters, so that the Service %s-webhook fits a DNS label" $name $name) }}{{ end -}}
{{- $name -}}
{{- end }}

{{- /* image.registry, when set, takes the place of the registry repository names. */ -}}
{{- define "confighash.image" -}}
{{- $repository := required "image.repository: the image of both components" .Values.image.repository -}}
{{- with .Values.image.registry -}}
{{- $parts := splitList "/" $repository -}}
{{- $first := first $parts -}}
{{- if and (gt (len $parts) 1) (or (contains "." $first) (contains ":" $first) (eq $first "localhost")) }}{{ $repository = join "/" (rest $parts) }}{{ end -}}
{{- $repository = printf "%s/%s" (trimSuffix "/" .) $repository -}}
{{- end -}}
{{- if .Values.image.digest }}{{ $repository }}@{{ .Values.image.digest }}{{ else }}{{ $repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}{{ end -}}
{{- end }}

{{- define "confighash.labels" -}}
app.kubernetes.io/part-of: confighash
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end }}

{{- /* A component's selector: (dict "root" $ "component" "webhook"). */ -}}
{{- define "confighash.selectorLabels" -}}
app.kubernetes.io/name: {{ include "confighash.name" .root }}-{{ .component }}
{{- end }}

{{- /* The name, namespace and labels of a component's Deployment and Service. */ -}}
{{- define "confighash.componentMeta" -}}
name: {{ include "confighash.fullname" .root }}-{{ .component }}
namespace: {{ .root.Release.Namespace }}
labels:
  {{- include "confighash.selectorLabels" . | nindent 2 }}
  {{- include "confighash.labels" .root | nindent 2 }}
{{- end }}

{{- /* A component's Deployment: (dict "root" $ "component" "webhook" "container" <its
args, env, ports and mounts> "volumes" <its volumes>), the rest from .Values.<component>. */ -}}
{{- define "confighash.deployment" -}}
{{- $v := index .root.Values .component -}}
{{- $labels := include "confighash.selectorLabels" . -}}
{{- $podLabels := printf "%s\n%s" $labels (include "confighash.labels" .root) -}}
{{- range $k, $_ := $v.podLabels }}
{{- if hasKey ($podLabels | fromYaml) $k }}{{ fail (printf "%s.podLabels: %s is the chart's own label" $.component $k) }}{{ end }}
{{- end -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  {{- include "confighash.componentMeta" . | nindent 2 }}
spec:
  {{- if not (kindIs "invalid" $v.replicas) }}
  replicas: {{ $v.replicas }}
  {{- end }}
  selector:
    matchLabels: {{- $labels | nindent 6 }}
  template:
    metadata:
      labels:
        {{- $podLabels | nindent 8 }}
        {{- with $v.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- with $v.podAnnotations }}
      annotations: {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      serviceAccountName: {{ include "confighash.fullname" .root }}-{{ .component }}
      {{- with $v.podSecurityContext }}
      securityContext: {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.priorityClassName | default .root.Values.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      {{- with .root.Values.imagePullSecrets }}
      imagePullSecrets:
      {{- range . }}
      - {{ if kindIs "string" . }}{name: {{ . | quote }}}{{ else }}{{ toJson . }}{{ end }}
      {{- end }}
      {{- end }}
      {{- with $v.nodeSelector }}
      nodeSelector: {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.tolerations }}
      tolerations: {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.topologySpreadConstraints }}
      topologySpreadConstraints: {{- toYaml . | nindent 8 }}
      {{- end }}
      affinity:
      {{- if $v.affinity }}
        {{- toYaml $v.affinity | nindent 8 }}
      {{- else }}
        podAntiAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 100
            podAffinityTerm:
              topologyKey: kubernetes.io/hostname
              labelSelector:
                matchLabels: {{- $labels | nindent 18 }}
      {{- end }}
      containers:
      - name: {{ .component }}
        image: {{ include "confighash.image" .root }}
        {{- with .root.Values.image.pullPolicy }}
        imagePullPolicy: {{ . }}
        {{- end }}
        {{- .container | nindent 8 }}
        readinessProbe:
          httpGet: {path: /readyz, port: ops}
          periodSeconds: 5
        livenessProbe:
          httpGet: {path: /healthz, port: ops}
          periodSeconds: 10
        {{- with $v.resources }}
        resources: {{- toYaml . | nindent 10 }}
        {{- end }}
        {{- with $v.securityContext }}
        securityContext: {{- toYaml . | nindent 10 }}
        {{- end }}
      {{- with .volumes }}
      {{- . | trim | nindent 6 }}
      {{- end }}
{{- end }}

{{- /* A component's Service, with its ports: (dict "root" $ "component" "webhook" "ports" <YAML>). */ -}}
{{- define "confighash.service" -}}
apiVersion: v1
kind: Service
metadata:
  {{- include "confighash.componentMeta" . | nindent 2 }}
spec:
  selector: {{- include "confighash.selectorLabels" . | nindent 4 }}
  ports: {{- .ports | nindent 2 }}
{{- end }}

{{- /* A component's PodDisruptionBudget, which never blocks a drain: with one replica
(or none) it lets that one go; with more, minAvailable must stay below them, and
maxUnavailable above 0. (dict "root" $ "component" "webhook") */ -}}
{{- define "confighash.podDisruptionBudget" -}}
{{- $v := index .root.Values .component -}}
{{- $pdb := $v.podDisruptionBudget | default dict -}}
{{- if $pdb.enabled -}}
{{- $at := printf "%s.podDisruptionBudget" .component -}}
{{- $replicas := int ($v.replicas | default 1) -}}
{{- $max := "" -}}
{{- $min := "" -}}
{{- if not (kindIs "invalid" $pdb.maxUnavailable) }}{{ $max = toString $pdb.maxUnavailable }}{{ end -}}
{{- if not (kindIs "invalid" $pdb.minAvailable) }}{{ $min = toString $pdb.minAvailable }}{{ end -}}
{{- if has $max (list "0" "0%") }}{{ fail (printf "%s.maxUnavailable: %s would block every drain" $at $max) }}{{ end -}}
{{- if and (not $max) $min (gt $replicas 1) -}}
{{- $needed := int $min -}}
{{- if hasSuffix "%" $min }}{{ $needed = div (add (mul $replicas (trimSuffix "%" $min | int)) 99) 100 }}{{ end -}}
{{- if ge $needed $replicas }}{{ fail (printf "%s.minAvailable: %s of %d replicas would block every drain" $at $min $replicas) }}{{ end -}}
{{- end -}}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "confighash.fullname" .root }}-{{ .component }}
  namespace: {{ .root.Release.Namespace }}
  labels: {{- include "confighash.labels" .root | nindent 4 }}
spec:
  {{- if $max }}
  maxUnavailable: {{ $max }}
  {{- else if and $min (gt $replicas 1) }}
  minAvailable: {{ $min }}
  {{- else }}
  maxUnavailable: 1
  {{- end }}
  selector:
    matchLabels: {{- include "confighash.selectorLabels" . | nindent 6 }}
{{- end }}
{{- end }}

{{- /* A component's extraArgs, a list of flags or a map of flag names to values. */ -}}
{{- define "confighash.extraArgs" -}}
{{- if kindIs "map" . }}
{{- range $name, $value := . }}
- {{ printf "--%s=%v" (trimPrefix "--" $name) $value | quote }}
{{- end }}
{{- else }}
{{- range . }}
- {{ toString . | quote }}
{{- end }}
{{- end }}
{{- end }}

{{- /* A component's env: its own variables, then its extraEnv, which may not set one of
them again. (dict "own" <YAML list> "extra" .Values.webhook.extraEnv "at" "webhook.extraEnv") */ -}}
{{- define "confighash.env" -}}
{{- $own := list -}}
{{- range fromYamlArray .own }}{{ $own = append $own .name }}{{ end -}}
env:
{{- .own | nindent 0 }}
{{- range .extra }}
{{- $name := required (printf "%s: each needs a name" $.at) .name }}
{{- if has $name $own }}{{ fail (printf "%s: %s is set by the chart; use its value instead" $.at $name) }}{{ end }}
- {{ toJson . }}
{{- end }}
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
{{- join " && " $terms -}}
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

{{- /* A LabelSelector value without its empty parts, as JSON: {} when it selects by
nothing (null, or neither matchLabels nor matchExpressions). */ -}}
{{- define "confighash.selector" -}}
{{- $s := dict -}}
{{- with . }}
{{- with .matchLabels }}{{ $_ := set $s "matchLabels" . }}{{ end -}}
{{- with .matchExpressions }}{{ $_ := set $s "matchExpressions" . }}{{ end -}}
{{- end }}
{{- toJson $s -}}
{{- end }}

{{- /* namespaceSelector, as JSON. Selecting by nothing, it would select every namespace,
which the components refuse too. */ -}}
{{- define "confighash.namespaceSelector" -}}
{{- $s := include "confighash.selector" .Values.namespaceSelector -}}
{{- if eq $s "{}" }}{{ fail "namespaceSelector has neither matchLabels nor matchExpressions: it would select every namespace" }}{{ end -}}
{{- $s -}}
{{- end }}

{{- /* The NetworkPolicy peers that may scrape the ops ports, as JSON: metricsFrom, or
else the pods metrics.podSelector selects in the namespaces metrics.namespaceSelector
selects (an empty one: all); both empty, none: any source. */ -}}
{{- define "confighash.metricsFrom" -}}
{{- $np := .Values.networkPolicy -}}
{{- $peers := $np.metricsFrom | default list -}}
{{- if not $peers -}}
{{- $metrics := $np.metrics | default dict -}}
{{- $namespaces := include "confighash.selector" $metrics.namespaceSelector | fromJson -}}
{{- $pods := include "confighash.selector" $metrics.podSelector | fromJson -}}
{{- if or $namespaces $pods -}}
{{- $peer := dict "namespaceSelector" $namespaces -}}
{{- with $pods }}{{ $_ := set $peer "podSelector" . }}{{ end -}}
{{- $peers = list $peer -}}
{{- end -}}
{{- end -}}
{{- toJson $peers -}}
{{- end }}

{{- /* kinds, as JSON. None cannot be said to the components, whose empty --kinds is every
kind. */ -}}
{{- define "confighash.kinds" -}}
{{- if not .Values.kinds }}{{ fail "kinds lists no workload kind: to stop confighash, uninstall it" }}{{ end -}}
{{- toJson .Values.kinds -}}
{{- end }}

{{- /* Flags both components share, where the values differ from the defaults. An
everyNamespaceSelector that selects by nothing is given as an empty flag: no namespace
has every workload counted. */ -}}
{{- define "confighash.sharedArgs" -}}
{{- $kinds := include "confighash.kinds" . | fromJsonArray }}
{{- if not .Values.reloaderAnnotations }}
- --reloader-annotations=false
{{- end }}
{{- if ne (join "," $kinds) "deployments,statefulsets,daemonsets,cronjobs,jobs,rollouts" }}
- {{ printf "--kinds=%s" (join "," $kinds) | quote }}
{{- end }}
{{- if .Values.enableCSIIntegration }}
- --enable-csi-integration
{{- end }}
{{- if not .Values.reloadOnCreate }}
- --reload-on-create=false
{{- end }}
{{- if .Values.reloadOnDelete }}
- --reload-on-delete
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
{{- if and .Values.pacing.onFailure (ne .Values.pacing.onFailure "halt") }}
- {{ printf "--on-failure=%s" .Values.pacing.onFailure | quote }}
{{- end }}
{{- if .Values.pinByDefault }}
- --pin-by-default
{{- end }}
{{- $selector := include "confighash.selectorFlag" (include "confighash.namespaceSelector" . | fromJson) }}
{{- if ne $selector "confighash.dev/injection=enabled" }}
- {{ printf "--namespace-selector=%s" $selector | quote }}
{{- end }}
{{- $every := include "confighash.selectorFlag" (include "confighash.selector" .Values.everyNamespaceSelector | fromJson) }}
{{- if ne $every "confighash.dev/injection=all" }}
- {{ printf "--every-workload-namespace-selector=%s" $every | quote }}
{{- end }}
{{- end }}
