{{/* Names: <release>-<component>, 52 characters at most (CronJob names get 11 more). */}}
{{- define "mcq.fullname" -}}
{{- printf "%s-%s" .root.Release.Name .name | lower | replace "_" "-" | trunc 52 | trimSuffix "-" -}}
{{- end -}}

{{- define "mcq.selector" -}}
app.kubernetes.io/name: mcq
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- with .listener }}
mcq.example/listener: {{ . | quote }}
{{- end }}
{{- end -}}

{{- define "mcq.labels" -}}
{{ include "mcq.selector" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{- define "mcq.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{ default (printf "%s-mcq" .Release.Name) .Values.serviceAccount.name }}
{{- else -}}
{{ default "default" .Values.serviceAccount.name }}
{{- end -}}
{{- end -}}

{{- define "mcq.image" -}}
{{- if .Values.image.digest -}}
{{ printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else -}}
{{ printf "%s:%s" .Values.image.repository .Values.image.tag }}
{{- end -}}
{{- end -}}

{{/* The settings as MCQ_<SECTION>__<FIELD>; credentials only as secretKeyRef. */}}
{{- define "mcq.env" -}}
{{- $s := .Values.settings -}}
- {name: MCQ_HOME, value: /var/lib/mcq}
- {name: MCQ_STATE_DIR, value: /var/lib/mcq/state}
- {name: HOME, value: /tmp}
- {name: MCQ_TOPIC_PREFIX, value: {{ $s.topicPrefix | quote }}}
- {name: MCQ_LOG__FORMAT, value: {{ $s.log.format | default "json" | quote }}}
- {name: MCQ_LOG__LEVEL, value: {{ $s.log.level | default "INFO" | quote }}}
- {name: MCQ_KAFKA__BOOTSTRAP_SERVERS, value: {{ $s.kafka.bootstrapServers | quote }}}
- {name: MCQ_KAFKA__SECURITY_PROTOCOL, value: {{ $s.kafka.securityProtocol | quote }}}
{{- with $s.kafka.saslMechanism }}
- {name: MCQ_KAFKA__SASL_MECHANISM, value: {{ . | quote }}}
{{- end }}
{{- with $s.kafka.saslUsername }}
- {name: MCQ_KAFKA__SASL_USERNAME, value: {{ . | quote }}}
{{- end }}
{{- if .Values.kafkaCaSecret }}
- {name: MCQ_KAFKA__SSL_CA_LOCATION, value: /etc/mcq/tls/ca.crt}
{{- end }}
- {name: MCQ_REGISTRY__URL, value: {{ $s.schemaRegistry.url | quote }}}
{{- with $s.schemaRegistry.username }}
- {name: MCQ_REGISTRY__USERNAME, value: {{ . | quote }}}
{{- end }}
- {name: MCQ_CONNECT__URL, value: {{ $s.connect.url | quote }}}
- {name: MCQ_CONNECT__NATURAL_TEXT, value: {{ $s.connect.naturalText | quote }}}
{{- with $s.connect.username }}
- {name: MCQ_CONNECT__USERNAME, value: {{ . | quote }}}
{{- end }}
{{- range $section := list "source" "vendor" }}
{{- $db := index $s $section }}
{{- if $db.host }}
- {name: MCQ_{{ upper $section }}__HOST, value: {{ $db.host | quote }}}
- {name: MCQ_{{ upper $section }}__PORT, value: {{ $db.port | quote }}}
- {name: MCQ_{{ upper $section }}__DBNAME, value: {{ $db.dbname | quote }}}
- {name: MCQ_{{ upper $section }}__USER, value: {{ $db.user | quote }}}
{{- end }}
{{- end }}
{{- if $s.ldap.url }}
- {name: MCQ_LDAP__URL, value: {{ $s.ldap.url | quote }}}
- {name: MCQ_LDAP__BASE_DN, value: {{ $s.ldap.baseDn | quote }}}
- {name: MCQ_LDAP__BIND_DN, value: {{ $s.ldap.bindDn | quote }}}
{{- end }}
{{- $vars := dict "kafkaSaslPassword" "MCQ_KAFKA__SASL_PASSWORD" "schemaRegistryPassword" "MCQ_REGISTRY__PASSWORD" "connectPassword" "MCQ_CONNECT__PASSWORD" "sourcePassword" "MCQ_SOURCE__PASSWORD" "vendorPassword" "MCQ_VENDOR__PASSWORD" "ldapPassword" "MCQ_LDAP__PASSWORD" }}
{{- range $name, $var := $vars }}
{{- $ref := index $.Values.credentials $name }}
{{- if $ref.existingSecret }}
- name: {{ $var }}
  valueFrom:
    secretKeyRef: {name: {{ $ref.existingSecret | quote }}, key: {{ $ref.key | quote }}}
{{- end }}
{{- end }}
{{- range $k, $v := .Values.extraEnv }}
- {name: {{ $k }}, value: {{ $v | quote }}}
{{- end }}
{{- end -}}

{{/* Writable places under a read-only root: /tmp, mcq's home (state snapshots), the CA. */}}
{{- define "mcq.volumeMounts" -}}
- {name: tmp, mountPath: /tmp}
- {name: home, mountPath: /var/lib/mcq}
{{- if .Values.kafkaCaSecret }}
- {name: kafka-ca, mountPath: /etc/mcq/tls, readOnly: true}
{{- end }}
{{- end -}}

{{- define "mcq.volumes" -}}
- {name: tmp, emptyDir: {}}
- {name: home, emptyDir: {}}
{{- if .Values.kafkaCaSecret }}
- name: kafka-ca
  secret: {secretName: {{ .Values.kafkaCaSecret | quote }}, items: [{key: ca.crt, path: ca.crt}]}
{{- end }}
{{- end -}}

{{- define "mcq.podSpec" -}}
serviceAccountName: {{ include "mcq.serviceAccountName" . }}
automountServiceAccountToken: false
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
{{ toYaml . }}
{{- end }}
securityContext:
{{ toYaml .Values.podSecurityContext | indent 2 }}
{{- end -}}

{{/* A pod's annotations: Prometheus scraping of /metrics on .port, then podAnnotations. */}}
{{- define "mcq.podAnnotations" -}}
{{- $ann := dict -}}
{{- if .root.Values.metrics.scrapeAnnotations -}}
{{- $_ := set $ann "prometheus.io/scrape" "true" -}}
{{- $_ := set $ann "prometheus.io/port" (toString .port) -}}
{{- $_ := set $ann "prometheus.io/path" "/metrics" -}}
{{- end -}}
{{- toYaml (merge $ann .root.Values.podAnnotations) -}}
{{- end -}}

{{/* The registry's listener merged with listenerDefaults and its listenerOverrides entry. */}}
{{- define "mcq.listener" -}}
{{- $over := index .root.Values.listenerOverrides .listener.name | default dict -}}
{{- $merged := mustMergeOverwrite (deepCopy .root.Values.listenerDefaults) (deepCopy $over) -}}
{{- toYaml (mustMergeOverwrite $merged (deepCopy .listener)) -}}
{{- end -}}
