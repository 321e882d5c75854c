{{/* The release's full name, at most 63 characters. */}}
{{- define "cairn.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "cairn.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "cairn.labels" -}}
{{ include "cairn.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "cairn.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "cairn.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "cairn.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end -}}
{{- end -}}

{{/* A pool's tag set as cairn_pool_demand spells it: sorted, comma-separated. */}}
{{- define "cairn.poolTags" -}}
{{- . | default list | uniq | sortAlpha | join "," -}}
{{- end -}}

{{/* The pools, each poolDefaults with its own values on top, as YAML (fromYaml): one "default" pool when none is given. */}}
{{- define "cairn.pools" -}}
{{- $out := dict -}}
{{- range $name, $pool := (.Values.pools | default (dict "default" dict)) -}}
{{- if not (regexMatch "^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$" $name) -}}
{{- fail (printf "pools.%s: a pool's name is 1 to 32 of a-z, 0-9 and '-'" $name) -}}
{{- end -}}
{{- $_ := set $out $name (mergeOverwrite (deepCopy $.Values.poolDefaults) (deepCopy ($pool | default dict))) -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* Every pool's tag set, for CAIRN_DEMAND_POOLS. */}}
{{- define "cairn.demandPools" -}}
{{- $sets := list -}}
{{- range $name, $pool := (include "cairn.pools" . | fromYaml) -}}
{{- $sets = append $sets (include "cairn.poolTags" $pool.tags) -}}
{{- end -}}
{{- $sets | uniq | sortAlpha | join ";" -}}
{{- end -}}

{{/* The environment every cairn container shares: the catalog, the blob store, settings. */}}
{{- define "cairn.env" -}}
- name: CAIRN_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ required "database.urlSecret.name: the Secret holding the PostgreSQL URL" .Values.database.urlSecret.name }}
      key: {{ .Values.database.urlSecret.key }}
{{- with .Values.database.listenUrlSecret }}
{{- if .name }}
- name: CAIRN_DATABASE_LISTEN_URL
  valueFrom:
    secretKeyRef:
      name: {{ .name }}
      key: {{ .key }}
{{- end }}
{{- end }}
- name: CAIRN_BLOBSTORE
  value: {{ required "blobstore.url: s3://bucket?region=…" .Values.blobstore.url | quote }}
{{- with .Values.blobstore.credentialsSecret }}
{{- if .name }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ .name }}
      key: {{ .accessKeyIdKey }}
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ .name }}
      key: {{ .secretAccessKeyKey }}
{{- end }}
{{- end }}
{{- range $k, $v := .Values.env }}
- name: {{ $k }}
  value: {{ $v | quote }}
{{- end }}
{{- end -}}

{{/* The pod spec shared by the API and the pools; call with (dict "root" $ "component" … "tags" … "concurrency" … "p" <api or pool values> "dispatcher" bool). */}}
{{- define "cairn.podSpec" -}}
{{- $root := .root -}}
{{- $v := $root.Values -}}
serviceAccountName: {{ include "cairn.serviceAccountName" $root }}
{{- with $v.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
terminationGracePeriodSeconds: {{ add $v.shutdownGraceSeconds 20 }}
{{- if and .dispatcher $v.sandbox.unmaskedProc }}
hostUsers: false
{{- end }}
securityContext:
  {{- toYaml $v.podSecurityContext | nindent 2 }}
  {{- if .dispatcher }}
  {{- with $v.sandbox.seccompProfile }}
  seccompProfile:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- if $v.sandbox.appArmorUnconfined }}
  appArmorProfile:
    type: Unconfined
  {{- end }}
  {{- else }}
  seccompProfile:
    type: RuntimeDefault
  {{- end }}
{{- with .p.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .p.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .p.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
containers:
  - name: cairn
    image: {{ include "cairn.image" $root }}
    imagePullPolicy: {{ $v.image.pullPolicy }}
    args:
      - serve
      {{- if not .dispatcher }}
      - --no-dispatcher
      {{- end }}
    env:
      {{- include "cairn.env" $root | nindent 6 }}
      - name: CAIRN_LISTEN
        value: "0.0.0.0:8080"
      - name: CAIRN_PUBLIC_URL
        value: {{ printf "http://%s.%s.svc:%v" (include "cairn.fullname" $root) $root.Release.Namespace $v.service.port | quote }}
      - name: CAIRN_SHUTDOWN_GRACE
        value: {{ printf "%vs" $v.shutdownGraceSeconds | quote }}
      - name: CAIRN_DEMAND_POOLS
        value: {{ include "cairn.demandPools" $root | quote }}
      - name: TMPDIR
        value: /tmp
      {{- if .dispatcher }}
      - name: CAIRN_TAGS
        value: {{ include "cairn.poolTags" .tags | quote }}
      - name: CAIRN_CONCURRENCY
        value: {{ .concurrency | quote }}
      - name: CAIRN_EXEC_ISOLATION
        value: {{ $v.sandbox.isolation | quote }}
      - name: CAIRN_EXEC_CGROUP
        value: {{ $v.sandbox.cgroup | quote }}
      {{- end }}
    envFrom:
      - secretRef:
          name: {{ required "secrets.name: the Secret with CAIRN_TOKENS, CAIRN_SIGNING_KEY, CAIRN_SECRET_KEY, CAIRN_METRICS_TOKEN" $v.secrets.name }}
    ports:
      - name: http
        containerPort: 8080
        protocol: TCP
    startupProbe:
      httpGet: {path: /readyz, port: http}
      periodSeconds: 2
      failureThreshold: 60
    readinessProbe:
      httpGet: {path: /readyz, port: http}
      periodSeconds: 10
      timeoutSeconds: 3
    livenessProbe:
      httpGet: {path: /healthz, port: http}
      periodSeconds: 10
      timeoutSeconds: 3
      failureThreshold: 6
    resources:
      {{- toYaml .p.resources | nindent 6 }}
    securityContext:
      {{- toYaml $v.containerSecurityContext | nindent 6 }}
      {{- if and .dispatcher $v.sandbox.unmaskedProc }}
      procMount: Unmasked
      {{- end }}
    volumeMounts:
      - name: tmp
        mountPath: /tmp
      {{- if and .dispatcher $v.sandbox.tunDevice }}
      - name: tun
        mountPath: /dev/net/tun
      {{- end }}
volumes:
  - name: tmp
    emptyDir:
      sizeLimit: {{ $v.cache.sizeLimit }}
  {{- if and .dispatcher $v.sandbox.tunDevice }}
  - name: tun
    hostPath:
      path: /dev/net/tun
      type: CharDevice
  {{- end }}
{{- end -}}
