//! The kube-apiserver-like HTTP server of `flotilla devcluster`: the Kubernetes REST API stored in real etcd
//! the way kube-apiserver v1.36 stores it.
//!
//! # Shape
//! * [`registry`] — every served kind is data ([`registry::ResourceInfo`]: group/version/resource/kind,
//!   scope, subresources, short names, defaulting/validation hooks, field-selector fields, generation and
//!   deletion policy). Built-ins live in `builtins`; CRDs add entries at run time (`crd`).
//! * `storage` — the one generic path to etcd: JSON values under `/registry/...` (upstream's keys, e.g.
//!   `/registry/minions/<node>`, `/registry/services/specs/<ns>/<name>`, CRs under
//!   `/registry/<group>/<plural>/...`), resourceVersion = etcd mod_revision, compare-and-swap transactions.
//! * `watch_cache` — ONE etcd watch on `/registry/` into a ring buffer fanned out to every HTTP watcher.
//! * `objects` — the generic verbs (create, get, list, update, patch, delete, deletecollection, scale,
//!   binding) with preconditions, finalizers, generation, managedFields.
//! * `eviction` — `pods/eviction`: a pod delete checked against the PodDisruptionBudget covering
//!   the pod, as kube-apiserver's `EvictionREST` (the budgets' status comes from a controller:
//!   Flotilla's `disruption`).
//! * `tls` — HTTPS: the serving certificate and the CA the kubeconfig carries ([`Serving`]).
//! * `http` / `watch` / `discovery` / `render` — the thin HTTP layer; `protobuf` turns protobuf request
//!   bodies into JSON at its edge.
//!
//! # Differences from upstream (on purpose)
//! * HTTPS only with `--authorization-mode RBAC` or when asked ([`Serving`], `tls`): plain HTTP
//!   otherwise, where every request is the administrator's anyway. The certificate is generated at
//!   start under a CA generated with it (upstream's `--cert-dir` self-signed certificate has no CA)
//!   unless `--tls-cert-file`/`--tls-private-key-file` are given; the kubeconfig carries the CA. No
//!   client-certificate authentication, HTTP/1.1 only (no `h2` in ALPN).
//! * Authentication (token file, TokenRequest tokens) and RBAC authorization are opt-in
//!   (`auth`, which lists its own differences); without them RBAC objects are only stored. Responses are JSON only:
//!   clients that also accept JSON (kubectl sends `application/vnd.kubernetes.protobuf,application/json`)
//!   get JSON, clients that accept only protobuf get 406. Request bodies may be JSON or, for every
//!   built-in kind, protobuf (`protobuf`: decoded into the JSON the same object would have had, then
//!   taken down the one JSON path); YAML request bodies are accepted only for apply patches (a small
//!   YAML subset, see `yaml`).
//! * Discovery: both the legacy documents and aggregated discovery (apidiscovery.k8s.io/v2, served when the
//!   first Accept alternative asks for `as=APIGroupDiscoveryList`, which is what kubectl does) are served.
//!   Only the kinds devcluster implements are listed. No OpenAPI documents (`/openapi/*` is 404, kubectl
//!   falls back to its built-in schemas).
//! * `pods/eviction` takes JSON Eviction bodies only (kubectl sends JSON); conflicts are retried at
//!   once rather than on upstream's 500 ms backoff.
//! * Watch bookmarks come every `bookmark_interval` (default 1 s; upstream about once a minute).
//! * The watch cache keeps the last 10 000 events and forgets everything at or below a compaction, so a
//!   watch or continue token from before a compaction gets 410 Expired at once (upstream may still serve
//!   it from its cache until its window passes). Lists are always read from etcd, so `resourceVersion=0`
//!   is as fresh as a quorum read (limit is still ignored for it, as upstream).
//! * Apply patches (`application/apply-patch+yaml`) are a simplified merge: the body is strategic-merged
//!   (merge-patched for custom resources) into the live object or creates it; `fieldManager` is required
//!   (422) and recorded in managedFields with operation Apply, but field ownership conflicts are not
//!   computed (no 409 for conflicting managers) and fields are not removed when a manager stops applying them.
//! * managedFields are simplified: one entry per manager/operation listing the fields that request set.
//! * Unknown fields in built-in objects are stored as sent (no Warning header, `fieldValidation` ignored);
//!   custom resources are pruned to their schema. CRD schema validation covers types, required, enums.
//! * core/v1 Events and events.k8s.io/v1 Events are stored separately (no conversion between the two).
//! * Tables (`as=Table`, what `kubectl get` asks for) have kind-specific columns for a few kinds only;
//!   others, Events among them, show Name and Age.
//! * Bound pods are deleted gracefully (deletionTimestamp = now + grace period) and then stay until someone
//!   deletes them with grace 0 (the node simulator does; nothing removes them on a timer), as upstream
//!   without a kubelet.
//! * Namespace deletion marks the namespace Terminating; nothing deletes its content (that is the
//!   namespace controller's job, which Flotilla runs) — `PUT .../finalize` releases it like upstream.
//! * CRD deletion removes the CRD's objects inline and the CRD right after (upstream does it from a
//!   controller, asynchronously); the DELETE answers with the CRD marked Terminating like upstream.
//! * Service clusterIPs come from 10.0.0.0/24 (10.0.0.1 kept free), nodePorts from 30000-32767; each
//!   allocation is an etcd key under `/registry/ranges/`.
//! * OpenAPI: `/openapi/v3` lists minimal per-group/version documents (paths, GVK extensions and the
//!   `fieldValidation` parameter, no schemas) so kubectl uses server-side field validation; `/openapi/v2`
//!   is 404.
//! * At start the system namespaces (default, kube-system, kube-public, kube-node-lease) are created if
//!   missing; the `kubernetes` Service is not.
//! * `networking.k8s.io/v1` ServiceCIDRs and IPAddresses are served (JSON only: k8s-pb has no
//!   protobuf form of them) and the `kubernetes` ServiceCIDR over the service range is created at
//!   start, Ready; but Service clusterIPs are still allocated from `/registry/ranges/` and get no
//!   IPAddress objects, and a ServiceCIDR widens nothing.
//! * Protobuf bodies are decoded with kube-rs's k8s-pb types; which Go fields are pointers (so that a
//!   zero on the wire means zero, not "unset") is a hand-kept list in `protobuf/messages.rs`. Custom
//!   resources have no protobuf form (415, like upstream).
//! * ResourceQuota enforces pod counts only (`spec.hard.pods` / `count/pods`), counting the namespace's
//!   pods live at admission rather than charging `status.used`, so a new quota admits pods at once
//!   (upstream waits for the quota controller's first status). `status.hard` and `status.used` (pod counts
//!   only) are kept by a task inside devcluster; other limits are stored but not enforced, scopes are
//!   ignored (see `quota`).
//! * `POST /flotilla/v1/compact` is devcluster-only: it compacts etcd at the current revision and answers
//!   `{"revision": N}`; other routes under `/flotilla/` come from [`DevClusterConfig::extension`].

#![cfg_attr(test, allow(clippy::unwrap_used))]

mod auth;
mod bootstrap;
mod builtins;
mod continue_token;
mod crd;
mod cron_schedule;
mod defaults;
mod defaults_scaling_network;
mod discovery;
mod eviction;
#[cfg(test)]
mod fuzz_tests;
mod http;
mod managed_fields;
mod meta;
mod objects;
mod openapi;
mod patch;
mod protobuf;
mod query;
mod quota;
mod registry;
mod render;
mod selector;
mod server;
mod services;
mod state;
mod status;
mod storage;
mod tls;
mod typed;
mod validation;
mod validation_batch;
mod validation_discovery;
mod validation_networking;
mod watch;
mod watch_cache;
mod yaml;

pub use auth::{Attributes, AuthConfig, AuthorizationMode, Decision, RuleRef, UserInfo};
pub use server::{DevCluster, DevClusterConfig, DevClusterError};
pub use tls::{Serving, TlsError};
