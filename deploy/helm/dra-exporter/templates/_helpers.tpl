{{/* The chart name, for app.kubernetes.io/name. */}}
{{- define "dra-exporter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The full name of the objects: the release name, suffixed unless it already names the chart. */}}
{{- define "dra-exporter.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "dra-exporter.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "dra-exporter.agentName" -}}
{{- printf "%s-node-agent" (include "dra-exporter.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object; pass (dict "ctx" $ "component" "exporter"). */}}
{{- define "dra-exporter.labels" -}}
{{ include "dra-exporter.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: dra-exporter
helm.sh/chart: {{ printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version | replace "+" "_" }}
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "dra-exporter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "dra-exporter.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
{{- if .component }}
app.kubernetes.io/component: {{ .component }}
{{- end }}
{{- end -}}

{{- define "dra-exporter.serviceAccountName" -}}
{{- if .Values.exporter.serviceAccount.create -}}
{{- default (include "dra-exporter.fullname" .) .Values.exporter.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.exporter.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "dra-exporter.agentServiceAccountName" -}}
{{- if .Values.nodeAgent.serviceAccount.create -}}
{{- default (include "dra-exporter.agentName" .) .Values.nodeAgent.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.nodeAgent.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
The hardened container security context, shared by both containers.
Pass the user id.
*/}}
{{- define "dra-exporter.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- if eq (int .) 0 }}
runAsNonRoot: false
runAsUser: 0
runAsGroup: 0
{{- else }}
runAsNonRoot: true
runAsUser: {{ . }}
runAsGroup: {{ . }}
{{- end }}
{{- end -}}
