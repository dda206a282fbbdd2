//! The shared write pipeline of PUT, PATCH and the subresources that change a stored object
//! ([`guaranteed_update`]), in named steps: read the object, let the caller build the candidate,
//! check the request's preconditions, keep what the written part may not change, enforce finalizer
//! and generation rules, admit and validate, skip no-ops, record the manager, then write with a
//! compare-and-swap on the revision read, retrying from the read when another writer won and the
//! request pinned no resourceVersion. A write that leaves a deleted object with no finalizers
//! removes it instead.

use serde_json::{Value, json};

use super::{
    MAX_ATTEMPTS, Part, Target, after_removal, bump_generation, internal, invalid,
    namespace_spec_finalizers, reorder_metadata, stamp_type, too_many_conflicts, validate,
};
use crate::apiserver::registry::ResourceInfo;
use crate::apiserver::state::ApiState;
use crate::apiserver::status::{ApiError, Cause};
use crate::apiserver::{auth, crd, managed_fields, meta, services};

/// Metadata only the server changes: an update keeps the stored values.
const IMMUTABLE_METADATA: &[&str] = &[
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "namespace",
    "name",
];

/// PUT on an object (main resource, `/status` or `/finalize`).
///
/// # Errors
/// See [`guaranteed_update`].
pub async fn update(st: &ApiState, t: &Target, part: Part, body: &[u8]) -> Result<Value, ApiError> {
    let obj = super::decode_body(t, body)?;
    guaranteed_update(st, t, part, "Update", None, |_| Ok(obj.clone())).await
}

/// The shared update pipeline: `mutate` builds the candidate from the current object; preconditions,
/// subresource field resets, immutable metadata, finalizer rules, generation, validation, no-op detection,
/// managedFields and the compare-and-swap write happen here. Retries (calling `mutate` again on the
/// newer object) when the candidate carries no resourceVersion of its own. `fields` is what
/// managedFields records the request as setting (default: the candidate `mutate` returned).
/// `operation` is managedFields' (`Update` or `Apply`).
///
/// # Errors
/// 404/409/422 like upstream, 500 on etcd trouble; whatever `mutate` returns.
pub async fn guaranteed_update<F>(
    st: &ApiState,
    t: &Target,
    part: Part,
    operation: &str,
    fields: Option<&Value>,
    mut mutate: F,
) -> Result<Value, ApiError>
where
    F: FnMut(&Value) -> Result<Value, ApiError>,
{
    let info = &t.info;
    let name = t.object_name();
    let key = t.key();
    for _ in 0..MAX_ATTEMPTS {
        // Read.
        let Some(cur) = st.storage.get(&key).await.map_err(internal)? else {
            return Err(ApiError::not_found(info.gr(), &name));
        };
        let current = cur.value;
        let requested = mutate(&current)?;
        // Preconditions.
        let requested_rv = check_preconditions(t, &name, &requested, cur.rev)?;
        // Apply: the candidate, limited to what `part` may change.
        let mut new = requested.clone();
        stamp_type(info, &mut new);
        new = limit_to_part(info, part, &current, new);
        keep_server_metadata(&current, &mut new);
        check_no_new_finalizers(info, &name, &current, &new)?;
        // Status writes never bump the generation, whatever metadata they carry along.
        if part != Part::Status {
            if part == Part::Main {
                (info.prepare_update)(&mut new, &current);
            }
            bump_generation(info, &current, &mut new);
        }
        // Validate.
        auth::admit_rbac_write(st, t, Some(&current), &new).await?;
        validate(info, &new, Some(&current))?;
        if info.allocates_service_ips && part == Part::Main {
            services::keep_allocations(&current, &mut new);
        }
        if without_volatile(&new) == without_volatile(&current) {
            return Ok(current);
        }
        record_manager(t, part, operation, fields.unwrap_or(&requested), &mut new);
        meta::set(&mut new, "resourceVersion", json!(cur.rev.to_string()));
        reorder_metadata(&mut new);
        if t.dry_run() {
            return Ok(new);
        }
        // Write with retry.
        match write(st, info, &key, cur.rev, new).await? {
            Written::Done(obj) => return Ok(obj),
            Written::Lost { removing: false } if !requested_rv.is_empty() => {
                return Err(ApiError::stale(info.gr(), &name));
            }
            Written::Lost { .. } => {}
        }
    }
    Err(too_many_conflicts(info, &name))
}

/// The request's own preconditions on the candidate: an object, named and namespaced as the URL
/// (400), with no resourceVersion or the current one (409). Returns the resourceVersion it
/// pinned ("" for none).
fn check_preconditions(
    t: &Target,
    name: &str,
    requested: &Value,
    current_rev: i64,
) -> Result<String, ApiError> {
    if !requested.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request must be an object",
        ));
    }
    let body_name = meta::name(requested);
    if !body_name.is_empty() && body_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    if t.info.namespaced {
        let body_ns = meta::namespace(requested);
        if !body_ns.is_empty() && Some(body_ns) != t.namespace.as_deref() {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
    }
    let requested_rv = requested["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("")
        .to_string();
    if !requested_rv.is_empty() && requested_rv != current_rev.to_string() {
        return Err(ApiError::stale(t.info.gr(), name));
    }
    Ok(requested_rv)
}

/// The candidate as `part` may write it: the main resource keeps the stored status (kinds with a
/// status subresource) and a namespace's spec; `/status` changes only the status (and, for
/// built-ins, annotations); `/finalize` changes only `spec.finalizers`.
fn limit_to_part(info: &ResourceInfo, part: Part, current: &Value, mut new: Value) -> Value {
    match part {
        Part::Main => {
            (info.defaulter)(&mut new);
            if let Some(schema) = &info.schema {
                crd::prune(schema, &mut new, "", &mut Vec::new());
            }
            if info.subresources.status {
                set_or_remove(&mut new, "status", current.get("status").cloned());
            }
            if info.namespace_lifecycle {
                new["spec"] = current["spec"].clone();
            }
            new
        }
        Part::Status => {
            // Upstream's status strategies reset the spec (and, for workloads, the labels) of
            // built-in kinds but keep other metadata edits, so controllers write annotations with
            // their status (the deployment controller's revision) without bumping the generation.
            // A custom resource's status subresource ignores everything but the status.
            let status = new.get("status").cloned();
            let annotations = (!info.custom).then(|| new["metadata"].get("annotations").cloned());
            let mut out = current.clone();
            match annotations {
                Some(Some(a)) => meta::set(&mut out, "annotations", a),
                Some(None) => meta::remove(&mut out, "annotations"),
                None => {}
            }
            set_or_remove(&mut out, "status", status);
            out
        }
        Part::Finalize => {
            let fins = new["spec"]["finalizers"].clone();
            let mut out = current.clone();
            match fins.as_array() {
                Some(list) if !list.is_empty() => out["spec"]["finalizers"] = fins,
                _ => {
                    if let Some(spec) = out["spec"].as_object_mut() {
                        spec.remove("finalizers");
                    }
                }
            }
            out
        }
    }
}

/// Sets the top-level `field` of `obj` to `value`, or removes it for None.
fn set_or_remove(obj: &mut Value, field: &str, value: Option<Value>) {
    match value {
        Some(v) => obj[field] = v,
        None => {
            if let Some(m) = obj.as_object_mut() {
                m.remove(field);
            }
        }
    }
}

/// Copies [`IMMUTABLE_METADATA`] from the stored object, and its managedFields when the candidate
/// has none.
fn keep_server_metadata(current: &Value, new: &mut Value) {
    for k in IMMUTABLE_METADATA {
        match current["metadata"].get(*k) {
            Some(v) => meta::set(new, k, v.clone()),
            None => meta::remove(new, k),
        }
    }
    if new["metadata"].get("managedFields").is_none()
        && let Some(mf) = current["metadata"].get("managedFields")
    {
        meta::set(new, "managedFields", mf.clone());
    }
}

/// An object being deleted may lose finalizers but gain none (422, upstream's wording).
fn check_no_new_finalizers(
    info: &ResourceInfo,
    name: &str,
    current: &Value,
    new: &Value,
) -> Result<(), ApiError> {
    if !meta::deleting(current) {
        return Ok(());
    }
    let old = meta::finalizers(current);
    let added: Vec<String> = meta::finalizers(new)
        .into_iter()
        .filter(|f| !old.contains(f))
        .collect();
    if added.is_empty() {
        return Ok(());
    }
    let cause = Cause::forbidden(
        "metadata.finalizers",
        &format!(
            "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
            added
                .iter()
                .map(|f| format!("\"{f}\""))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    );
    Err(invalid(info, name, vec![cause]))
}

/// The object without what every write changes anyway: equal means the write is a no-op.
fn without_volatile(v: &Value) -> Value {
    let mut v = v.clone();
    meta::remove(&mut v, "managedFields");
    meta::remove(&mut v, "resourceVersion");
    v
}

/// Records in managedFields that `t.manager` set `fields` through `part` with `operation`.
fn record_manager(t: &Target, part: Part, operation: &str, fields: &Value, new: &mut Value) {
    let info = &t.info;
    let subresource = match part {
        Part::Main => None,
        Part::Status => Some("status"),
        Part::Finalize => Some("finalize"),
    };
    let set = managed_fields::fieldset(fields, !info.subresources.status, part == Part::Status);
    managed_fields::record(
        new,
        &t.manager,
        operation,
        &info.api_version(),
        set,
        subresource,
    );
}

/// What the compare-and-swap write did.
enum Written {
    /// Stored (or removed): the object to answer with.
    Done(Value),
    /// Another writer changed the object since it was read; nothing was written. `removing`: the
    /// write was the removal of a finished deletion.
    Lost { removing: bool },
}

/// Writes `new` over the object read at `read_rev`, or removes it when the write finishes its
/// deletion (deleting, no finalizers left).
async fn write(
    st: &ApiState,
    info: &ResourceInfo,
    key: &str,
    read_rev: i64,
    mut new: Value,
) -> Result<Written, ApiError> {
    let finished = meta::deleting(&new)
        && meta::finalizers(&new).is_empty()
        && !(info.namespace_lifecycle && namespace_spec_finalizers(&new));
    if finished {
        // Upstream answers with the final state at the old resourceVersion; watchers see only DELETED.
        return Ok(
            match st.storage.delete(key, read_rev).await.map_err(internal)? {
                Some(_) => {
                    after_removal(st, info, &new).await;
                    Written::Done(new)
                }
                None => Written::Lost { removing: true },
            },
        );
    }
    Ok(
        match st
            .storage
            .update(key, &new, read_rev)
            .await
            .map_err(internal)?
        {
            Some(rev) => {
                meta::set(&mut new, "resourceVersion", json!(rev.to_string()));
                if info.group == "apiextensions.k8s.io" {
                    crd::serve(&st.registry, &new);
                }
                Written::Done(new)
            }
            None => Written::Lost { removing: false },
        },
    )
}
