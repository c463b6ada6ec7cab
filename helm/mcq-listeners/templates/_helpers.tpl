{{- define "mcq.labels" -}}
app.kubernetes.io/name: mcq-listener
app.kubernetes.io/instance: {{ .root.Release.Name }}
mcq.listener: {{ .listener.name | quote }}
{{- end -}}

{{- define "mcq.resource" -}}
{{ printf "%s-%s" .root.Release.Name (.listener.name | lower) | trunc 52 | trimSuffix "-" }}
{{- end -}}

{{- define "mcq.container" -}}
image: "{{ .root.Values.image.repository }}:{{ .root.Values.image.tag }}"
imagePullPolicy: {{ .root.Values.image.pullPolicy }}
env:
{{- range $k, $v := .root.Values.env }}
  - name: {{ $k }}
    value: {{ $v | quote }}
{{- end }}
{{- with .root.Values.envFromSecret }}
envFrom:
  - secretRef:
      name: {{ . }}
{{- end }}
resources:
{{ toYaml .root.Values.resources | indent 2 }}
{{- end -}}
