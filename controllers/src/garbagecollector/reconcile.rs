//! One pass of the collector over one object: finish the deletion of an owner that orphans or waits for
//! its dependents, or decide the fate of a dependent from the live state of its owners.

use flotilla_sdk::apimachinery::{FOREGROUND_FINALIZER, KindedKey, ORPHAN_FINALIZER, ResourceKind};
use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use flotilla_sdk::kube::api::{
    Api, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions,
};
use flotilla_sdk::kube::core::ApiResource;
use serde_json::json;

use super::dependents::{blocking, without_finalizer, without_owner};
use super::owners::{Decision, OwnerState, Policy, decide, own_dependents, owner_state, unblocked};
use super::resolver::{ResolveError, Resolver};
use flotilla_sdk::kube;
use flotilla_sdk::{Action, Context, ContextError, Request};

/// Errors of one pass; the key is retried.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The prefetched dependents are unreadable.
    #[error("cannot read the dependents")]
    Dependents(#[source] ContextError),
    /// An owner's kind could not be resolved.
    #[error("cannot resolve an owner's kind")]
    Resolve(#[source] ResolveError),
    /// Reading, patching or deleting through the API failed.
    #[error("cannot {action} {object}")]
    Api {
        /// What was attempted.
        action: &'static str,
        /// The object, as `<resource> <namespace>/<name>`.
        object: String,
        /// Why.
        source: kube::Error,
    },
}

/// Runs the collector on the object the kinded key of `request` names.
///
/// # Errors
/// [`Error`] when the API or discovery fails; nothing is decided on partial information.
pub async fn reconcile(
    request: Request<DynamicObject>,
    ctx: Context,
    resolver: Resolver,
) -> Result<Action, Error> {
    let (Some(object), Some(key)) = (request.object(), KindedKey::parse(request.key())) else {
        // Gone: its dependents were enqueued by its deletion.
        return Ok(Action::await_change());
    };
    let kind = object
        .types
        .as_ref()
        .map(|t| t.kind.clone())
        .unwrap_or_default();
    let resource = ResourceKind::new(
        key.group,
        key.version,
        &kind,
        key.plural,
        key.namespace.is_some(),
    )
    .api_resource();
    let target = Target {
        client: ctx.client(),
        resource,
        namespace: key.namespace.map(str::to_owned),
        name: key.name.to_owned(),
    };
    let uid = object.metadata.uid.clone().unwrap_or_default();
    let finalizers = object.metadata.finalizers.clone().unwrap_or_default();
    let dependents: Vec<(ResourceKind, DynamicObject)> =
        ctx.prefetched_objects().map_err(Error::Dependents)?;

    if object.metadata.deletion_timestamp.is_some() {
        if finalizers.iter().any(|f| f == ORPHAN_FINALIZER) {
            for (kind, dependent) in &dependents {
                if let Some(refs) = without_owner(dependent, &uid) {
                    Target::of(&ctx, kind, dependent)
                        .patch_owner_references(&refs, dependent)
                        .await?;
                }
            }
            target
                .remove_finalizer(object, &finalizers, ORPHAN_FINALIZER)
                .await?;
        } else if finalizers.iter().any(|f| f == FOREGROUND_FINALIZER) {
            let objects: Vec<DynamicObject> = dependents.into_iter().map(|(_, d)| d).collect();
            // Blocking dependents are deleted through their own keys (their owner waits); the owner
            // is enqueued again as each goes.
            if blocking(&objects, &uid).next().is_none() {
                target
                    .remove_finalizer(object, &finalizers, FOREGROUND_FINALIZER)
                    .await?;
            }
        }
        return Ok(Action::await_change());
    }

    let references = object.metadata.owner_references.clone().unwrap_or_default();
    let mut owners = Vec::with_capacity(references.len());
    for reference in references {
        let state = live_owner_state(&ctx, &resolver, &target, &reference).await?;
        owners.push((reference, state));
    }
    let objects: Vec<DynamicObject> = dependents.into_iter().map(|(_, d)| d).collect();
    match decide(&owners, &finalizers, own_dependents(&objects, &owners)) {
        Decision::Keep => {}
        Decision::DropReferences(gone) => {
            let kept: Vec<OwnerReference> = owners
                .into_iter()
                .map(|(r, _)| r)
                .filter(|r| !gone.contains(&r.uid))
                .collect();
            tracing::info!(object = %target, dropped = gone.len(), "removing references to owners that are gone");
            target.patch_owner_references(&kept, object).await?;
        }
        Decision::Delete(policy) => {
            tracing::info!(object = %target, ?policy, "deleting an object whose owners are gone");
            target.delete(object, policy).await?;
        }
        Decision::UnblockThenDelete => {
            let references: Vec<OwnerReference> = owners.into_iter().map(|(r, _)| r).collect();
            tracing::info!(object = %target, "an owner and a dependent both wait for their dependents; unblocking the owners to break a possible ownerReference cycle");
            let patched;
            let current = match unblocked(&references) {
                Some(refs) => match target.patch_owner_references(&refs, object).await? {
                    Some(object) => {
                        patched = object;
                        &patched
                    }
                    None => return Ok(Action::await_change()),
                },
                // Unblocked by an earlier pass whose delete failed.
                None => object,
            };
            // Deleted in the same pass, so the start of its deletion tells the coordinator to
            // enqueue its dependents, the waiting owner among them in a cycle: the coordinator
            // does not enqueue an owner when a reference to it merely stops blocking.
            target.delete(current, Policy::Foreground).await?;
        }
    }
    Ok(Action::await_change())
}

/// The state of one owner of the dependent at `target`, from a live read.
async fn live_owner_state(
    ctx: &Context,
    resolver: &Resolver,
    target: &Target,
    reference: &OwnerReference,
) -> Result<OwnerState, Error> {
    let client = ctx.client();
    let Some(resolved) = resolver
        .resolve(&client, &reference.api_version, &reference.kind)
        .await
        .map_err(Error::Resolve)?
    else {
        return Ok(OwnerState::Dangling);
    };
    let api: Api<DynamicObject> = match (&target.namespace, resolved.namespaced) {
        (Some(ns), true) => Api::namespaced_with(client, ns, &resolved.resource),
        (None, false) | (Some(_), false) => Api::all_with(client, &resolved.resource),
        // A cluster-scoped dependent cannot have a namespaced owner: the reference resolves to nothing.
        (None, true) => return Ok(OwnerState::Dangling),
    };
    let live = api
        .get_opt(&reference.name)
        .await
        .map_err(|source| Error::Api {
            action: "read owner",
            object: format!("{} {}", resolved.resource.plural, reference.name),
            source,
        })?;
    Ok(owner_state(
        reference,
        live.as_ref().map(|o| {
            (
                o.metadata.uid.as_deref().unwrap_or_default(),
                o.metadata.deletion_timestamp.is_some(),
                o.metadata.finalizers.as_deref().unwrap_or_default(),
            )
        }),
    ))
}

/// One object to write.
struct Target {
    client: kube::Client,
    resource: ApiResource,
    namespace: Option<String>,
    name: String,
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.resource.plural, self.name),
            None => write!(f, "{} {}", self.resource.plural, self.name),
        }
    }
}

impl Target {
    fn of(ctx: &Context, kind: &ResourceKind, object: &DynamicObject) -> Self {
        Self {
            client: ctx.client(),
            resource: kind.api_resource(),
            namespace: object
                .metadata
                .namespace
                .clone()
                .filter(|_| kind.namespaced),
            name: object.metadata.name.clone().unwrap_or_default(),
        }
    }

    fn api(&self) -> Api<DynamicObject> {
        match &self.namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &self.resource),
            None => Api::all_with(self.client.clone(), &self.resource),
        }
    }

    fn error(&self, action: &'static str, source: kube::Error) -> Error {
        Error::Api {
            action,
            object: self.to_string(),
            source,
        }
    }

    /// Sets the object's ownerReferences, if it still is the version the decision was made on (a
    /// merge patch carrying `resourceVersion` fails with 409 otherwise, and the key is retried), and
    /// returns the object as patched. A vanished object needs nothing more: `None`.
    async fn patch_owner_references(
        &self,
        refs: &[OwnerReference],
        seen: &DynamicObject,
    ) -> Result<Option<DynamicObject>, Error> {
        let patch = json!({"metadata": {
            "ownerReferences": refs,
            "resourceVersion": seen.metadata.resource_version,
        }});
        self.merge_patch("update the owner references of", &patch)
            .await
    }

    /// Removes `finalizer` from the object seen with `finalizers`.
    async fn remove_finalizer(
        &self,
        seen: &DynamicObject,
        finalizers: &[String],
        finalizer: &str,
    ) -> Result<(), Error> {
        tracing::info!(object = %self, finalizer, "dependents handled; removing the finalizer");
        let patch = json!({"metadata": {
            "finalizers": without_finalizer(finalizers, finalizer),
            "resourceVersion": seen.metadata.resource_version,
        }});
        self.merge_patch("remove a finalizer of", &patch)
            .await
            .map(drop)
    }

    /// The object as patched; `None` when it is gone.
    async fn merge_patch(
        &self,
        action: &'static str,
        patch: &serde_json::Value,
    ) -> Result<Option<DynamicObject>, Error> {
        match self
            .api()
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(object) => Ok(Some(object)),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
            Err(source) => Err(self.error(action, source)),
        }
    }

    /// Deletes the object if it still is the version the decision was made on. The decision rests on
    /// `seen`'s ownerReferences, which may be stale: an orphaning owner may have just dropped its
    /// reference (and then gone, which is what made the owner look absent). The resourceVersion
    /// precondition makes such a delete fail with 409, and the key is retried on the newer object, as
    /// upstream decides on a fresh read. One already gone needs nothing more.
    async fn delete(&self, seen: &DynamicObject, policy: Policy) -> Result<(), Error> {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: seen.metadata.uid.clone(),
                resource_version: seen.metadata.resource_version.clone(),
            }),
            propagation_policy: Some(match policy {
                Policy::Background => kube::api::PropagationPolicy::Background,
                Policy::Foreground => kube::api::PropagationPolicy::Foreground,
                Policy::Orphan => kube::api::PropagationPolicy::Orphan,
            }),
            ..DeleteParams::default()
        };
        match self.api().delete(&self.name, &params).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(source) => Err(self.error("delete", source)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use flotilla_sdk::kube::client::Body;
    use http::{Method, Request as HttpRequest, Response, StatusCode};
    use parking_lot::Mutex;
    use serde_json::{Value, json};

    use super::*;

    /// A mock API: discovery of apps/v1, no Deployment `web` (it is gone), and a DELETE of the
    /// ReplicaSet that fails its preconditions as kube-apiserver does when the object changed.
    fn api(deletes: Arc<Mutex<Vec<Value>>>) -> kube::Client {
        let service = tower::service_fn(move |request: HttpRequest<Body>| {
            let deletes = deletes.clone();
            async move {
                let (parts, body) = request.into_parts();
                let bytes = body.collect_bytes().await?;
                let (status, answer) = match (parts.method.clone(), parts.uri.path()) {
                    (Method::GET, "/apis/apps/v1") => (
                        StatusCode::OK,
                        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "apps/v1",
                            "resources": [{"name": "deployments", "singularName": "deployment",
                            "namespaced": true, "kind": "Deployment",
                            "verbs": ["get", "list", "watch", "delete"]}]}),
                    ),
                    (Method::DELETE, _) => {
                        deletes
                            .lock()
                            .push(serde_json::from_slice(&bytes).unwrap_or(Value::Null));
                        (
                            StatusCode::CONFLICT,
                            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                "message": "Precondition failed", "reason": "Conflict", "code": 409}),
                        )
                    }
                    _ => (
                        StatusCode::NOT_FOUND,
                        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                            "message": "not found", "reason": "NotFound", "code": 404}),
                    ),
                };
                let mut response = Response::new(Body::from(serde_json::to_vec(&answer)?));
                *response.status_mut() = status;
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(response)
            }
        });
        kube::Client::new(service, "default")
    }

    /// Regression: an orphaning owner drops its reference from a ReplicaSet and then goes; the collector,
    /// holding the ReplicaSet as it was before (with the reference), found the owner gone and deleted the
    /// ReplicaSet the orphaning had just kept (`each_propagation_policy_leaves_what_it_promises` failed
    /// with the orphaned ReplicaSet gone). The delete must be conditional on the version the decision
    /// was made on, and a refused delete is retried, not taken as done.
    #[tokio::test]
    async fn a_dependent_is_deleted_only_in_the_version_whose_owners_were_judged_gone() {
        let deletes = Arc::new(Mutex::new(Vec::new()));
        let ctx = Context::for_test().client(api(deletes.clone())).build();
        let rs: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "web-1", "namespace": "ns", "uid": "rs-uid", "resourceVersion": "41",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                    "uid": "d-uid", "controller": true, "blockOwnerDeletion": true}]}
        }))
        .unwrap();
        let request = Request::new(None, "apps/v1/replicasets/ns/web-1").with_object(rs);

        let outcome = reconcile(request, ctx, Resolver::default()).await;

        let deletes = deletes.lock().clone();
        assert_eq!(
            deletes.len(),
            1,
            "the dependent of a gone owner is deleted once"
        );
        assert_eq!(
            deletes[0]["preconditions"],
            json!({"uid": "rs-uid", "resourceVersion": "41"}),
            "the delete is conditional on the uid and the version seen"
        );
        assert!(
            outcome.is_err(),
            "a delete refused because the object changed is retried"
        );
    }

    /// A mock API for the dependent `b` of a ConfigMap `a` that waits for its dependents, `b` among
    /// them, while `a` is itself a dependent of `b`: discovery of v1, `a` deleting in the foreground,
    /// and a PATCH of `b` answered with `b` at resourceVersion 42. Records each write as (method, body).
    fn cycle_api(writes: Arc<Mutex<Vec<(Method, Value)>>>) -> kube::Client {
        let service = tower::service_fn(move |request: HttpRequest<Body>| {
            let writes = writes.clone();
            async move {
                let (parts, body) = request.into_parts();
                let bytes = body.collect_bytes().await?;
                let sent = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                let b = json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "b", "namespace": "ns", "uid": "b-uid", "resourceVersion": "42",
                        "ownerReferences": sent["metadata"]["ownerReferences"]}});
                let (status, answer) = match (parts.method.clone(), parts.uri.path()) {
                    (Method::GET, "/api/v1") => (
                        StatusCode::OK,
                        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1",
                            "resources": [{"name": "configmaps", "singularName": "configmap",
                            "namespaced": true, "kind": "ConfigMap",
                            "verbs": ["get", "list", "watch", "patch", "delete"]}]}),
                    ),
                    (Method::GET, "/api/v1/namespaces/ns/configmaps/a") => (
                        StatusCode::OK,
                        json!({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": "a", "namespace": "ns", "uid": "a-uid",
                                "resourceVersion": "40", "deletionTimestamp": "2026-01-01T00:00:00Z",
                                "finalizers": [FOREGROUND_FINALIZER]}}),
                    ),
                    (Method::PATCH | Method::DELETE, "/api/v1/namespaces/ns/configmaps/b") => {
                        writes.lock().push((parts.method.clone(), sent));
                        (StatusCode::OK, b)
                    }
                    _ => (
                        StatusCode::NOT_FOUND,
                        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                            "message": "not found", "reason": "NotFound", "code": 404}),
                    ),
                };
                let mut response = Response::new(Body::from(serde_json::to_vec(&answer)?));
                *response.status_mut() = status;
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(response)
            }
        });
        kube::Client::new(service, "default")
    }

    /// Regression: ConfigMaps `a` and `b` own each other with blockOwnerDeletion and `a` is deleted in
    /// the foreground; the collector deleted `b` in the foreground with its reference still blocking,
    /// so each waited for the other forever (`an_ownership_cycle_deleted_in_the_foreground_is_collected_whole`
    /// timed out). `b` must stop blocking `a` first, and then go in the foreground, conditional on the
    /// version its own patch made.
    #[tokio::test]
    async fn a_dependent_in_a_foreground_cycle_stops_blocking_its_owner_before_it_goes() {
        let writes = Arc::new(Mutex::new(Vec::new()));
        let configmaps = ResourceKind::new("", "v1", "ConfigMap", "configmaps", true);
        let a = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "ns", "uid": "a-uid", "resourceVersion": "40",
                "deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": [FOREGROUND_FINALIZER],
                "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "b",
                    "uid": "b-uid", "blockOwnerDeletion": true}]}});
        let ctx = Context::for_test()
            .client(cycle_api(writes.clone()))
            .prefetched_as(configmaps, &a)
            .build();
        let b: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "b", "namespace": "ns", "uid": "b-uid", "resourceVersion": "41",
                "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "a",
                    "uid": "a-uid", "blockOwnerDeletion": true}]}
        }))
        .unwrap();
        let request = Request::new(None, "/v1/configmaps/ns/b").with_object(b);

        reconcile(request, ctx, Resolver::default()).await.unwrap();

        let writes = writes.lock().clone();
        let methods: Vec<&Method> = writes.iter().map(|(m, _)| m).collect();
        assert_eq!(
            methods,
            [Method::PATCH, Method::DELETE],
            "unblock, then delete"
        );
        let patch = &writes[0].1["metadata"];
        assert_eq!(patch["resourceVersion"], "41", "the patch is conditional");
        assert_eq!(
            patch["ownerReferences"][0]["blockOwnerDeletion"], false,
            "the reference to the waiting owner stops blocking it"
        );
        assert_eq!(patch["ownerReferences"][0]["uid"], "a-uid");
        assert_eq!(writes[1].1["propagationPolicy"], "Foreground");
        assert_eq!(
            writes[1].1["preconditions"],
            json!({"uid": "b-uid", "resourceVersion": "42"}),
            "the delete is conditional on the version the patch made"
        );
    }
}
