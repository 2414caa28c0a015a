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
{{- printf "http://%s.%s.svc:%v" (include "tidemark.writerCoordinatorName" .) .Release.Namespace .Values.writerCoordinator.http.port }}
{{- end }}

{{/* The image of every service. */}}
{{- define "tidemark.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{- define "tidemark.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tidemark.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
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

{{/* The writer-coordinator's scrape targets, for the alert on it being down. */}}
{{- define "tidemark.writerCoordinatorSelector" -}}
{{- if .Values.prometheusRule.writerCoordinatorSelector }}
{{- .Values.prometheusRule.writerCoordinatorSelector }}
{{- else }}
{{- printf "namespace=%q, job=%q" .Release.Namespace (include "tidemark.writerCoordinatorName" .) }}
{{- end }}
{{- end }}
