{{/*
The RBAC rules of a fleet of built-in controllers, computed the way `flotilla rbac` computes them
(controllers/src/rbac/): the same grants per controller, the same `--controllers` selection and the same
canonical form. CI renders every ci/*-values.yaml and checks that each ClusterRole equals
`flotilla rbac --controllers <its flotilla.dev/controllers annotation> --role <its role>`.
*/}}

{{/*
Per built-in controller: `worker`, the grants its reconcile needs (controllers/src/rbac/worker.rs, with
the reasons), and `coordinator`, the resources its spec names, which a coordinator lists and watches
(controllers/src/rbac/coordinator.rs derives them from the spec; the garbage collector's owner graph
covers every resource).
*/}}
{{- define "flotilla.builtinRules" -}}
serviceaccount:
  worker:
    - {group: "", resources: [serviceaccounts], verbs: [create]}
  coordinator:
    - {group: "", resources: [namespaces, serviceaccounts]}
replicaset:
  worker:
    - {group: "", resources: [pods], verbs: [create, delete, patch]}
    - {group: apps, resources: [replicasets], verbs: [get]}
    - {group: apps, resources: [replicasets/status], verbs: [patch]}
    - {group: apps, resources: [replicasets/finalizers], verbs: [update]}
    - {group: "", resources: [events], verbs: [create, patch]}
  coordinator:
    - {group: apps, resources: [replicasets]}
    - {group: "", resources: [pods]}
deployment:
  worker:
    - {group: apps, resources: [replicasets], verbs: [create, delete, get, patch, update]}
    - {group: apps, resources: [deployments], verbs: [get]}
    - {group: apps, resources: [deployments/status, deployments/finalizers], verbs: [update]}
    - {group: "", resources: [events], verbs: [create, patch]}
  coordinator:
    - {group: apps, resources: [deployments, replicasets]}
    - {group: "", resources: [pods]}
replicationcontroller:
  worker:
    - {group: "", resources: [pods], verbs: [create, delete, patch]}
    - {group: "", resources: [replicationcontrollers], verbs: [get]}
    - {group: "", resources: [replicationcontrollers/status], verbs: [patch]}
    - {group: "", resources: [replicationcontrollers/finalizers], verbs: [update]}
    - {group: "", resources: [events], verbs: [create, patch]}
  coordinator:
    - {group: "", resources: [replicationcontrollers, pods]}
garbagecollector:
  worker:
    - {group: "*", resources: ["*"], verbs: [delete, get, patch]}
  coordinator:
    - {group: "*", resources: ["*"]}
namespace:
  worker:
    - {group: "", resources: [namespaces], verbs: [get]}
    - {group: "", resources: [namespaces/status, namespaces/finalize], verbs: [update]}
    - {group: "*", resources: ["*"], verbs: [delete, deletecollection, list]}
  coordinator:
    - {group: "", resources: [namespaces]}
job:
  worker:
    - {group: "", resources: [pods], verbs: [create, delete, list, patch]}
    - {group: batch, resources: [jobs], verbs: [get]}
    - {group: batch, resources: [jobs/status], verbs: [patch]}
    - {group: batch, resources: [jobs/finalizers], verbs: [update]}
    - {group: "", resources: [events], verbs: [create, patch]}
  coordinator:
    - {group: batch, resources: [jobs]}
    - {group: "", resources: [pods]}
ttl-after-finished:
  worker:
    - {group: batch, resources: [jobs], verbs: [delete, get]}
  coordinator:
    - {group: batch, resources: [jobs]}
podgc:
  worker:
    - {group: "", resources: [nodes], verbs: [get]}
    - {group: "", resources: [pods/status], verbs: [patch]}
    - {group: "", resources: [pods], verbs: [delete]}
  coordinator:
    - {group: "", resources: [namespaces, pods, nodes]}
cronjob:
  worker:
    - {group: batch, resources: [jobs], verbs: [create, delete, get]}
    - {group: batch, resources: [cronjobs], verbs: [get]}
    - {group: batch, resources: [cronjobs/status, cronjobs/finalizers], verbs: [update]}
    - {group: "", resources: [events], verbs: [create, patch]}
  coordinator:
    - {group: batch, resources: [cronjobs, jobs]}
statefulset:
  worker:
    - {group: "", resources: [pods], verbs: [create, delete, patch]}
    - {group: "", resources: [persistentvolumeclaims], verbs: [create, patch]}
    - {group: "", resources: [pods/finalizers], verbs: [update]}
    - {group: apps, resources: [controllerrevisions], verbs: [create, delete, get, patch]}
    - {group: apps, resources: [statefulsets], verbs: [get]}
    - {group: apps, resources: [statefulsets/status], verbs: [patch]}
    - {group: apps, resources: [statefulsets/finalizers], verbs: [update]}
    - {group: "", resources: [events], verbs: [create, patch]}
  coordinator:
    - {group: apps, resources: [statefulsets, controllerrevisions]}
    - {group: "", resources: [pods, persistentvolumeclaims]}
disruption:
  worker:
    - {group: policy, resources: [poddisruptionbudgets/status], verbs: [update]}
    - {group: apps, resources: [replicasets, deployments], verbs: [get]}
    - {group: "*", resources: ["*/scale"], verbs: [get]}
    - {group: "", resources: [pods], verbs: [get]}
    - {group: "", resources: [pods/status], verbs: [update]}
    - {group: "", resources: [events], verbs: [create, patch]}
  coordinator:
    - {group: policy, resources: [poddisruptionbudgets]}
    - {group: "", resources: [pods]}
daemonset:
  worker:
    - {group: "", resources: [pods], verbs: [create, delete, patch]}
    - {group: apps, resources: [controllerrevisions], verbs: [create, delete, get, patch]}
    - {group: apps, resources: [daemonsets], verbs: [get]}
    - {group: apps, resources: [daemonsets/status], verbs: [patch]}
    - {group: apps, resources: [daemonsets/finalizers], verbs: [update]}
    - {group: "", resources: [events], verbs: [create, patch]}
  coordinator:
    - {group: apps, resources: [daemonsets, controllerrevisions]}
    - {group: "", resources: [pods, nodes]}
endpointslice:
  worker:
    - {group: discovery.k8s.io, resources: [endpointslices], verbs: [create, delete, update]}
    - {group: "", resources: [services/finalizers], verbs: [update]}
    - {group: "", resources: [events], verbs: [create, patch]}
  coordinator:
    - {group: "", resources: [services, pods, nodes]}
    - {group: discovery.k8s.io, resources: [endpointslices]}
endpoint:
  worker:
    - {group: "", resources: [endpoints], verbs: [create, delete, update]}
    - {group: "", resources: [events], verbs: [create, patch]}
  coordinator:
    - {group: "", resources: [services, pods, endpoints]}
endpointslicemirroring:
  worker:
    - {group: discovery.k8s.io, resources: [endpointslices], verbs: [create, delete, update]}
    - {group: "", resources: [endpoints/finalizers], verbs: [update]}
    - {group: "", resources: [events], verbs: [create, patch]}
  coordinator:
    - {group: "", resources: [endpoints, services]}
    - {group: discovery.k8s.io, resources: [endpointslices]}
nodelifecycle:
  worker:
    - {group: "", resources: [nodes, nodes/status, pods/status], verbs: [patch]}
    - {group: coordination.k8s.io, resources: [leases], verbs: [get]}
    - {group: "", resources: [events], verbs: [create, patch]}
  coordinator:
    - {group: "", resources: [nodes, pods]}
    - {group: coordination.k8s.io, resources: [leases]}
taint-eviction:
  worker:
    - {group: "", resources: [pods/status], verbs: [patch]}
    - {group: "", resources: [pods], verbs: [delete]}
    - {group: "", resources: [events], verbs: [create, patch]}
  coordinator:
    - {group: "", resources: [nodes, pods]}
nodeipam:
  worker:
    - {group: "", resources: [nodes], verbs: [list, patch]}
    - {group: "", resources: [events], verbs: [create, patch]}
  coordinator:
    - {group: "", resources: [namespaces, nodes]}
ttl:
  worker:
    - {group: "", resources: [nodes], verbs: [patch]}
  coordinator:
    - {group: "", resources: [nodes]}
service-cidr:
  worker:
    - {group: networking.k8s.io, resources: [servicecidrs, servicecidrs/status], verbs: [patch]}
    - {group: "", resources: [events], verbs: [create, patch]}
  coordinator:
    - {group: networking.k8s.io, resources: [servicecidrs, ipaddresses]}
{{- end }}

{{/*
The built-ins a `--controllers` value selects, as the worker selects them (worker/src/runtime/selection.rs):
`*` enables all, `name` one, `-name` disables one; an unknown name or an empty entry fails the render.
Takes the value; gives YAML `selected: [...]`.
*/}}
{{- define "flotilla.selectControllers" -}}
{{- $known := keys (include "flotilla.builtinRules" . | fromYaml) | sortAlpha }}
{{- $star := false }}
{{- $enabled := list }}
{{- $disabled := list }}
{{- range $entry := splitList "," . }}
{{- $entry = trim $entry }}
{{- $negated := hasPrefix "-" $entry }}
{{- $name := trimPrefix "-" $entry }}
{{- if not $name }}
{{- fail (printf "empty entry in controllers %q" $) }}
{{- end }}
{{- if and (eq $name "*") (not $negated) }}
{{- $star = true }}
{{- else if not (has $name $known) }}
{{- fail (printf "unknown controller %q in controllers (known: %s)" $name (join "," $known)) }}
{{- else if $negated }}
{{- $disabled = append $disabled $name }}
{{- else }}
{{- $enabled = append $enabled $name }}
{{- end }}
{{- end }}
{{- $selected := list }}
{{- range $name := $known }}
{{- if and (not (has $name $disabled)) (or $star (has $name $enabled)) }}
{{- $selected = append $selected $name }}
{{- end }}
{{- end }}
{{- if not $selected }}
{{- fail (printf "controllers %q selects no controller" $) }}
{{- end }}
{{- toYaml (dict "selected" $selected) }}
{{- end }}

{{/*
The canonical rules of a set of grants (controllers/src/rbac/rules.rs, `Rules::policy_rules`): one rule
per (group, resource), ordered by group then resource, verbs sorted, `*` among verbs standing for all of
them, and a verb that another grant's wildcards already cover left out. Takes a dict from
"<group> <resource>" to verbs (a space sorts before any character of a group name, so sorting the keys
orders by group, then resource); gives YAML `rules: [...]`.
*/}}
{{- define "flotilla.canonicalRules" -}}
{{- $grants := . }}
{{- $rules := list }}
{{- range $key := keys $grants | sortAlpha }}
{{- $parts := splitn " " 2 $key }}
{{- $group := $parts._0 }}
{{- $resource := $parts._1 }}
{{- $verbs := get $grants $key | uniq | sortAlpha }}
{{- if has "*" $verbs }}
{{- $verbs = list "*" }}
{{- end }}
{{- $kept := list }}
{{- range $verb := $verbs }}
{{- $covered := false }}
{{- range $other, $otherVerbs := $grants }}
{{- $o := splitn " " 2 $other }}
{{- if and (ne $other $key) (or (eq $o._0 "*") (eq $o._0 $group)) (or (eq $o._1 "*") (eq $o._1 $resource)) (or (has $verb $otherVerbs) (has "*" $otherVerbs)) }}
{{- $covered = true }}
{{- end }}
{{- end }}
{{- if not $covered }}
{{- $kept = append $kept $verb }}
{{- end }}
{{- end }}
{{- if $kept }}
{{- $rules = append $rules (dict "apiGroups" (list $group) "resources" (list $resource) "verbs" $kept) }}
{{- end }}
{{- end }}
{{- toYaml (dict "rules" $rules) }}
{{- end }}

{{/*
The rules of one role of a fleet of built-in controllers. Takes (dict "controllers" "<value>" "role"
"worker"|"coordinator"); gives YAML `rules: [...]`, exactly what
`flotilla rbac --controllers <value> --role <role>` prints.
*/}}
{{- define "flotilla.builtinRoleRules" -}}
{{- $builtins := include "flotilla.builtinRules" . | fromYaml }}
{{- $selected := (include "flotilla.selectControllers" .controllers | fromYaml).selected }}
{{- $grants := dict }}
{{- if eq .role "coordinator" }}
{{- /* --namespaces and --namespace-selector watch Namespaces whatever the controllers. */}}
{{- $_ := set $grants " namespaces" (list "list" "watch") }}
{{- end }}
{{- range $name := $selected }}
{{- range $grant := get (get $builtins $name) $.role }}
{{- range $resource := $grant.resources }}
{{- $key := printf "%s %s" $grant.group $resource }}
{{- $verbs := ternary (list "list" "watch") $grant.verbs (eq $.role "coordinator") }}
{{- $_ := set $grants $key (concat (default (list) (get $grants $key)) $verbs) }}
{{- end }}
{{- end }}
{{- end }}
{{- include "flotilla.canonicalRules" $grants }}
{{- end }}
