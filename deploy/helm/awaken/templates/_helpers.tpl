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

{{/* Where the Secrets with files are mounted. */}}
{{- define "awaken.natsAuthDir" -}}/etc/awaken/nats-auth{{- end -}}
{{- define "awaken.natsTlsDir" -}}/etc/awaken/nats-tls{{- end -}}
{{- define "awaken.postgresTlsDir" -}}/etc/awaken/postgres-tls{{- end -}}

{{/* The node's NATS login settings, from nats.auth; refuses a half or double login. */}}
{{- define "awaken.natsLogin" -}}
{{- $auth := .Values.nats.auth -}}
{{- $dir := include "awaken.natsAuthDir" . -}}
{{- $login := dict -}}
{{- if $auth.user -}}
{{- if not $auth.passwordKey -}}{{- fail "nats.auth.user needs nats.auth.passwordKey" -}}{{- end -}}
{{- $_ := set $login "nats_user" $auth.user -}}
{{- $_ := set $login "nats_password_file" (printf "%s/%s" $dir $auth.passwordKey) -}}
{{- else if $auth.passwordKey -}}
{{- fail "nats.auth.passwordKey needs nats.auth.user" -}}
{{- end -}}
{{- range $key, $setting := dict "tokenKey" "nats_token_file" "nkeySeedKey" "nats_nkey_seed_file" "credsKey" "nats_creds_file" -}}
{{- with index $auth $key -}}
{{- $_ := set $login $setting (printf "%s/%s" $dir .) -}}
{{- end -}}
{{- end -}}
{{- if gt (len (without (keys $login) "nats_user")) 1 -}}
{{- fail "nats.auth: set one login (user and passwordKey, tokenKey, nkeySeedKey or credsKey)" -}}
{{- end -}}
{{- if and $login (not $auth.existingSecret) -}}
{{- fail "nats.auth: the keys name files of nats.auth.existingSecret, which is not set" -}}
{{- end -}}
{{- if .Values.nats.tls.existingSecret -}}
{{- $tls := include "awaken.natsTlsDir" . -}}
{{- $_ := set $login "nats_tls_ca_file" (printf "%s/ca.crt" $tls) -}}
{{- if .Values.nats.tls.clientCertificate -}}
{{- $_ := set $login "nats_tls_cert_file" (printf "%s/tls.crt" $tls) -}}
{{- $_ := set $login "nats_tls_key_file" (printf "%s/tls.key" $tls) -}}
{{- end -}}
{{- end -}}
{{- toJson $login -}}
{{- end -}}

{{/* awaken.toml: what the chart's values say (configToml is a file of its own, read after it). */}}
{{- define "awaken.toml" -}}
{{- $server := dict "address" (printf "0.0.0.0:%v" .Values.server.port) "shutdown" (dict "timeout_secs" (int .Values.server.shutdownTimeoutSecs)) -}}
{{- $store := dict "kind" "postgres" "pool_size" (int .Values.postgres.poolSize) -}}
{{- with .Values.postgres.sslMode -}}
{{- $_ := set $store "ssl_mode" . -}}
{{- end -}}
{{- if .Values.postgres.tls.existingSecret -}}
{{- $tls := include "awaken.postgresTlsDir" . -}}
{{- $_ := set $store "ssl_root_cert_file" (printf "%s/ca.crt" $tls) -}}
{{- if .Values.postgres.tls.clientCertificate -}}
{{- $_ := set $store "ssl_client_cert_file" (printf "%s/tls.crt" $tls) -}}
{{- $_ := set $store "ssl_client_key_file" (printf "%s/tls.key" $tls) -}}
{{- end -}}
{{- end -}}
{{- $rendered := dict "server" $server "store" $store -}}
{{- if eq .Values.mode "cluster" -}}
{{- $cluster := dict "nats_url" .Values.nats.url "replicas" (int .Values.nats.replicas) "shards" (int .Values.cluster.shards) "lease_ttl_secs" (int .Values.cluster.leaseTtlSecs) "claim_lease_ms" (int .Values.cluster.claimLeaseMs) "drain_timeout_secs" (int .Values.cluster.drainTimeoutSecs) "run_input" .Values.cluster.runInput -}}
{{- $cluster = merge $cluster (include "awaken.natsLogin" . | fromJson) -}}
{{- $_ := set $rendered "cluster" $cluster -}}
{{- end -}}
{{- toToml $rendered -}}
{{- end -}}
