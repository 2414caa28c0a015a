{{/* The chart's name, or nameOverride. */}}
{{- define "tidemark.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The release's full name, the prefix of every object. Short enough that the longest suffix,
"-writer-coordinator", still fits in 63 characters (a Service's name is a DNS label).
*/}}
{{- define "tidemark.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 44 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 44 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 44 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "tidemark.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "tidemark.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tidemark
{{- end }}

{{/* Selector labels of the objects of one service; called with (dict "root" $ "service" NAME). */}}
{{- define "tidemark.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tidemark.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .service }}
{{- end }}

{{/*
The services this chart deploys, in a fixed order, by their key in values.yaml; the service's
own name (its command, its objects' suffix) is the key in kebab case: writerCoordinator is the
writer-coordinator.
*/}}
{{- define "tidemark.services" -}}
cleaner archiver writerCoordinator
{{- end }}

{{/* The writer-coordinator's Service, the host in the URL writers are given. */}}
{{- define "tidemark.writerCoordinatorName" -}}
{{- printf "%s-writer-coordinator" (include "tidemark.fullname" .) }}
{{- end }}

{{/* The URL Spark writers set as tidemark.writer.coordinator.url (from any namespace). */}}
{{- define "tidemark.writerCoordinatorUrl" -}}
{{- $scheme := ternary "https" "http" (not (empty .Values.writerCoordinator.tls.existingSecret)) }}
{{- printf "%s://%s.%s.svc:%v" $scheme (include "tidemark.writerCoordinatorName" .) .Release.Namespace .Values.writerCoordinator.http.port }}
{{- end }}

{{/*
The Secret holding the marker API's token under the key "token" (or existingSecretKey); the
chart's own is <fullname>-coordinator-token, a name that still fits in a DNS label.
*/}}
{{- define "tidemark.writerCoordinatorTokenSecret" -}}
{{- .Values.writerCoordinator.auth.existingSecret | default (printf "%s-coordinator-token" (include "tidemark.fullname" .)) }}
{{- end }}

{{/* The image of every service: by digest when one is given. */}}
{{- define "tidemark.image" -}}
{{- if .Values.image.digest }}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" .Values.image.digest) }}
{{- fail (printf "image.digest must be sha256:<64 hex digits>, not %q" .Values.image.digest) }}
{{- end }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/*
The ServiceAccount of one service; called with (dict "root" $ "key" KEY), KEY its key in values.yaml.
Each service has its own, so that a permission or a cloud role (IRSA) given to one is not given
to the others.
*/}}
{{- define "tidemark.serviceAccountName" -}}
{{- $own := (index .root.Values .key).serviceAccount | default dict }}
{{- if .root.Values.serviceAccount.create }}
{{- $own.name | default (printf "%s-%s" (include "tidemark.fullname" .root) (kebabcase .key)) }}
{{- else }}
{{- $own.name | default "default" }}
{{- end }}
{{- end }}

{{/*
The Kafka client security settings every service gets, as KEY=VALUE lines (the services'
`--conf tidemark.kafka.*`), after checking kafka.security. Secrets appear only as file paths.
*/}}
{{- define "tidemark.kafkaSecurityConf" -}}
{{- $s := .Values.kafka.security }}
{{- $protocol := $s.protocol | default "PLAINTEXT" }}
{{- if not (has $protocol (list "PLAINTEXT" "SSL" "SASL_PLAINTEXT" "SASL_SSL")) }}
{{- fail (printf "kafka.security.protocol must be PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL, not %q" $protocol) }}
{{- end }}
{{- $sasl := hasPrefix "SASL_" $protocol }}
{{- $tls := hasSuffix "SSL" $protocol }}
{{- if and $s.tlsSecret.name (not $tls) }}
{{- fail (printf "kafka.security.tlsSecret.name is set but kafka.security.protocol %s does not use TLS (SSL or SASL_SSL)" $protocol) }}
{{- end }}
{{- if and $s.tlsSecret.clientCertificate (not $s.tlsSecret.name) }}
{{- fail "kafka.security.tlsSecret.clientCertificate needs kafka.security.tlsSecret.name, the Secret with tls.crt and tls.key" }}
{{- end }}
{{- if and (not $sasl) (or $s.saslMechanism $s.saslUsername $s.saslPasswordSecret.name) }}
{{- fail (printf "kafka.security.sasl* is set but kafka.security.protocol %s does not use SASL (SASL_PLAINTEXT or SASL_SSL)" $protocol) }}
{{- end }}
{{- if $sasl }}
{{- if not (has $s.saslMechanism (list "PLAIN" "SCRAM-SHA-256" "SCRAM-SHA-512" "OAUTHBEARER")) }}
{{- fail (printf "kafka.security.saslMechanism must be PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER with protocol %s, not %q" $protocol $s.saslMechanism) }}
{{- end }}
{{- if eq $s.saslMechanism "OAUTHBEARER" }}
{{- if ne $s.oauthbearerMethod "aws_msk_iam" }}
{{- fail (printf "kafka.security.saslMechanism OAUTHBEARER needs kafka.security.oauthbearerMethod aws_msk_iam (the only one the services have), not %q" $s.oauthbearerMethod) }}
{{- end }}
{{- else if not (and $s.saslUsername $s.saslPasswordSecret.name $s.saslPasswordSecret.key) }}
{{- fail (printf "kafka.security.saslMechanism %s needs kafka.security.saslUsername and kafka.security.saslPasswordSecret.name and .key (an existing Secret holding the password)" $s.saslMechanism) }}
{{- end }}
{{- end }}
{{- if ne $protocol "PLAINTEXT" }}
tidemark.kafka.security.protocol={{ $protocol }}
{{- end }}
{{- if $s.tlsSecret.name }}
tidemark.kafka.ssl.ca.location=/var/run/secrets/tidemark/kafka/tls/ca.crt
{{- if $s.tlsSecret.clientCertificate }}
tidemark.kafka.ssl.certificate.location=/var/run/secrets/tidemark/kafka/tls/tls.crt
tidemark.kafka.ssl.key.location=/var/run/secrets/tidemark/kafka/tls/tls.key
{{- end }}
{{- end }}
{{- if $sasl }}
tidemark.kafka.sasl.mechanism={{ $s.saslMechanism }}
{{- if eq $s.saslMechanism "OAUTHBEARER" }}
tidemark.kafka.sasl.oauthbearer.method={{ $s.oauthbearerMethod }}
{{- with ($s.awsRegion | default .Values.s3.region) }}
tidemark.kafka.aws.region={{ . }}
{{- end }}
{{- else }}
tidemark.kafka.sasl.username={{ $s.saslUsername }}
tidemark.kafka.sasl.password.file=/var/run/secrets/tidemark/kafka/sasl/password
{{- end }}
{{- end }}
{{- end }}

{{/*
The TCP ports of a list of host:port addresses (kafka.bootstrap), each once; a NetworkPolicy
allows egress to these unless networkPolicy.egress.kafka.ports lists others.
*/}}
{{- define "tidemark.bootstrapPorts" -}}
{{- $ports := list }}
{{- range $address := splitList "," . }}
{{- $port := regexFind "[0-9]+$" (trim $address) }}
{{- if not (regexMatch ":[0-9]+$" (trim $address)) }}
{{- fail (printf "kafka.bootstrap: %q has no port (host:port expected)" (trim $address)) }}
{{- end }}
{{- $ports = append $ports (int $port) }}
{{- end }}
{{- $ports | uniq | toJson }}
{{- end }}

{{/* The S3 endpoint's port: s3.endpoint's, else its scheme's; 443 for AWS S3 (no endpoint). */}}
{{- define "tidemark.s3Port" -}}
{{- with .Values.s3.endpoint }}
{{- $url := urlParse . }}
{{- $port := regexFind ":[0-9]+$" $url.host | trimPrefix ":" }}
{{- if $port }}{{ $port }}{{ else if eq $url.scheme "http" }}80{{ else }}443{{ end }}
{{- else }}443
{{- end }}
{{- end }}

{{/*
A value of a service's `conf` map as the services read it: strings as they are, whole numbers
without an exponent (Helm reads unquoted numbers as floats), booleans as true/false.
*/}}
{{- define "tidemark.confValue" -}}
{{- if kindIs "float64" . }}
{{- if eq . (floor .) }}{{ int64 . }}{{ else }}{{ . }}{{ end }}
{{- else }}
{{- . }}
{{- end }}
{{- end }}

{{/* The series the alerts look at. */}}
{{- define "tidemark.metricSelector" -}}
{{- if .Values.prometheusRule.metricSelector }}
{{- .Values.prometheusRule.metricSelector }}
{{- else }}
{{- printf "namespace=%q, job=~%q" .Release.Namespace (printf "%s-(cleaner|archiver|writer-coordinator)" (include "tidemark.fullname" .)) }}
{{- end }}
{{- end }}

{{/* The operator's series (its per-table metrics and its scrape targets). */}}
{{- define "tidemark.operatorSelector" -}}
{{- if .Values.prometheusRule.operator.selector }}
{{- .Values.prometheusRule.operator.selector }}
{{- else }}
{{- printf "namespace=%q, job=%q" .Release.Namespace (printf "%s-operator" (include "tidemark.fullname" .)) }}
{{- end }}
{{- end }}

{{/* The writer-coordinator's scrape targets, for the alert on it being down. */}}
{{- define "tidemark.writerCoordinatorSelector" -}}
{{- if .Values.prometheusRule.writerCoordinatorSelector }}
{{- .Values.prometheusRule.writerCoordinatorSelector }}
{{- else }}
{{- printf "namespace=%q, job=%q" .Release.Namespace (include "tidemark.writerCoordinatorName" .) }}
{{- end }}
{{- end }}

{{/*
The operator's RBAC rules: its HudiTables (read, watch, and patch for kopf's finalizer and
annotations) and their status, Events about them, the compaction Jobs it creates and reads (never
lists or deletes: the owner reference and the TTL clean them up), and kopf's peering object.
Called with (dict "clusterwide" BOOL).
*/}}
{{- define "tidemark.operatorRules" -}}
- apiGroups: [tidemark.io]
  resources: [huditables]
  verbs: [get, list, watch, patch]
- apiGroups: [tidemark.io]
  resources: [huditables/status]
  verbs: [get, patch]
{{- /* a Job's ownerReference has blockOwnerDeletion (kopf's), which OwnerReferencesPermissionEnforcement
(OpenShift) lets only those who may update the owner's finalizers set */}}
- apiGroups: [tidemark.io]
  resources: [huditables/finalizers]
  verbs: [update]
- apiGroups: [""]
  resources: [events]
  verbs: [create]
- apiGroups: [batch]
  resources: [jobs]
  verbs: [create, get]
- apiGroups: [kopf.dev]
  resources: [{{ ternary "clusterkopfpeerings" "kopfpeerings" .clusterwide }}]
  verbs: [get, list, watch, patch]
{{- end }}
