{{- /*
Mutual TLS between workers, coordinators and `flotilla status` (README: "TLS between workers and
coordinators"). Each role of a fleet mounts one Secret (ca.crt, tls.crt, tls.key) at
/etc/flotilla/tls: cert-manager's Certificate of the same name, or a Secret you made under that name.
The processes re-read the files when the kubelet updates the Secret's volume, so a renewal needs no
restart.
*/}}

{{/* Where a pod finds its Secret's files. */}}
{{- define "flotilla.tlsDir" -}}
/etc/flotilla/tls
{{- end }}

{{/* The Secret of a role of a fleet (ctx: root, fleet, role): `<role name>-tls`. */}}
{{- define "flotilla.tlsSecret" -}}
{{- printf "%s-tls" (include "flotilla.roleName" .) | trunc 253 }}
{{- end }}

{{/* The name the coordinators' certificate carries and workers check: the gRPC Service's DNS name. */}}
{{- define "flotilla.tlsServerName" -}}
{{- printf "%s.%s.svc" (include "flotilla.roleName" (dict "root" .root "fleet" .fleet "role" "coordinator")) .root.Release.Namespace }}
{{- end }}

{{/* The worker ids a fleet's worker certificate covers: `<pod name>.<fleet>.workers`, named by the
wildcard `*.<fleet>.workers`. */}}
{{- define "flotilla.workerIdSuffix" -}}
{{- printf "%s.workers" .fleet.name }}
{{- end }}

{{/* The transport flags of a container (ctx: root, fleet, role), one YAML list item per line. */}}
{{- define "flotilla.tlsArgs" -}}
{{- if .root.Values.tls.enabled -}}
{{- $dir := include "flotilla.tlsDir" . -}}
- --tls-cert={{ $dir }}/tls.crt
- --tls-key={{ $dir }}/tls.key
- --tls-client-ca={{ $dir }}/ca.crt
{{- if eq .role "worker" }}
- --tls-server-name={{ include "flotilla.tlsServerName" . }}
- --worker-id=$(POD_NAME).{{ include "flotilla.workerIdSuffix" . }}
{{- end }}
{{- else -}}
- --insecure-plaintext
{{- end }}
{{- end }}

{{/* The `flotilla status` flags NOTES print for a shell in a coordinator pod (its own certificate is
also a client certificate of the fleet's CA). */}}
{{- define "flotilla.statusTlsArgs" -}}
{{- if .root.Values.tls.enabled -}}
{{- $dir := include "flotilla.tlsDir" . -}}
--tls-cert={{ $dir }}/tls.crt --tls-key={{ $dir }}/tls.key --tls-client-ca={{ $dir }}/ca.crt --tls-server-name={{ include "flotilla.tlsServerName" . }}
{{- else -}}
--insecure-plaintext
{{- end }}
{{- end }}

{{/* The TLS volume mount of a container, or nothing. */}}
{{- define "flotilla.tlsVolumeMount" -}}
{{- if .root.Values.tls.enabled -}}
- name: tls
  mountPath: {{ include "flotilla.tlsDir" . }}
  readOnly: true
{{- end }}
{{- end }}

{{/* The TLS volume of a pod, or nothing. */}}
{{- define "flotilla.tlsVolume" -}}
{{- if .root.Values.tls.enabled -}}
- name: tls
  secret:
    secretName: {{ include "flotilla.tlsSecret" . }}
{{- end }}
{{- end }}

{{/* Checks the TLS values once. */}}
{{- define "flotilla.tlsCheck" -}}
{{- $tls := .Values.tls }}
{{- if and $tls.enabled (eq $tls.source "certManager") (not $tls.certManager.issuerRef.name) }}
{{- fail "tls.certManager.issuerRef.name is required with tls.source=certManager (or give tls.source=existingSecret with your Secrets, or tls.enabled=false to run plaintext on purpose)" }}
{{- end }}
{{- end }}
