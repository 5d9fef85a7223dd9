{{/*
Names. input: the root context. output: a DNS-1123 name of at most 63 characters.
*/}}
{{- define "gridstat.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gridstat.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The utility's name: .Values.utility or the release name. */}}
{{- define "gridstat.utility" -}}
{{- default .Release.Name .Values.utility -}}
{{- end -}}

{{/*
Object name of one role (and cloud). input: (dict "root" $ "role" "broker" "cloud" "A"); output: e.g. rel-gridstat-broker-a
*/}}
{{- define "gridstat.roleName" -}}
{{- $base := printf "%s-%s" (include "gridstat.fullname" .root) .role -}}
{{- if .cloud -}}
{{- printf "%s-%s" $base (.cloud | lower) | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $base | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels on every object. input: the root context. */}}
{{- define "gridstat.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "gridstat.name" . | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gridstat
gridstat.io/utility: {{ include "gridstat.utility" . | quote }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
Selector labels of one role (and cloud). input: (dict "root" $ "role" "router" "cloud" "A").
*/}}
{{- define "gridstat.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gridstat.name" .root | quote }}
app.kubernetes.io/instance: {{ .root.Release.Name | quote }}
app.kubernetes.io/component: {{ .role }}
{{- if .cloud }}
gridstat.io/cloud: {{ .cloud | quote }}
{{- end }}
{{- end -}}

{{/* The image. input: the root context. */}}
{{- define "gridstat.image" -}}
{{- printf "%s:%s" .Values.image.repository .Values.image.tag -}}
{{- end -}}

{{/* In-cluster address of a cloud's leaf broker. input: (dict "root" $ "cloud" "A"). */}}
{{- define "gridstat.brokerAddress" -}}
{{- printf "%s.%s.svc:%d" (include "gridstat.roleName" (dict "root" .root "role" "broker" "cloud" .cloud)) .root.Release.Namespace (int .root.Values.broker.port) -}}
{{- end -}}

{{/* In-cluster control address of one edge router (its StatefulSet pod's DNS name): the `--edge` of a
     client role. input: (dict "root" $ "cloud" "A" "router" "e1"). */}}
{{- define "gridstat.edgeAddress" -}}
{{- $root := .root -}}
{{- $svc := include "gridstat.roleName" (dict "root" $root "role" "router" "cloud" .cloud) -}}
{{- $index := 0 -}}
{{- $cloud := .cloud -}}
{{- $router := .router -}}
{{- range $root.Values.clouds }}{{ if eq .name $cloud }}{{ range $i, $r := .routers }}{{ if eq $r.name $router }}{{ $index = $i }}{{ end }}{{ end }}{{ end }}{{ end -}}
{{- printf "%s-%d.%s.%s.svc:%d" $svc $index $svc $root.Release.Namespace (int $root.Values.router.controlPort) -}}
{{- end -}}

{{/* In-cluster address of the admission controller. input: the root context. */}}
{{- define "gridstat.admissionAddress" -}}
{{- printf "%s.%s.svc:%d" (include "gridstat.roleName" (dict "root" . "role" "admission")) .Release.Namespace (int .Values.admission.port) -}}
{{- end -}}

{{/*
Extra arguments as a YAML list (brokers, admission controller, operator): each item a quoted string
(a flag and its value may be two items), `$` doubled so Kubernetes passes `$(...)` through literally.
input: the list.
*/}}
{{- define "gridstat.argList" -}}
{{- range . }}
- {{ include "gridstat.argString" . | replace "$" "$$" | quote }}
{{- end }}
{{- end -}}

{{/* One extra argument as text: a whole number read from a values file (a float64) without an exponent. */}}
{{- define "gridstat.argString" -}}
{{- if and (kindIs "float64" .) (eq (float64 (int64 .)) .) -}}
{{- int64 . -}}
{{- else -}}
{{- toString . -}}
{{- end -}}
{{- end -}}

{{/*
Extra arguments inside the routers' `sh -c` string: each item single-quoted for the shell (a `'` in
it becomes `'\''`), `$` doubled for Kubernetes' $(VAR) expansion. input: the list. output: " 'a' 'b'".
*/}}
{{- define "gridstat.shellArgs" -}}
{{- range . }} '{{ include "gridstat.argString" . | replace "'" "'\\''" | replace "$" "$$" }}'{{ end }}
{{- end -}}

{{/* The default soft anti-affinity of a cloud's routers: prefer a node per router, so redundant
     paths do not share a node. input: (dict "root" $ "cloud" "A"). */}}
{{- define "gridstat.routerAntiAffinity" -}}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "gridstat.selectorLabels" (dict "root" .root "role" "router" "cloud" .cloud) | nindent 12 }}
{{- end -}}

{{/* Whether the cluster serves the Prometheus Operator's kinds ("true" or ""); input: the root context. */}}
{{- define "gridstat.serviceMonitorServed" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1/ServiceMonitor" }}true{{ end -}}
{{- end -}}
{{- define "gridstat.prometheusRuleServed" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1/PrometheusRule" }}true{{ end -}}
{{- end -}}

{{/* Whether the cluster serves the Prometheus Operator's PodMonitor ("true" or ""); input: the root context. */}}
{{- define "gridstat.podMonitorServed" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1/PodMonitor" }}true{{ end -}}
{{- end -}}

{{/*
Relabelings of every scrape endpoint (ServiceMonitors and the subscribers' PodMonitor): `cloud` from
the pod label gridstat.io/cloud (leaf brokers, routers, subscriber pods; none for the parent and the
admission controller) and `utility` from gridstat.io/utility, then serviceMonitor.relabelings. The
Prometheus Operator adds `namespace` itself. The dashboards select on `namespace` and `cloud`
(docs/telemetry.md, "Kubernetes"). input: the root context.
*/}}
{{- define "gridstat.scrapeRelabelings" -}}
- sourceLabels: [__meta_kubernetes_pod_label_gridstat_io_cloud]
  targetLabel: cloud
- sourceLabels: [__meta_kubernetes_pod_label_gridstat_io_utility]
  targetLabel: utility
{{- with .Values.serviceMonitor.relabelings }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
Telemetry flags of a role (docs/telemetry.md, "The exporter") when telemetry.kafka.bootstrap is set:
--kafka, the sampling period and buffer, and an exporter id unique among the processes exporting to
that Kafka and stable across restarts, `<namespace>/<exporter>` (a StatefulSet pod's name, or a
single-replica workload's). input: (dict "root" $ "exporter" "rel-gridstat-broker-a-0"). output:
"- --flag" items.
*/}}
{{- define "gridstat.kafkaArgs" -}}
{{- $t := .root.Values.telemetry -}}
{{- if $t.kafka.bootstrap }}
- {{ printf "--kafka=%s" $t.kafka.bootstrap | quote }}
- {{ printf "--telemetry-exporter=%s/%s" .root.Release.Namespace .exporter | quote }}
- --telemetry-interval-ms={{ int64 $t.intervalMs }}
- --telemetry-buffer={{ int64 $t.bufferRecords }}
{{- include "gridstat.kafkaSecurityArgs" .root }}
{{- end }}
{{- end -}}

{{/*
TLS and SASL to Kafka (docs/telemetry.md, "Kafka security"; docs/kubernetes.md, "Telemetry, archive and
Spark jobs"), for every pod with Kafka args (gridstat.kafkaArgs includes the flags) and the history service.
telemetry.kafka.tls.secretName: its ca.crt (and with tls.clientCertificate its tls.crt/tls.key) mounted at
/etc/gridstat/kafka-tls; telemetry.kafka.sasl.secretName: its keys username and password as the env vars
GRIDSTAT_KAFKA_SASL_USERNAME/PASSWORD, never as args. gridstat.kafkaSecurityArgs: input the root context,
output "- --flag" items. The others: input (dict "root" $ "always" true|false): with always false only
when telemetry.kafka.bootstrap is set (the pod then has --kafka); output list items or nothing.
*/}}
{{- define "gridstat.kafkaSecurityArgs" -}}
{{- $k := .Values.telemetry.kafka -}}
{{- if $k.tls.secretName }}
- --kafka-tls-ca=/etc/gridstat/kafka-tls/ca.crt
{{- if $k.tls.clientCertificate }}
- --kafka-tls-cert=/etc/gridstat/kafka-tls/tls.crt
- --kafka-tls-key=/etc/gridstat/kafka-tls/tls.key
{{- end }}
{{- end }}
{{- if $k.sasl.secretName }}
- {{ printf "--kafka-sasl-mechanism=%s" $k.sasl.mechanism | quote }}
{{- end }}
{{- end -}}

{{- define "gridstat.kafkaMounts" -}}
{{- $k := .root.Values.telemetry.kafka -}}
{{- if and (or .always $k.bootstrap) $k.tls.secretName -}}
- {name: kafka-tls, mountPath: /etc/gridstat/kafka-tls, readOnly: true}
{{- end }}
{{- end -}}

{{- define "gridstat.kafkaVolumes" -}}
{{- $k := .root.Values.telemetry.kafka -}}
{{- if and (or .always $k.bootstrap) $k.tls.secretName -}}
- name: kafka-tls
  secret:
    secretName: {{ $k.tls.secretName | quote }}
    defaultMode: 0440
{{- end }}
{{- end -}}

{{- define "gridstat.kafkaEnv" -}}
{{- $k := .root.Values.telemetry.kafka -}}
{{- if and (or .always $k.bootstrap) $k.sasl.secretName -}}
- name: GRIDSTAT_KAFKA_SASL_USERNAME
  valueFrom: {secretKeyRef: {name: {{ $k.sasl.secretName | quote }}, key: username}}
- name: GRIDSTAT_KAFKA_SASL_PASSWORD
  valueFrom: {secretKeyRef: {name: {{ $k.sasl.secretName | quote }}, key: password}}
{{- end }}
{{- end -}}

{{/* Whether the release runs subscriber pods that serve /metrics ("true" or ""): PDC servers, STTP
     servers, the archive, the condensation host. input: the root context. */}}
{{- define "gridstat.hasSubscriberPods" -}}
{{- if or .Values.c37118.pdcServers .Values.sttp.servers .Values.archive.enabled .Values.condensationHost.enabled }}true{{ end -}}
{{- end -}}

{{/*
The head of a Spark job's container (docs/kubernetes.md, "Telemetry, archive and Spark jobs"): image,
security context, environment (GRIDSTAT_SCHEMAS; HOME and Spark's scratch space on the /tmp emptyDir,
the root filesystem being read-only) and `args:` up to the job's file; the caller appends the job's
own arguments as "- ..." items. input: (dict "root" $ "job" "qos_alerts.py").
*/}}
{{- define "gridstat.sparkContainer" -}}
{{- $s := .root.Values.spark -}}
image: {{ printf "%s:%s" $s.image.repository $s.image.tag | quote }}
imagePullPolicy: {{ $s.image.pullPolicy | quote }}
securityContext:
  {{- toYaml .root.Values.containerSecurityContext | nindent 2 }}
env:
  - {name: GRIDSTAT_SCHEMAS, value: {{ $s.schemasDir | quote }}}
  - {name: HOME, value: /tmp}
  - {name: SPARK_LOCAL_DIRS, value: /tmp/spark}
  - {name: SPARK_LOCAL_IP, value: 127.0.0.1}
args:
  - {{ $s.submit | quote }}
  {{- include "gridstat.argList" $s.submitArgs | nindent 2 }}
  - {{ printf "%s/%s" (trimSuffix "/" $s.jobsDir) .job | quote }}
{{- end -}}

{{/* In-cluster address of the parent broker. input: the root context. */}}
{{- define "gridstat.parentAddress" -}}
{{- printf "%s.%s.svc:%d" (include "gridstat.roleName" (dict "root" . "role" "parent")) .Release.Namespace (int .Values.broker.port) -}}
{{- end -}}

{{/* GRIDSTAT_BROKERS for the operator: CLOUD=HOST:PORT,... */}}
{{- define "gridstat.brokerList" -}}
{{- $root := . -}}
{{- $out := list -}}
{{- range .Values.clouds -}}
{{- $out = append $out (printf "%s=%s" .name (include "gridstat.brokerAddress" (dict "root" $root "cloud" .name))) -}}
{{- end -}}
{{- join "," $out -}}
{{- end -}}

{{/* The root broker: the parent when there is one, else the first cloud's leaf. */}}
{{- define "gridstat.rootBroker" -}}
{{- if .Values.parent.enabled -}}
{{- include "gridstat.parentAddress" . -}}
{{- else -}}
{{- include "gridstat.brokerAddress" (dict "root" . "cloud" (index .Values.clouds 0).name) -}}
{{- end -}}
{{- end -}}

{{/* Pod-level settings shared by every role. input: (dict "root" $ "sa" "operator"). */}}
{{- define "gridstat.podCommon" -}}
serviceAccountName: {{ include "gridstat.roleName" (dict "root" .root "role" .sa) }}
securityContext:
  {{- toYaml .root.Values.podSecurityContext | nindent 2 }}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
TLS (docs/kubernetes.md, "Security"). Every component role has its own certificate in its own Secret
(kubernetes.io/tls: tls.crt, tls.key, ca.crt; cert-manager's layout): generated on the first install
from one generated CA (templates/005-Secrets-security.yaml), or an existing one named in
tls.secrets.<role>, or -- for existing users -- one Secret shared by every role (tls.secretName).
The identity (CN and first DNS SAN) of a role's certificate, which the servers' per-RPC role
authorization reads (docs/security.md, "Control by role"). input: the role.
*/}}
{{- define "gridstat.tlsIdentity" -}}
{{- printf "gridstat-%s" . -}}
{{- end -}}

{{/* The certificate role of one cloud's leaf broker: broker-<cloud, lower case>, identity
     gridstat-broker-<cloud>; that cloud's routers take control calls from it only. input: the cloud's name. */}}
{{- define "gridstat.brokerCertRole" -}}
{{- printf "broker-%s" (lower (toString .)) -}}
{{- end -}}

{{/* The roles whose certificates this release needs (a leaf broker's per cloud). input: the root
     context. output: JSON list. */}}
{{- define "gridstat.tlsRoles" -}}
{{- $roles := list "router" "operator" -}}
{{- range .Values.clouds }}{{ $roles = append $roles (include "gridstat.brokerCertRole" .name) }}{{ end -}}
{{- if .Values.parent.enabled }}{{ $roles = append $roles "parent" }}{{ end -}}
{{- if .Values.admission.enabled }}{{ $roles = append $roles "admission" }}{{ end -}}
{{- if .Values.history.enabled }}{{ $roles = append $roles "history" }}{{ end -}}
{{- if .Values.condensationHost.enabled }}{{ $roles = append $roles "condense" }}{{ end -}}
{{- if .Values.archive.enabled }}{{ $roles = append $roles "archive" }}{{ end -}}
{{- range .Values.c37118.gateways }}{{ $roles = append $roles (printf "pmu-gateway-%s" .name) }}{{ end -}}
{{- range .Values.c37118.pdcServers }}{{ $roles = append $roles (printf "pdc-%s" .name) }}{{ end -}}
{{- range .Values.sttp.servers }}{{ $roles = append $roles (printf "sttp-server-%s" .name) }}{{ end -}}
{{- range .Values.sttp.gateways }}{{ $roles = append $roles (printf "sttp-gateway-%s" .name) }}{{ end -}}
{{- range $kind := list "iec104" "dnp3" "goose" }}{{ range index $.Values.scada $kind }}{{ $roles = append $roles (printf "%s-gateway-%s" $kind .name) }}{{ end }}{{ end -}}
{{- toJson $roles -}}
{{- end -}}

{{/* Name of the generated CA's Secret. input: the root context. */}}
{{- define "gridstat.caSecretName" -}}
{{- include "gridstat.roleName" (dict "root" . "role" "ca") -}}
{{- end -}}

{{/* The existing Secret named for a role in tls.secrets, or "": a leaf broker's own
     (tls.secrets.broker-<cloud>), else the one all leaf brokers share (tls.secrets.broker).
     input: (dict "root" $ "role" "broker-a"). */}}
{{- define "gridstat.tlsGivenSecret" -}}
{{- $given := index .root.Values.tls.secrets .role | default "" -}}
{{- if and (not $given) (hasPrefix "broker-" .role) -}}
{{- $given = .root.Values.tls.secrets.broker | default "" -}}
{{- end -}}
{{- $given -}}
{{- end -}}

{{/* The Secret a role's pods mount. input: (dict "root" $ "role" "broker-a"). */}}
{{- define "gridstat.tlsSecretName" -}}
{{- if .root.Values.tls.secretName -}}
{{- .root.Values.tls.secretName -}}
{{- else -}}
{{- default (include "gridstat.roleName" (dict "root" .root "role" (printf "tls-%s" .role))) (include "gridstat.tlsGivenSecret" .) -}}
{{- end -}}
{{- end -}}

{{/* Whether the chart generates a role's Secret ("true" or ""). input: (dict "root" $ "role" "broker-a"). */}}
{{- define "gridstat.tlsGenerated" -}}
{{- if and .root.Values.tls.enabled (not .root.Values.tls.secretName) (not (include "gridstat.tlsGivenSecret" .)) }}true{{ end -}}
{{- end -}}

{{/*
The identity a cloud's routers take control calls from (`--broker-identity`, docs/security.md "Control
by role"): the cloud's own leaf broker, gridstat-broker-<cloud>, when it has a certificate of its own
(generated, or tls.secrets.broker-<cloud>); "" -- any broker identity -- when every leaf broker shares
one (tls.secrets.broker, tls.secretName). input: (dict "root" $ "cloud" "A").
*/}}
{{- define "gridstat.routerBrokerIdentity" -}}
{{- $role := include "gridstat.brokerCertRole" .cloud -}}
{{- $tls := .root.Values.tls -}}
{{- if and $tls.enabled (not $tls.secretName) (or (index $tls.secrets $role) (not $tls.secrets.broker)) -}}
{{- include "gridstat.tlsIdentity" $role -}}
{{- end -}}
{{- end -}}

{{/*
DNS names of a role's certificate, after its identity: the names the other components dial it by
(gRPC checks the dialled host name against them; nothing dials by IP: the topology sidecars register
each router's control address by its pod's DNS name), plus localhost and 127.0.0.1 for the CLI in
the pod. Routers: a wildcard per cloud over the StatefulSet's pods, so a router added later is
covered. input: (dict "root" $ "role" "broker-a"). output: JSON list.
*/}}
{{- define "gridstat.tlsDnsNames" -}}
{{- $root := .root -}}
{{- $ns := $root.Release.Namespace -}}
{{- $domain := $root.Values.tls.clusterDomain -}}
{{- $services := list -}}
{{- $prefix := "" -}}
{{- if hasPrefix "broker-" .role -}}
{{- $role := .role -}}
{{- range $root.Values.clouds }}{{ if eq $role (include "gridstat.brokerCertRole" .name) }}{{ $services = append $services (include "gridstat.roleName" (dict "root" $root "role" "broker" "cloud" .name)) }}{{ end }}{{ end -}}
{{- else if eq .role "router" -}}
{{- $prefix = "*." -}}
{{- range $root.Values.clouds }}{{ $services = append $services (include "gridstat.roleName" (dict "root" $root "role" "router" "cloud" .name)) }}{{ end -}}
{{- else if eq .role "parent" -}}
{{- $services = list (include "gridstat.roleName" (dict "root" $root "role" "parent")) -}}
{{- else if eq .role "admission" -}}
{{- $services = list (include "gridstat.roleName" (dict "root" $root "role" "admission")) -}}
{{- else if eq .role "history" -}}
{{- $services = list (include "gridstat.roleName" (dict "root" $root "role" "history")) -}}
{{- end -}}
{{- $names := list (include "gridstat.tlsIdentity" .role) -}}
{{- if hasPrefix "pmu-gateway-" .role -}}
{{- /* A gateway publishes as each of its device's stations (docs/pmu-gateway.md, "Security"). */ -}}
{{- $gwName := trimPrefix "pmu-gateway-" .role -}}
{{- range $root.Values.c37118.gateways }}{{ if eq .name $gwName }}{{ $names = concat $names (.stations | default list) }}{{ end }}{{ end -}}
{{- end -}}
{{- if hasPrefix "sttp-gateway-" .role -}}
{{- /* An STTP gateway publishes as its `publisher`, else as each device of its source (docs/sttp.md,
       "In Kubernetes"). */ -}}
{{- $gwName := trimPrefix "sttp-gateway-" .role -}}
{{- range $root.Values.sttp.gateways }}{{ if eq .name $gwName }}{{ $names = concat $names (compact (list (.publisher | default ""))) (.devices | default list) }}{{ end }}{{ end -}}
{{- end -}}
{{- range $kind := list "iec104" "dnp3" "goose" -}}
{{- if hasPrefix (printf "%s-gateway-" $kind) $.role -}}
{{- /* A SCADA gateway publishes as the publishers its map and device give it (gridstat.scadaPublishers;
       docs/iec104.md, docs/dnp3.md, docs/goose.md, "In Kubernetes"). */ -}}
{{- $gwName := trimPrefix (printf "%s-gateway-" $kind) $.role -}}
{{- range index $root.Values.scada $kind }}{{ if eq .name $gwName }}{{ $names = concat $names (include "gridstat.scadaPublishers" (dict "kind" $kind "item" .) | fromJsonArray) }}{{ end }}{{ end -}}
{{- end -}}
{{- end -}}
{{- range $services -}}
{{- $names = concat $names (list (printf "%s%s" $prefix .) (printf "%s%s.%s" $prefix . $ns) (printf "%s%s.%s.svc" $prefix . $ns) (printf "%s%s.%s.svc.%s" $prefix . $ns $domain)) -}}
{{- end -}}
{{- toJson (append $names "localhost") -}}
{{- end -}}

{{/*
The publisher names a SCADA gateway publishes as, which its certificate carries as DNS SANs (under mTLS
the broker binds a publisher name to the certificate, docs/security.md "Client identity"): the item's
`publishers`, and what its map file and device address give --
  iec104: `stations` values; each point's `publisher` (or the part of `name` before '/'), else its
          station's name, else ca<CA>; each of `commonAddresses` as its station's name, else ca<CA>
          (docs/iec104.md, section 4);
  dnp3:   the map's `publisher`, else dnp<address>; each point's `name` before '/' (docs/dnp3.md, section 3);
  goose:  each subscribe block member's `variable` before '/' (docs/goose.md, "The map file").
input: (dict "kind" "iec104" "item" $gw). output: JSON list, sorted, without duplicates.
*/}}
{{- define "gridstat.scadaPublishers" -}}
{{- $gw := .item -}}
{{- $m := $gw.map | default dict -}}
{{- $names := $gw.publishers | default list -}}
{{- if eq .kind "iec104" -}}
{{- $stations := $m.stations | default dict -}}
{{- range $ca, $p := $stations }}{{ $names = append $names (toString $p) }}{{ end -}}
{{- range $pt := $m.points | default list -}}
{{- $ca := include "gridstat.argString" $pt.ca -}}
{{- if $pt.publisher }}{{ $names = append $names (toString $pt.publisher) -}}
{{- else if and $pt.name (contains "/" (toString $pt.name)) }}{{ $names = append $names (first (splitList "/" (toString $pt.name))) -}}
{{- else }}{{ $names = append $names (index $stations $ca | default (printf "ca%s" $ca) | toString) }}{{ end -}}
{{- end -}}
{{- if not $gw.onlyMapped -}}
{{- range $ca := $gw.commonAddresses | default list }}{{ $names = append $names (index $stations (include "gridstat.argString" $ca) | default (printf "ca%s" (include "gridstat.argString" $ca)) | toString) }}{{ end -}}
{{- end -}}
{{- else if eq .kind "dnp3" -}}
{{- if ne (toString ($m.others | default "publish")) "skip" -}}
{{- $names = append $names (toString ($m.publisher | default (printf "dnp%s" (include "gridstat.argString" $gw.address)))) -}}
{{- end -}}
{{- range $pt := $m.points | default list -}}
{{- if and $pt.name (contains "/" (toString $pt.name)) }}{{ $names = append $names (first (splitList "/" (toString $pt.name))) -}}
{{- else }}{{ $names = append $names (toString ($m.publisher | default (printf "dnp%s" (include "gridstat.argString" $gw.address)))) }}{{ end -}}
{{- end -}}
{{- else if eq .kind "goose" -}}
{{- range $b := $m.subscribe | default list }}{{ range $b.members | default list -}}
{{- if contains "/" (toString .variable) }}{{ $names = append $names (first (splitList "/" (toString .variable))) }}{{ end -}}
{{- end }}{{ end -}}
{{- end -}}
{{- toJson ($names | uniq | sortAlpha) -}}
{{- end -}}

{{/* Whether the release runs SCADA gateways, which serve /metrics ("true" or ""). input: the root context. */}}
{{- define "gridstat.hasGatewayMetricsPods" -}}
{{- if or .Values.scada.iec104 .Values.scada.dnp3 .Values.scada.goose }}true{{ end -}}
{{- end -}}

{{/* A role's TLS volume. input: (dict "root" $ "role" "broker-a" "name" "tls"). */}}
{{- define "gridstat.tlsVolume" -}}
{{- if .root.Values.tls.enabled }}
- name: {{ .name | default "tls" }}
  secret:
    secretName: {{ include "gridstat.tlsSecretName" . | quote }}
    defaultMode: 0440
{{- end }}
{{- end -}}
{{/* Environment of the Python gRPC clients (operator, topology sidecars, chart tests) under mTLS.
     input: (dict "root" $ "path" "/etc/gridstat/tls"). */}}
{{- define "gridstat.tlsEnv" -}}
{{- if .root.Values.tls.enabled }}
{{- $path := .path | default "/etc/gridstat/tls" }}
- {name: GRIDSTAT_TLS_CA, value: {{ printf "%s/ca.crt" $path }}}
- {name: GRIDSTAT_TLS_CERT, value: {{ printf "%s/tls.crt" $path }}}
- {name: GRIDSTAT_TLS_KEY, value: {{ printf "%s/tls.key" $path }}}
{{- end }}
{{- end -}}
{{/* input: (dict "root" $ "name" "tls" "path" "/etc/gridstat/tls"). */}}
{{- define "gridstat.tlsMount" -}}
{{- if .root.Values.tls.enabled }}
- name: {{ .name | default "tls" }}
  mountPath: {{ .path | default "/etc/gridstat/tls" }}
  readOnly: true
{{- end }}
{{- end -}}

{{/*
Role grants for one shared certificate (tls.secretName): its identities, tls.componentIdentities, act
as every component, so each pattern gets the admin, broker and router roles on every gRPC server
(`--grant ROLE=PATTERN`, docs/security.md "Control by role"). Per-role certificates carry the
identities the default grants already name: nothing to add. input: the root context. output: one
argument per line, "- --grant=..." items.
*/}}
{{- define "gridstat.grantArgs" -}}
{{- if and .Values.tls.enabled .Values.tls.secretName }}
{{- range .Values.tls.componentIdentities }}
{{- $p := . }}
{{- range list "admin" "broker" "router" }}
- {{ printf "--grant=%s=%s" . $p | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
The leaf broker's edge proxies and platform components that act for clients (`--trusted-proxy`):
the routers' edge proxies, the operator (and the topology sidecars) and the condensation host; with
one shared certificate, tls.componentIdentities. input: the root context. output: JSON list.
*/}}
{{- define "gridstat.trustedProxies" -}}
{{- if .Values.tls.secretName -}}
{{- toJson .Values.tls.componentIdentities -}}
{{- else -}}
{{- toJson (list (include "gridstat.tlsIdentity" "router") (include "gridstat.tlsIdentity" "operator") (include "gridstat.tlsIdentity" "condense")) -}}
{{- end -}}
{{- end -}}

{{/* Name of the channel master secret's Secret (given or generated). input: the root context. */}}
{{- define "gridstat.channelKeySecretName" -}}
{{- default (include "gridstat.roleName" (dict "root" . "role" "channel-key")) .Values.dataPlaneAuth.secretName -}}
{{- end -}}

{{/*
The leaf brokers' data-plane security: channel authentication with the key from a Secret
(--channel-auth all, --channel-key-file) and the publish/subscribe policy from a ConfigMap (--policy,
re-read by the broker when Kubernetes updates the mounted file). input: the root context.
*/}}
{{- define "gridstat.brokerSecurityArgs" -}}
{{- if .Values.dataPlaneAuth.enabled }}
- --channel-auth=all
- --channel-key-file=/etc/gridstat/channel-key/channel-key
{{- end }}
{{- if .Values.authorization.policy }}
- --policy=/etc/gridstat/policy/policy.yaml
{{- if not .Values.tls.enabled }}
{{- /* insecure on purpose (security.insecure): a policy then trusts self-declared names (docs/security.md) */}}
- --insecure-client-names
{{- end }}
{{- end }}
{{- end -}}
{{- define "gridstat.brokerSecurityMounts" -}}
{{- if .Values.dataPlaneAuth.enabled }}
- {name: channel-key, mountPath: /etc/gridstat/channel-key, readOnly: true}
{{- end }}
{{- if .Values.authorization.policy }}
- {name: policy, mountPath: /etc/gridstat/policy, readOnly: true}
{{- end }}
{{- end -}}
{{- define "gridstat.brokerSecurityVolumes" -}}
{{- if .Values.dataPlaneAuth.enabled }}
- name: channel-key
  secret:
    secretName: {{ include "gridstat.channelKeySecretName" . | quote }}
    defaultMode: 0400
    items:
      - {key: {{ .Values.dataPlaneAuth.secretKey | quote }}, path: channel-key}
{{- end }}
{{- if .Values.authorization.policy }}
- name: policy
  configMap:
    name: {{ include "gridstat.roleName" (dict "root" . "role" "policy") }}
{{- end }}
{{- end -}}

{{/*
Cross-field checks, gathered and reported once (Bitnami's validateValues). Each message names the
key and the fix. Called from NOTES.txt and from the operator's Deployment, so it runs on template and install.
*/}}
{{- define "gridstat.validateValues" -}}
{{- $messages := list -}}
{{- $messages = append $messages (include "gridstat.validateValues.names" .) -}}
{{- $messages = append $messages (include "gridstat.validateValues.clouds" .) -}}
{{- $messages = append $messages (include "gridstat.validateValues.parent" .) -}}
{{- $messages = append $messages (include "gridstat.validateValues.tls" .) -}}
{{- $messages = append $messages (include "gridstat.validateValues.dataPlaneAuth" .) -}}
{{- $messages = append $messages (include "gridstat.validateValues.condensationHost" .) -}}
{{- $messages = append $messages (include "gridstat.validateValues.c37118" .) -}}
{{- $messages = append $messages (include "gridstat.validateValues.sttp" .) -}}
{{- $messages = append $messages (include "gridstat.validateValues.scada" .) -}}
{{- $messages = append $messages (include "gridstat.validateValues.telemetry" .) -}}
{{- $messages = without $messages "" -}}
{{- if $messages -}}
{{- printf "\nVALUES VALIDATION:\n%s" (join "\n" $messages) | fail -}}
{{- end -}}
{{- end -}}

{{- define "gridstat.validateValues.clouds" -}}
{{- $ids := dict -}}
{{- $clouds := dict -}}
{{- range $c := .Values.clouds -}}
{{- if hasKey $clouds (lower (toString $c.name)) -}}
clouds: cloud {{ $c.name | quote }} appears twice (names are compared lower-cased: they name Kubernetes objects); give each cloud its own name.
{{ end -}}
{{- $_ := set $clouds (lower (toString $c.name)) true -}}
{{- $names := dict -}}
{{- range $r := $c.routers -}}
{{- if hasKey $ids (toString $r.id) -}}
clouds[{{ $c.name }}].routers: router id {{ $r.id }} is used twice; router ids are unique in the utility.
{{ end -}}
{{- $_ := set $ids (toString $r.id) true -}}
{{- $_ := set $names $r.name true -}}
{{- end -}}
{{- range $l := $c.links -}}
{{- if not (and (hasKey $names $l.a) (hasKey $names $l.b)) -}}
clouds[{{ $c.name }}].links: link {{ $l.a }}-{{ $l.b }} names a router the cloud does not have.
{{ end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
Names that become Kubernetes object names and labels (docs/kubernetes.md, "Names"): DNS-1123 labels
once lower-cased (values.schema.json refuses others first; this says so again when the schema is
skipped), and no derived name over its limit -- 63 characters for a Service or a label value, 52
for a StatefulSet (its pods' `-N` suffix and the controller-revision-hash label `<name>-<hash>`
must still fit in 63). Names are never truncated silently: two clouds would share objects.
*/}}
{{- define "gridstat.validateValues.names" -}}
{{- $dns := "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" -}}
{{- $full := include "gridstat.fullname" . -}}
{{- $fix := "shorten the release name (or set fullnameOverride)" -}}
{{- range $i, $c := .Values.clouds -}}
{{- $n := lower (toString $c.name) -}}
{{- if or (not (regexMatch $dns $n)) (gt (len $n) 63) -}}
clouds[{{ $i }}].name: {{ $c.name | quote }} is not a DNS-1123 label once lower-cased (at most 63 letters, digits and '-', starting and ending with a letter or digit): it names the cloud's broker and router objects.
{{ end -}}
{{- range $role := list "broker" "router" -}}
{{- $name := printf "%s-%s-%s" $full $role $n -}}
{{- if gt (len $name) 52 -}}
clouds[{{ $i }}].name: cloud {{ $c.name | quote }} makes the StatefulSet name {{ $name | quote }} {{ len $name }} characters long, over the 52 a StatefulSet may have (pod names add -N, the controller-revision-hash label -<hash>, within 63); {{ $fix }} or the cloud name.
{{ end -}}
{{- end -}}
{{- range $j, $r := $c.routers -}}
{{- if not (regexMatch $dns (lower (toString $r.name))) -}}
clouds[{{ $i }}].routers[{{ $j }}].name: {{ $r.name | quote }} is not a DNS-1123 label once lower-cased (letters, digits and '-', starting and ending with a letter or digit).
{{ end -}}
{{- end -}}
{{- end -}}
{{- if .Values.parent.enabled -}}
{{- $p := lower (toString .Values.parent.name) -}}
{{- if not (regexMatch $dns $p) -}}
parent.name: {{ .Values.parent.name | quote }} is not a DNS-1123 label once lower-cased (letters, digits and '-', starting and ending with a letter or digit).
{{ end -}}
{{- $name := printf "%s-parent" $full -}}
{{- if gt (len $name) 52 -}}
parent.enabled: the parent's StatefulSet name {{ $name | quote }} is {{ len $name }} characters long, over the 52 a StatefulSet may have; {{ $fix }}.
{{ end -}}
{{- end -}}
{{- with .Values.utility -}}
{{- if or (not (regexMatch $dns (lower (toString .)))) (gt (len (toString .)) 63) -}}
utility: {{ . | quote }} is not a DNS-1123 label once lower-cased (at most 63 letters, digits and '-'): it is the label gridstat.io/utility.
{{ end -}}
{{- end -}}
{{- range $role := list (list "admission" "admission" .Values.admission.enabled) (list "operator" "operator" .Values.operator.enabled) (list "condensation-host" "condensationHost" .Values.condensationHost.enabled) -}}
{{- $name := printf "%s-%s" $full (index $role 0) -}}
{{- if and (index $role 2) (gt (len $name) 63) -}}
{{ index $role 1 }}.enabled: the {{ index $role 0 }} object name {{ $name | quote }} is {{ len $name }} characters long, over the 63 of a Service name or label value; {{ $fix }}.
{{ end -}}
{{- end -}}
{{- end -}}

{{- define "gridstat.validateValues.parent" -}}
{{- if and (gt (len .Values.clouds) 1) (not .Values.parent.enabled) -}}
parent.enabled: {{ len .Values.clouds }} clouds need a parent broker for inter-cloud subscriptions and mode changes; set parent.enabled=true.
{{- end -}}
{{- end -}}

{{- define "gridstat.validateValues.tls" -}}
{{- if and (not .Values.tls.enabled) (not .Values.security.insecure) -}}
security.insecure: tls.enabled=false turns off mTLS: anyone who can reach a gRPC port could command the routers and brokers (docs/security.md). Set security.insecure=true to acknowledge it, or leave tls.enabled=true (certificates are generated on install).
{{ end -}}
{{- end -}}

{{- define "gridstat.validateValues.dataPlaneAuth" -}}
{{- if and (not .Values.dataPlaneAuth.enabled) (not .Values.security.insecure) -}}
security.insecure: dataPlaneAuth.enabled=false turns off datagram authentication: anyone who can send UDP to a router could forge events (docs/security.md). Set security.insecure=true to acknowledge it, or leave dataPlaneAuth.enabled=true (the key is generated on install).
{{ end -}}
{{- end -}}

{{- define "gridstat.validateValues.c37118" -}}
{{- $root := . -}}
{{- $sims := list -}}
{{- range .Values.c37118.simulators }}{{ $sims = append $sims .name }}{{ end -}}
{{- range $kind, $items := dict "gateways" .Values.c37118.gateways "pdcServers" .Values.c37118.pdcServers -}}
{{- range $i, $item := $items -}}
{{- $cloud := default (index $root.Values.clouds 0).name $item.cloud -}}
{{- $edge := false -}}
{{- range $root.Values.clouds }}{{ if eq .name $cloud }}{{ range .routers }}{{ if and (eq .name $item.edgeRouter) (has .role (list "edge" "edge-border")) }}{{ $edge = true }}{{ end }}{{ end }}{{ end }}{{ end -}}
{{- if not $edge }}
c37118.{{ $kind }}[{{ $i }}].edgeRouter: {{ $item.edgeRouter | quote }} is not an edge router of cloud {{ $cloud | quote }}.
{{- end -}}
{{- if and (eq $kind "gateways") (not $item.device) (not (has $item.simulator $sims)) }}
c37118.gateways[{{ $i }}]: give device (HOST:PORT) or simulator (one of c37118.simulators: {{ $sims | toJson }}).
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The STTP gateways (docs/sttp.md, "In Kubernetes"): each item's edge router is an edge (or edge-border)
router of its cloud; a server serves something (where or variables) on a port other than the /metrics
one; names are unique per list and make object names Kubernetes takes whole; a gateway with a
generated certificate names what it publishes as (publisher or devices), which the broker binds to
that certificate (docs/security.md, "Client identity").
*/}}
{{- define "gridstat.validateValues.sttp" -}}
{{- $root := . -}}
{{- $full := include "gridstat.fullname" . -}}
{{- $s := .Values.sttp -}}
{{- range $kind, $items := dict "servers" $s.servers "gateways" $s.gateways -}}
{{- $role := ternary "sttp-server" "sttp-gateway" (eq $kind "servers") -}}
{{- $seen := dict -}}
{{- range $i, $item := $items -}}
{{- $path := printf "sttp.%s[%d]" $kind $i -}}
{{- if hasKey $seen (toString $item.name) }}
{{ $path }}.name: {{ $item.name | quote }} appears twice in sttp.{{ $kind }}; give each its own name (it names its Deployment and certificate).
{{- end -}}
{{- $_ := set $seen (toString $item.name) true -}}
{{- $names := list (printf "%s-%s-%s" $full $role $item.name) -}}
{{- if $root.Values.tls.enabled }}{{ $names = append $names (printf "%s-tls-%s-%s" $full $role $item.name) }}{{ end -}}
{{- range $names -}}
{{- if gt (len .) 63 }}
{{ $path }}.name: {{ $item.name | quote }} makes the object name {{ . | quote }} {{ len . }} characters long, over the 63 of a Service or Secret name the chart gives it; shorten the name or the release name (or set fullnameOverride).
{{- end -}}
{{- end -}}
{{- $cloud := default (index $root.Values.clouds 0).name $item.cloud -}}
{{- $found := false -}}
{{- $edge := false -}}
{{- range $root.Values.clouds }}{{ if eq .name $cloud }}{{ $found = true }}{{ range .routers }}{{ if and (eq .name $item.edgeRouter) (has .role (list "edge" "edge-border")) }}{{ $edge = true }}{{ end }}{{ end }}{{ end }}{{ end -}}
{{- if not $found }}
{{ $path }}.cloud: cloud {{ $cloud | quote }} is not in clouds.
{{- else if not $edge }}
{{ $path }}.edgeRouter: {{ $item.edgeRouter | quote }} is not an edge router of cloud {{ $cloud | quote }}.
{{- end -}}
{{- if eq $kind "servers" -}}
{{- if not $item.intervalMs }}
{{ $path }}.intervalMs: give the interval of its subscriptions, in milliseconds (`--interval-ms`; at a device frame rate whole frames, docs/frame-rates.md).
{{- end -}}
{{- if not (or $item.where $item.variables) }}
{{ $path }}: give where (a where-expression, docs/queries.md) or variables (PUBLISHER/VARIABLE[:TYPE] each): the server serves nothing otherwise.
{{- end -}}
{{- if eq (int ($item.port | default 7165)) (int $s.metricsPort) }}
{{ $path }}.port: {{ $item.port | default 7165 }} is sttp.metricsPort, where the server serves /metrics; give the STTP port another number.
{{- end -}}
{{- else -}}
{{- if not $item.source }}
{{ $path }}.source: give the STTP publisher's address, HOST:PORT.
{{- end -}}
{{- if and (include "gridstat.tlsGenerated" (dict "root" $root "role" (printf "sttp-gateway-%s" $item.name))) (not $item.publisher) (not $item.devices) }}
{{ $path }}: under tls.enabled the broker takes a publisher name only from a certificate that names it (docs/security.md, "Client identity"): give publisher (every variable under that name) or devices (the device acronyms of the source, GridStat publisher names), which the gateway's certificate then carries.
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The SCADA gateways (docs/iec104.md, docs/dnp3.md, docs/goose.md, "In Kubernetes"): each item's edge
router is an edge (or edge-border) router of its cloud; the device is given (outstation, with a link
address for DNP3; an interface and a map with subscribe or publish blocks for GOOSE); names are unique
per list and make object names Kubernetes takes whole; a gateway with a generated certificate
publishes as at least one name its certificate can carry (gridstat.scadaPublishers).
*/}}
{{- define "gridstat.validateValues.scada" -}}
{{- $root := . -}}
{{- $full := include "gridstat.fullname" . -}}
{{- range $kind := list "iec104" "dnp3" "goose" -}}
{{- $role := printf "%s-gateway" $kind -}}
{{- $seen := dict -}}
{{- range $i, $item := index $root.Values.scada $kind -}}
{{- $path := printf "scada.%s[%d]" $kind $i -}}
{{- if hasKey $seen (toString $item.name) }}
{{ $path }}.name: {{ $item.name | quote }} appears twice in scada.{{ $kind }}; give each its own name (it names its Deployment and certificate).
{{- end -}}
{{- $_ := set $seen (toString $item.name) true -}}
{{- $names := list (printf "%s-%s-%s" $full $role $item.name) -}}
{{- if $root.Values.tls.enabled }}{{ $names = append $names (printf "%s-tls-%s-%s" $full $role $item.name) }}{{ end -}}
{{- range $names -}}
{{- if gt (len .) 63 }}
{{ $path }}.name: {{ $item.name | quote }} makes the object name {{ . | quote }} {{ len . }} characters long, over the 63 of a Secret name or label value the chart gives it; shorten the name or the release name (or set fullnameOverride).
{{- end -}}
{{- end -}}
{{- $cloud := default (index $root.Values.clouds 0).name $item.cloud -}}
{{- $found := false -}}
{{- $edge := false -}}
{{- range $root.Values.clouds }}{{ if eq .name $cloud }}{{ $found = true }}{{ range .routers }}{{ if and (eq .name $item.edgeRouter) (has .role (list "edge" "edge-border")) }}{{ $edge = true }}{{ end }}{{ end }}{{ end }}{{ end -}}
{{- if not $found }}
{{ $path }}.cloud: cloud {{ $cloud | quote }} is not in clouds.
{{- else if not $edge }}
{{ $path }}.edgeRouter: {{ $item.edgeRouter | quote }} is not an edge router of cloud {{ $cloud | quote }}.
{{- end -}}
{{- if eq $kind "goose" -}}
{{- if not $item.interface }}
{{ $path }}.interface: give the node's network interface on the station bus (`--interface`, e.g. eth1).
{{- end -}}
{{- if not (and $item.map (or $item.map.subscribe $item.map.publish)) }}
{{ $path }}.map: give the map file's subscribe and/or publish blocks (docs/goose.md, "The map file"): the gateway reads or sends nothing otherwise.
{{- end -}}
{{- if eq (int ($item.metricsPort | default $root.Values.scada.metricsPort)) (int $root.Values.router.eventPort) }}
{{ $path }}.metricsPort: {{ $item.metricsPort | default $root.Values.scada.metricsPort }} is router.eventPort; on the node's network (hostNetwork) give /metrics another port.
{{- end -}}
{{- else -}}
{{- if not $item.outstation }}
{{ $path }}.outstation: give the outstation's address, HOST:PORT.
{{- end -}}
{{- if and (eq $kind "dnp3") (not (hasKey $item "address")) }}
{{ $path }}.address: give the outstation's DNP3 link address (`--address`, 0..65519).
{{- end -}}
{{- end -}}
{{- if and (include "gridstat.tlsGenerated" (dict "root" $root "role" (printf "%s-%s" $role $item.name))) (not (include "gridstat.scadaPublishers" (dict "kind" $kind "item" $item) | fromJsonArray)) }}
{{ $path }}: under tls.enabled the broker takes a publisher name only from a certificate that names it (docs/security.md, "Client identity"), and nothing here says which names this gateway publishes as: give {{ if eq $kind "iec104" }}commonAddresses or map stations/points{{ else }}map subscribe members as PUBLISHER/VARIABLE{{ end }}, or publishers, which its certificate then carries.
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Kafka telemetry, the archive and the Spark jobs (docs/kubernetes.md, "Telemetry, archive and Spark jobs"). */}}
{{- define "gridstat.validateValues.telemetry" -}}
{{- $root := . -}}
{{- $k := .Values.telemetry.kafka -}}
{{- if and $k.sasl.secretName (not $k.tls.secretName) }}
telemetry.kafka.sasl.secretName: SASL needs TLS here (telemetry.kafka.tls.secretName, a Secret with the ca.crt that signed Kafka's certificates): without it every record, and with PLAIN the password, would cross the network in clear (docs/telemetry.md, "Kafka security").
{{- end -}}
{{- if and $k.tls.clientCertificate (not $k.tls.secretName) }}
telemetry.kafka.tls.clientCertificate: needs telemetry.kafka.tls.secretName, the Secret holding ca.crt, tls.crt and tls.key.
{{- end -}}
{{- range $what := list (list "archive.enabled" .Values.archive.enabled) (list "spark.compliance.enabled" .Values.spark.compliance.enabled) (list "spark.alerts.enabled" .Values.spark.alerts.enabled) -}}
{{- if and (index $what 1) (not $k.bootstrap) }}
{{ index $what 0 }}: needs telemetry.kafka.bootstrap, the Kafka it {{ if eq (index $what 0) "archive.enabled" }}writes to{{ else }}reads{{ end }} (HOST:PORT[,HOST:PORT]).
{{- end -}}
{{- end -}}
{{- if and (or .Values.spark.compliance.enabled .Values.spark.alerts.enabled) (not (and .Values.spark.image.repository .Values.spark.image.tag)) }}
spark.image: the Spark jobs need an image with Spark, its Kafka source (spark-sql-kafka-0-10) and the jobs of spark/: set spark.image.repository and spark.image.tag (docs/kubernetes.md, "Telemetry, archive and Spark jobs").
{{- end -}}
{{- if .Values.archive.enabled -}}
{{- if not .Values.archive.variables }}
archive.variables: name what to archive, PUBLISHER/VARIABLE[:INTERVAL_MS] each.
{{- end -}}
{{- $cloud := default (index .Values.clouds 0).name .Values.archive.cloud -}}
{{- $edge := false -}}
{{- range .Values.clouds }}{{ if eq .name $cloud }}{{ range .routers }}{{ if and (eq .name $root.Values.archive.edgeRouter) (has .role (list "edge" "edge-border")) }}{{ $edge = true }}{{ end }}{{ end }}{{ end }}{{ end -}}
{{- if not $edge }}
archive.edgeRouter: {{ .Values.archive.edgeRouter | quote }} is not an edge router of cloud {{ $cloud | quote }}.
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "gridstat.validateValues.condensationHost" -}}
{{- if .Values.condensationHost.enabled -}}
{{- $cloud := default (index .Values.clouds 0).name .Values.condensationHost.cloud -}}
{{- $found := false -}}
{{- range .Values.clouds }}{{ if eq .name $cloud }}{{ $found = true }}{{ end }}{{ end -}}
{{- if not $found -}}
condensationHost.cloud: cloud {{ $cloud | quote }} is not in clouds.
{{- end -}}
{{- end -}}
{{- end -}}
