//! POST on a collection (and the create half of an apply patch): the body is placed in the URL's
//! namespace, named (retrying `generateName` collisions), given its system fields and defaults,
//! admitted (RBAC escalation, validation, namespace lifecycle, pod quota, Service IPs) and stored
//! with a create-only compare-and-swap, so an existing object is never overwritten (409).

use serde_json::{Value, json};

use super::{Target, internal, reorder_metadata, stamp_type, validate};
use crate::apiserver::quota::Admitted;
use crate::apiserver::registry::{Generation, ResourceInfo};
use crate::apiserver::state::ApiState;
use crate::apiserver::status::{ApiError, Cause, Gr};
use crate::apiserver::{auth, crd, defaults, managed_fields, meta, quota, services};

/// How many names a `generateName` create tries before giving up (upstream retries on collision too).
const GENERATE_NAME_ATTEMPTS: usize = 8;

/// Metadata a client may not set on create: the server assigns it.
const SYSTEM_FIELDS: &[&str] = &[
    "uid",
    "resourceVersion",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "generation",
    "selfLink",
];

/// POST on a collection.
///
/// # Errors
/// Upstream's create failures (400/403/404/409/422), 500 on etcd trouble.
pub async fn create(st: &ApiState, t: &Target, body: &[u8]) -> Result<Value, ApiError> {
    create_as(st, t, body, false).await
}

/// POST, or an apply patch that creates (`apply`: managedFields records operation Apply with exactly the
/// applied fields).
///
/// # Errors
/// See [`create`].
pub(super) async fn create_as(
    st: &ApiState,
    t: &Target,
    body: &[u8],
    apply: bool,
) -> Result<Value, ApiError> {
    let mut obj = super::decode_body(t, body)?;
    place_in_namespace(t, &mut obj)?;
    stamp_type(&t.info, &mut obj);
    let generate = obj["metadata"]["generateName"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let generated = meta::name(&obj).is_empty() && !generate.is_empty();
    for attempt in 0..GENERATE_NAME_ATTEMPTS {
        let mut o = obj.clone();
        if generated {
            meta::set(&mut o, "name", json!(meta::generated_name(&generate)));
        }
        match create_one(st, t, o, apply).await {
            Err(e) if e.code == 409 && generated && attempt + 1 < GENERATE_NAME_ATTEMPTS => {}
            other => return other,
        }
    }
    Err(ApiError::internal("could not generate a unique name"))
}

/// Sets the URL's namespace on a namespaced object (a different one in the body is a 400) and
/// removes any namespace from a cluster-scoped one.
fn place_in_namespace(t: &Target, obj: &mut Value) -> Result<(), ApiError> {
    if !t.info.namespaced {
        meta::remove(obj, "namespace");
        return Ok(());
    }
    let url_ns = t.namespace.clone().unwrap_or_default();
    let body_ns = meta::namespace(obj);
    if !body_ns.is_empty() && body_ns != url_ns {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    meta::set(obj, "namespace", json!(url_ns));
    Ok(())
}

/// Creates `obj` under its (final) name: prepare, admit, record the manager, store.
async fn create_one(
    st: &ApiState,
    t: &Target,
    mut obj: Value,
    apply: bool,
) -> Result<Value, ApiError> {
    let info = &t.info;
    let name = meta::name(&obj).to_string();
    let set = prepare(info, &mut obj, apply);
    // Held until the pod is stored (or the create fails), so no other pod create of the namespace
    // counts against a quota in between.
    let _admitted = admit(st, t, &name, &obj).await?;
    let claims = if info.allocates_service_ips {
        services::allocate(st, &mut obj).await?
    } else {
        Vec::new()
    };
    managed_fields::record(
        &mut obj,
        &t.manager,
        if apply { "Apply" } else { "Update" },
        &info.api_version(),
        set,
        None,
    );
    reorder_metadata(&mut obj);
    if t.dry_run() {
        services::release(st, &claims).await;
        return Ok(obj);
    }
    let key = info.key(t.namespace.as_deref(), &name);
    match st.storage.create(&key, &obj).await.map_err(internal)? {
        Some(rev) => {
            meta::set(&mut obj, "resourceVersion", json!(rev.to_string()));
            reorder_metadata(&mut obj);
            if info.group == "apiextensions.k8s.io" {
                crd::serve(&st.registry, &obj);
            }
            Ok(obj)
        }
        None => {
            services::release(st, &claims).await;
            Err(ApiError::already_exists(info.gr(), &name))
        }
    }
}

/// Defaults the object, replaces what the server owns (uid, creationTimestamp, generation, ...) and
/// runs the kind's create preparation. Returns the fields the request set, for managedFields (an
/// apply records exactly what it sent; an update what the object has after defaulting).
fn prepare(info: &ResourceInfo, obj: &mut Value, apply: bool) -> Option<Value> {
    let applied = apply
        .then(|| managed_fields::fieldset(obj, !info.subresources.status, false))
        .flatten();
    (info.defaulter)(obj);
    if let Some(schema) = &info.schema {
        crd::prune(schema, obj, "", &mut Vec::new());
    }
    let set = if apply {
        applied
    } else {
        managed_fields::fieldset(obj, !info.subresources.status, false)
    };
    for k in SYSTEM_FIELDS {
        meta::remove(obj, k);
    }
    meta::set(obj, "uid", json!(meta::uid()));
    meta::set(obj, "creationTimestamp", json!(meta::now()));
    if info.generation != Generation::None {
        meta::set(obj, "generation", json!(1));
    }
    (info.prepare_create)(obj);
    if info.custom && info.subresources.status {
        defaults::drop_status(obj);
    }
    set
}

/// Admission: RBAC escalation checks, validation, the namespace's lifecycle and, for pods, quota.
/// The returned guard must be held until the object is stored.
async fn admit(st: &ApiState, t: &Target, name: &str, obj: &Value) -> Result<Admitted, ApiError> {
    let info = &t.info;
    auth::admit_rbac_write(st, t, None, obj).await?;
    validate(info, obj, None)?;
    let namespace = t.namespace.as_deref().unwrap_or("");
    if info.namespaced {
        check_namespace(st, info, namespace, name).await?;
    }
    if info.group.is_empty() && info.resource == "pods" {
        quota::admit_pod(st, namespace, name).await
    } else {
        Ok(None)
    }
}

/// The namespace must exist and not be terminating (404 / 403 NamespaceTerminating).
async fn check_namespace(
    st: &ApiState,
    info: &ResourceInfo,
    ns: &str,
    name: &str,
) -> Result<(), ApiError> {
    let key = format!("/registry/namespaces/{ns}");
    match st.storage.get(&key).await.map_err(internal)? {
        None => Err(ApiError::not_found(
            Gr {
                group: "",
                resource: "namespaces",
            },
            ns,
        )),
        Some(n) if meta::deleting(&n.value) || n.value["status"]["phase"] == "Terminating" => {
            Err(ApiError::forbidden(
                info.gr(),
                name,
                &format!(
                    "unable to create new content in namespace {ns} because it is being terminated"
                ),
                vec![Cause {
                    reason: "NamespaceTerminating",
                    message: format!("namespace {ns} is being terminated"),
                    field: "metadata.namespace".into(),
                }],
            ))
        }
        Some(_) => Ok(()),
    }
}
