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

{{/* Where mcq's engines are, as MCQ_<SECTION>__<FIELD>: what every mcq container gets.
Never a credential: each pod's own come from "mcq.env" by its role. */}}
{{- define "mcq.settingsEnv" -}}
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
{{- if .Values.kafkaCaSecret }}
- {name: MCQ_KAFKA__SSL_CA_LOCATION, value: /etc/mcq/tls/ca.crt}
{{- end }}
- {name: MCQ_REGISTRY__URL, value: {{ $s.schemaRegistry.url | quote }}}
- {name: MCQ_CONNECT__URL, value: {{ $s.connect.url | quote }}}
- {name: MCQ_CONNECT__NATURAL_TEXT, value: {{ $s.connect.naturalText | quote }}}
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
{{- range $k, $v := .Values.extraEnv }}
- {name: {{ $k }}, value: {{ $v | quote }}}
{{- end }}
{{- end -}}

{{/* One variable from a Secret: .var, from .ref ({existingSecret, key}); nothing when unset. */}}
{{- define "mcq.secretVar" -}}
{{- if .ref.existingSecret }}
- name: {{ .var }}
  valueFrom:
    secretKeyRef: {name: {{ .ref.existingSecret | quote }}, key: {{ .ref.key | default "password" | quote }}}
{{- end }}
{{- end -}}

{{/* A process's own Kafka identity (only with SASL): .creds is {username | usernameKey,
existingSecret, passwordKey}; by default the principal `mcq acl plan` names (.principal) and the
Secret of that name (the one Strimzi makes for the KafkaUser the chart renders). */}}
{{- define "mcq.kafkaIdentity" -}}
{{- if hasPrefix "SASL" .root.Values.settings.kafka.securityProtocol }}
{{- $c := .creds | default dict }}
{{- if $c.usernameKey }}
- name: MCQ_KAFKA__SASL_USERNAME
  valueFrom:
    secretKeyRef: {name: {{ $c.existingSecret | default .principal | quote }}, key: {{ $c.usernameKey | quote }}}
{{- else }}
- {name: MCQ_KAFKA__SASL_USERNAME, value: {{ $c.username | default .principal | quote }}}
{{- end }}
- name: MCQ_KAFKA__SASL_PASSWORD
  valueFrom:
    secretKeyRef: {name: {{ $c.existingSecret | default .principal | quote }}, key: {{ $c.passwordKey | default "password" | quote }}}
{{- end }}
{{- end -}}

{{/* The schema registry's read-only identity, for every pod but the setup hook's. */}}
{{- define "mcq.registryReader" -}}
{{- with .Values.settings.schemaRegistry.readerUsername }}
- {name: MCQ_REGISTRY__USERNAME, value: {{ . | quote }}}
{{- end }}
{{- include "mcq.secretVar" (dict "var" "MCQ_REGISTRY__PASSWORD" "ref" .Values.credentials.schemaRegistryReaderPassword) }}
{{- end -}}

{{/* Every mcq container's environment, by role (least privilege: README, "Kubernetes"):
  setup       the administrators: Kafka admin, schema registry writer, Connect, the source
  normalizer  its own Kafka principal (the entities writer runs as it too)
  status      the console's read-only principal (mcq status, the console)
  listener    its own Kafka principal, its one target's credentials, its MCQ_SECRET_* */}}
{{- define "mcq.env" -}}
{{- $root := .root -}}
{{- $v := $root.Values -}}
{{- $prefix := $v.settings.topicPrefix -}}
{{ include "mcq.settingsEnv" $root }}
{{- if eq .role "setup" }}
{{- with $v.settings.kafka.saslUsername }}
- {name: MCQ_KAFKA__SASL_USERNAME, value: {{ . | quote }}}
{{- end }}
{{- include "mcq.secretVar" (dict "var" "MCQ_KAFKA__SASL_PASSWORD" "ref" $v.credentials.kafkaSaslPassword) }}
{{- with $v.settings.schemaRegistry.username }}
- {name: MCQ_REGISTRY__USERNAME, value: {{ . | quote }}}
{{- end }}
{{- include "mcq.secretVar" (dict "var" "MCQ_REGISTRY__PASSWORD" "ref" $v.credentials.schemaRegistryPassword) }}
{{- with $v.settings.connect.username }}
- {name: MCQ_CONNECT__USERNAME, value: {{ . | quote }}}
{{- end }}
{{- include "mcq.secretVar" (dict "var" "MCQ_CONNECT__PASSWORD" "ref" $v.credentials.connectPassword) }}
{{- include "mcq.secretVar" (dict "var" "MCQ_SOURCE__PASSWORD" "ref" $v.credentials.sourcePassword) }}
{{- else if eq .role "normalizer" }}
{{- include "mcq.kafkaIdentity" (dict "root" $root "creds" $v.normalizer.kafkaCredentials "principal" (printf "%s-normaliser" $prefix)) }}
{{- include "mcq.registryReader" $root }}
{{- else if eq .role "status" }}
{{- include "mcq.kafkaIdentity" (dict "root" $root "creds" $v.console.kafkaCredentials "principal" (printf "%s-console" $prefix)) }}
{{- include "mcq.registryReader" $root }}
{{- else if eq .role "listener" }}
{{- $l := .listener }}
{{- include "mcq.kafkaIdentity" (dict "root" $root "creds" $l.kafkaCredentials "principal" (printf "%s-listener-%s" $prefix (lower $l.name))) }}
{{- include "mcq.registryReader" $root }}
{{- include "mcq.targetEnv" (dict "root" $root "listener" $l) }}
{{- range $var, $ref := $l.secrets }}
{{- include "mcq.secretVar" (dict "var" $var "ref" $ref) }}
{{- end }}
{{- else }}
{{- fail (printf "mcq.env: no role %q" .role) }}
{{- end }}
{{- end -}}

{{/* A listener's one target: the vendor or source database, the LDAP directory, or a named
target of .Values.targets (its settings, and its password from its Secret). */}}
{{- define "mcq.targetEnv" -}}
{{- $v := .root.Values -}}
{{- $l := .listener -}}
{{- $t := $l.target | default "" -}}
{{- if eq $t "vendor" }}
{{- include "mcq.secretVar" (dict "var" "MCQ_VENDOR__PASSWORD" "ref" $v.credentials.vendorPassword) }}
{{- else if eq $t "source" }}
{{- include "mcq.secretVar" (dict "var" "MCQ_SOURCE__PASSWORD" "ref" $v.credentials.sourcePassword) }}
{{- else if eq $t "ldap" }}
{{- include "mcq.secretVar" (dict "var" "MCQ_LDAP__PASSWORD" "ref" $v.credentials.ldapPassword) }}
{{- else if $t }}
{{- $named := index $v.targets $t }}
{{- if not $named }}
{{- fail (printf "listener %s writes to the named target %q: give it in targets.%s (its settings and existingSecret)" $l.name $t $t) }}
{{- end }}
{{- range $field, $value := $named.settings }}
- {name: MCQ_TARGETS__{{ upper $t }}__{{ upper $field }}, value: {{ $value | toString | quote }}}
{{- end }}
{{- include "mcq.secretVar" (dict "var" (printf "MCQ_TARGETS__%s__PASSWORD" (upper $t)) "ref" $named) }}
{{- end }}
{{- range $ref := $l.secretRefs | default list }}
{{- if not (hasKey ($l.secrets | default dict) $ref) }}
{{- fail (printf "listener %s: its registry entry references ${env:%s}: give it in listenerOverrides.%s.secrets.%s ({existingSecret, key})" $l.name $ref $l.name $ref) }}
{{- end }}
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
