{{/* Names, labels, images and the merged fleets every template shares. */}}

{{/* The chart's name, as resources' app.kubernetes.io/name. */}}
{{- define "flotilla.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The release's resource name prefix: `<release>-<chart>`, or the release name alone when it already
contains the chart's. Kept to 30 characters, so `-<fleet>-coordinator` (fleet names have at most 20) still fits a
63-character name.
*/}}
{{- define "flotilla.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 30 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 30 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 30 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* `chart-version`, as the helm.sh/chart label. */}}
{{- define "flotilla.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The name of one role of one fleet: `<fullname>-<fleet>-<role>`.
Takes (dict "root" $ "fleet" $fleet "role" "coordinator"|"worker").
*/}}
{{- define "flotilla.roleName" -}}
{{- printf "%s-%s-%s" (include "flotilla.fullname" .root) .fleet.name .role | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The labels that select one role's pods. Takes the same dict as flotilla.roleName. */}}
{{- define "flotilla.selectorLabels" -}}
app.kubernetes.io/name: {{ include "flotilla.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .role }}
flotilla.dev/fleet: {{ .fleet.name }}
{{- end }}

{{/* Every label of one role's resources. Takes the same dict as flotilla.roleName. */}}
{{- define "flotilla.labels" -}}
helm.sh/chart: {{ include "flotilla.chart" .root }}
{{ include "flotilla.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: flotilla
{{- end }}

{{/*
An image reference from (dict "image" $override "default" .Values.image "root" $): each empty key of
the override falls back to the default's; the tag to the chart's appVersion; a digest wins over a tag.
*/}}
{{- define "flotilla.image" -}}
{{- $registry := default .default.registry .image.registry }}
{{- $repository := default .default.repository .image.repository }}
{{- $tag := default (default .root.Chart.AppVersion .default.tag) .image.tag }}
{{- $digest := default .default.digest .image.digest }}
{{- $ref := ternary (printf "%s/%s" $registry $repository) $repository (ne $registry "") }}
{{- if $digest }}
{{- printf "%s@%s" $ref $digest }}
{{- else }}
{{- printf "%s:%s" $ref $tag }}
{{- end }}
{{- end }}

{{/*
Merges (dict "dst" $map "src" $map) into dst in place, recursing into maps. Unlike sprig's
mergeOverwrite, a false, zero or empty value in src does override: a fleet must be able to turn a
default off.
*/}}
{{- define "flotilla.mergeInto" -}}
{{- $dst := .dst }}
{{- range $key, $value := .src }}
{{- if and (kindIs "map" $value) (kindIs "map" (get $dst $key)) }}
{{- include "flotilla.mergeInto" (dict "dst" (get $dst $key) "src" $value) }}
{{- else }}
{{- $_ := set $dst $key $value }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The fleets, each `fleetDefaults` overridden by its entry, checked: as YAML `fleets: [...]`, read back
with `include "flotilla.fleets" . | fromYaml`. Fails the render on a missing name, a duplicate name, or
a worker grace period the pod's termination would cut short.
*/}}
{{- define "flotilla.fleets" -}}
{{- $fleets := list }}
{{- $names := dict }}
{{- range $i, $entry := .Values.fleets }}
{{- $fleet := deepCopy $.Values.fleetDefaults }}
{{- include "flotilla.mergeInto" (dict "dst" $fleet "src" $entry) }}
{{- if not $fleet.name }}
{{- fail (printf "fleets[%d] needs a name" $i) }}
{{- end }}
{{- if hasKey $names $fleet.name }}
{{- fail (printf "fleet %q is listed twice" $fleet.name) }}
{{- end }}
{{- $_ := set $names $fleet.name true }}
{{- if and (not $fleet.worker.command) (not $fleet.controllers) }}
{{- fail (printf "fleet %q: set controllers (built-in) or worker.command (a custom controller)" $fleet.name) }}
{{- end }}
{{- if and $fleet.namespaces $fleet.namespaceSelector }}
{{- fail (printf "fleet %q: namespaces and namespaceSelector exclude each other" $fleet.name) }}
{{- end }}
{{- if le (int $fleet.worker.terminationGracePeriodSeconds) (int $fleet.worker.shutdownGracePeriodSeconds) }}
{{- fail (printf "fleet %q: worker.terminationGracePeriodSeconds must exceed worker.shutdownGracePeriodSeconds, or the kubelet kills running reconciles" $fleet.name) }}
{{- end }}
{{- $fleets = append $fleets $fleet }}
{{- end }}
{{- if not (or .Values.etcd.endpoints .Values.etcd.bundled.enabled) }}
{{- fail "etcd.endpoints is required: an etcd of your own (never the cluster's), or etcd.bundled.enabled" }}
{{- end }}
{{- toYaml (dict "fleets" $fleets) }}
{{- end }}

{{/* `--etcd-endpoints=<comma list>`. */}}
{{- define "flotilla.etcdArg" -}}
--etcd-endpoints={{ join "," (include "flotilla.etcdEndpoints" . | fromYamlArray) }}
{{- end }}

{{/* The env every container gets: the pod's name and namespace from the downward API (a worker's
`--worker-id=$(POD_NAME)…`, and the traces' k8s.pod.name / k8s.namespace.name), and the OTLP export. */}}
{{- define "flotilla.env" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
{{- if .Values.otlp.endpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ .Values.otlp.endpoint | quote }}
- name: OTEL_TRACES_SAMPLER
  value: {{ .Values.otlp.sampler | quote }}
- name: OTEL_TRACES_SAMPLER_ARG
  value: {{ .Values.otlp.sampleRatio | toString | quote }}
{{- end }}
{{- end }}
