{{- /*
How every container reaches etcd (README: "etcd: TLS, auth and the key prefix"): the endpoints, the key
prefix, and optionally client TLS from one Secret (ca.crt, tls.crt, tls.key) mounted at
/etc/flotilla/etcd-tls and a password from another mounted at /etc/flotilla/etcd-auth. The password is
a file, never a flag. The processes read both at start-up: a rotated certificate or password takes a
rolling restart.
*/}}

{{/* The bundled etcd's StatefulSet, Service and Secret prefix: `<fullname>-etcd`. */}}
{{- define "flotilla.etcdBundledName" -}}
{{- printf "%s-etcd" (include "flotilla.fullname" .) }}
{{- end }}

{{/* The labels that select the bundled etcd's pods. */}}
{{- define "flotilla.etcdSelectorLabels" -}}
app.kubernetes.io/name: {{ include "flotilla.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: etcd
{{- end }}

{{/* Every label of the bundled etcd's resources. */}}
{{- define "flotilla.etcdLabels" -}}
helm.sh/chart: {{ include "flotilla.chart" . }}
{{ include "flotilla.etcdSelectorLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: flotilla
{{- end }}

{{/* The endpoints the fleets use, as a YAML list: etcd.endpoints, or the bundled members'. */}}
{{- define "flotilla.etcdEndpoints" -}}
{{- if .Values.etcd.bundled.enabled }}
{{- $name := include "flotilla.etcdBundledName" . }}
{{- range $i := until (int .Values.etcd.bundled.replicas) }}
- {{ printf "https://%s-%d.%s.%s.svc:2379" $name $i $name $.Release.Namespace }}
{{- end }}
{{- else }}
{{- toYaml .Values.etcd.endpoints }}
{{- end }}
{{- end }}

{{/* The Secret with the fleets' etcd CA and client certificate, or nothing. */}}
{{- define "flotilla.etcdTlsSecret" -}}
{{- if .Values.etcd.bundled.enabled }}
{{- printf "%s-client" (include "flotilla.etcdBundledName" .) }}
{{- else }}
{{- .Values.etcd.tls.existingSecret }}
{{- end }}
{{- end }}

{{/* Where a pod finds the etcd TLS Secret's files. */}}
{{- define "flotilla.etcdTlsDir" -}}
/etc/flotilla/etcd-tls
{{- end }}

{{/* Where a pod finds the etcd password file. */}}
{{- define "flotilla.etcdAuthDir" -}}
/etc/flotilla/etcd-auth
{{- end }}

{{/* Checks the etcd values once per render (called by flotilla.etcdArgs). */}}
{{- define "flotilla.etcdCheck" -}}
{{- $etcd := .Values.etcd }}
{{- if and $etcd.bundled.enabled $etcd.endpoints }}
{{- fail "etcd.endpoints and etcd.bundled.enabled exclude each other: the fleets use the bundled members" }}
{{- end }}
{{- if and $etcd.bundled.enabled $etcd.tls.existingSecret }}
{{- fail "etcd.tls.existingSecret and etcd.bundled.enabled exclude each other: the fleets use the bundled etcd's client Secret" }}
{{- end }}
{{- range $etcd.endpoints }}
{{- if and $etcd.tls.existingSecret (not (hasPrefix "https://" .)) }}
{{- fail (printf "etcd.endpoints: %s must be https:// when etcd.tls.existingSecret is set" .) }}
{{- end }}
{{- if and (not $etcd.tls.existingSecret) (hasPrefix "https://" .) }}
{{- fail (printf "etcd.endpoints: %s is https://, so set etcd.tls.existingSecret to a Secret holding the CA (ca.crt) that verifies it" .) }}
{{- end }}
{{- end }}
{{- if and $etcd.auth.username (not $etcd.auth.existingSecret) }}
{{- fail "etcd.auth.username needs etcd.auth.existingSecret, the Secret holding its password" }}
{{- end }}
{{- if and $etcd.auth.existingSecret (not $etcd.auth.username) }}
{{- fail "etcd.auth.existingSecret needs etcd.auth.username" }}
{{- end }}
{{- end }}

{{/* The etcd flags of a container (root context), one YAML list item per line. */}}
{{- define "flotilla.etcdArgs" -}}
{{- include "flotilla.etcdCheck" . }}
{{- $etcd := .Values.etcd -}}
- {{ include "flotilla.etcdArg" . | quote }}
- --etcd-prefix={{ $etcd.prefix }}
{{- if include "flotilla.etcdTlsSecret" . }}
{{- $dir := include "flotilla.etcdTlsDir" . }}
- --etcd-cafile={{ $dir }}/ca.crt
{{- if or $etcd.tls.clientCertificate $etcd.bundled.enabled }}
- --etcd-certfile={{ $dir }}/tls.crt
- --etcd-keyfile={{ $dir }}/tls.key
{{- end }}
{{- end }}
{{- if $etcd.auth.username }}
- --etcd-username={{ $etcd.auth.username }}
- --etcd-password-file={{ include "flotilla.etcdAuthDir" . }}/password
{{- end }}
{{- end }}

{{/* The same flags on one line, for the `flotilla status` command NOTES print. */}}
{{- define "flotilla.etcdStatusArgs" -}}
{{- $args := list }}
{{- range (include "flotilla.etcdArgs" . | fromYamlArray) }}
{{- $args = append $args . }}
{{- end }}
{{- join " " $args }}
{{- end }}

{{/* The etcd volume mounts of a container (root context), or nothing. */}}
{{- define "flotilla.etcdVolumeMounts" -}}
{{- if include "flotilla.etcdTlsSecret" . }}
- name: etcd-tls
  mountPath: {{ include "flotilla.etcdTlsDir" . }}
  readOnly: true
{{- end }}
{{- if .Values.etcd.auth.existingSecret }}
- name: etcd-auth
  mountPath: {{ include "flotilla.etcdAuthDir" . }}
  readOnly: true
{{- end }}
{{- end }}

{{/* The etcd volumes of a pod (root context), or nothing. Files are readable by the pod's fsGroup
only: the key and the password are secrets even inside the pod. */}}
{{- define "flotilla.etcdVolumes" -}}
{{- if include "flotilla.etcdTlsSecret" . }}
- name: etcd-tls
  secret:
    secretName: {{ include "flotilla.etcdTlsSecret" . }}
    defaultMode: 288 # 0440, written in decimal: YAML 1.1 and 1.2 read 0440 differently
{{- end }}
{{- if .Values.etcd.auth.existingSecret }}
- name: etcd-auth
  secret:
    secretName: {{ .Values.etcd.auth.existingSecret }}
    defaultMode: 288 # 0440, written in decimal: YAML 1.1 and 1.2 read 0440 differently
    items:
      - key: {{ .Values.etcd.auth.passwordKey }}
        path: password
{{- end }}
{{- end }}

{{/* Every volume mount of a container (ctx: root, fleet, role): the fleet's mTLS Secret and etcd's. */}}
{{- define "flotilla.volumeMounts" -}}
{{- $mounts := concat (include "flotilla.tlsVolumeMount" . | fromYamlArray) (include "flotilla.etcdVolumeMounts" .root | fromYamlArray) }}
{{- if $mounts }}
{{- toYaml $mounts }}
{{- end }}
{{- end }}

{{/* Every volume of a pod (ctx: root, fleet, role). */}}
{{- define "flotilla.volumes" -}}
{{- $volumes := concat (include "flotilla.tlsVolume" . | fromYamlArray) (include "flotilla.etcdVolumes" .root | fromYamlArray) }}
{{- if $volumes }}
{{- toYaml $volumes }}
{{- end }}
{{- end }}
