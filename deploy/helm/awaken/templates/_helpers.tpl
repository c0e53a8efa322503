{{/* The release's resource name. */}}
{{- define "awaken.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "awaken.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "awaken.labels" -}}
{{ include "awaken.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "awaken.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "awaken.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "awaken.replicas" -}}
{{- if eq .Values.mode "single" -}}1{{- else -}}{{ .Values.replicaCount }}{{- end -}}
{{- end -}}

{{/* Longest shutdown: the preStop pause, in-flight requests, then the drain. */}}
{{- define "awaken.gracePeriod" -}}
{{- add .Values.preStopSleepSecs .Values.server.shutdownTimeoutSecs .Values.cluster.drainTimeoutSecs 5 -}}
{{- end -}}

{{/* awaken.toml: what the chart's values say (configToml is a file of its own, read after it). */}}
{{- define "awaken.toml" -}}
{{- $server := dict "address" (printf "0.0.0.0:%v" .Values.server.port) "shutdown" (dict "timeout_secs" (int .Values.server.shutdownTimeoutSecs)) -}}
{{- $store := dict "kind" "postgres" "pool_size" (int .Values.postgres.poolSize) -}}
{{- $rendered := dict "server" $server "store" $store -}}
{{- if eq .Values.mode "cluster" -}}
{{- $_ := set $rendered "cluster" (dict "nats_url" .Values.nats.url "replicas" (int .Values.nats.replicas) "shards" (int .Values.cluster.shards) "lease_ttl_secs" (int .Values.cluster.leaseTtlSecs) "claim_lease_ms" (int .Values.cluster.claimLeaseMs) "drain_timeout_secs" (int .Values.cluster.drainTimeoutSecs)) -}}
{{- end -}}
{{- toToml $rendered -}}
{{- end -}}
