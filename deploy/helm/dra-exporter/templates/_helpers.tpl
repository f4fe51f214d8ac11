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

{{/*
The exporter-toolkit web config (TLS, basic auth) of both processes: from
web.existingSecret, or rendered from web.config into a Secret of the chart.
webTLS and webBasicAuth say what it asks for ("true" or ""): web.tls and
web.basicAuth, or, for a config the chart renders, its own keys.
*/}}
{{- define "dra-exporter.webEnabled" -}}
{{- if or .Values.web.existingSecret .Values.web.config }}true{{ end -}}
{{- end -}}

{{- define "dra-exporter.webSecretName" -}}
{{- default (printf "%s-web-config" (include "dra-exporter.fullname" .) | trunc 63 | trimSuffix "-") .Values.web.existingSecret -}}
{{- end -}}

{{- define "dra-exporter.webTLS" -}}
{{- if or .Values.web.tls (and (not .Values.web.existingSecret) (hasKey (.Values.web.config | default dict) "tls_server_config")) }}true{{ end -}}
{{- end -}}

{{- define "dra-exporter.webBasicAuth" -}}
{{- if or .Values.web.basicAuth (and (not .Values.web.existingSecret) (hasKey (.Values.web.config | default dict) "basic_auth_users")) }}true{{ end -}}
{{- end -}}

{{/* The web config's arguments (when web is enabled); pass (dict "ctx" $ "probePort" N). */}}
{{- define "dra-exporter.webArgs" -}}
- --web.config.file=/etc/dra-exporter/web/web-config.yml
{{- if include "dra-exporter.webBasicAuth" .ctx }}
# A kubelet probe cannot send basic auth: /healthz and /readyz also answer,
# in plain HTTP and without auth (nothing else), on the probe port.
- --web.probe-address=:{{ .probePort }}
{{- end }}
{{- end -}}

{{/* The probe port as a container port (with basic auth); pass (dict "ctx" $ "probePort" N). */}}
{{- define "dra-exporter.probePort" -}}
- name: probe
  containerPort: {{ .probePort }}
  protocol: TCP
{{- end -}}

{{/*
Where the probes go: port and scheme lines of an httpGet. With basic auth,
the probe port (plain HTTP, no auth); with TLS alone, HTTPS on the metrics
port (the kubelet does not verify the certificate).
*/}}
{{- define "dra-exporter.probeTarget" -}}
{{- if and (include "dra-exporter.webEnabled" .) (include "dra-exporter.webBasicAuth" .) -}}
port: probe
{{- else -}}
port: metrics
{{- if and (include "dra-exporter.webEnabled" .) (include "dra-exporter.webTLS" .) }}
scheme: HTTPS
{{- end }}
{{- end -}}
{{- end -}}

{{/* The web config's volume mounts and volumes (when web is enabled). */}}
{{- define "dra-exporter.webMounts" -}}
- name: web-config
  mountPath: /etc/dra-exporter/web
  readOnly: true
{{- if .Values.web.tlsSecret }}
- name: web-tls
  mountPath: /etc/dra-exporter/tls
  readOnly: true
{{- end }}
{{- end -}}

{{- define "dra-exporter.webVolumes" -}}
- name: web-config
  secret:
    secretName: {{ include "dra-exporter.webSecretName" . }}
{{- if .Values.web.tlsSecret }}
- name: web-tls
  secret:
    secretName: {{ .Values.web.tlsSecret }}
{{- end }}
{{- end -}}

{{/*
An image reference: the repository, or with image.registry set that registry
and the repository's last element (where `make push REGISTRY=` puts it), and
the tag (default: the chart's appVersion). Pass (dict "registry" ... "image"
<the image's values> "ctx" $).
*/}}
{{- define "dra-exporter.image" -}}
{{- $repo := .image.repository -}}
{{- with .registry }}{{ $repo = printf "%s/%s" (trimSuffix "/" .) (base $repo) }}{{ end -}}
{{- printf "%s:%s" $repo (.image.tag | default .ctx.Chart.AppVersion) -}}
{{- end -}}
