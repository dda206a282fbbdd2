//! The `pods/eviction` subresource (`POST .../pods/{name}/eviction` with a policy/v1 or v1beta1
//! `Eviction`): a pod delete that respects the PodDisruptionBudget covering the pod, as
//! kube-apiserver v1.32's `EvictionREST` does.
//!
//! # Contract (upstream's, kept)
//! * A pod that is Pending, Succeeded, Failed or already being deleted is deleted without looking
//!   at budgets (it is not disrupting anything that is running).
//! * Otherwise the PDBs of the pod's namespace whose selector matches it are found: none → the pod
//!   is deleted; more than one → 500 (upstream does not support overlapping budgets).
//! * With one PDB: an unready pod is deleted without consuming the budget when the PDB's
//!   `unhealthyPodEvictionPolicy` is `AlwaysAllow`, or (default `IfHealthyBudget`) when
//!   `currentHealthy >= desiredHealthy > 0`; the delete is then pinned to the pod's
//!   resourceVersion, and a conflict answers 429 so the client retries.
//! * Otherwise the budget is checked and decremented in one status write of the PDB guarded by its
//!   resourceVersion (retried on conflict): `status.observedGeneration` behind
//!   `metadata.generation` → 429 "still being processed" (Retry-After 10); `disruptionsAllowed` 0 →
//!   429 naming the budget's desired and current healthy counts; else `disruptionsAllowed` goes
//!   down by one (the DisruptionAllowed condition turns False at 0) and the pod enters
//!   `status.disruptedPods` with the current time, so the disruption controller does not count it
//!   while its deletion is under way.
//! * Before the delete the pod gets the condition `DisruptionTarget=True` (reason
//!   `EvictionByEvictionAPI`); the delete takes the Eviction's `deleteOptions` (grace period,
//!   preconditions, propagation). `dryRun=All` (query or `deleteOptions.dryRun`) writes nothing.
//! * Success answers 201 with a `Status` of `status: Success, code: 201`.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::meta;
use super::objects::{self, DeleteOptions, Part, Target};
use super::query::Query;
use super::selector::LabelSelector;
use super::state::ApiState;
use super::status::{ApiError, Gr};

/// Upstream's `MaxDisruptedPodSize`: a budget with more evictions not yet confirmed by the
/// disruption controller refuses further ones.
const MAX_DISRUPTED_POD_SIZE: usize = 2000;

/// Upstream's `EvictionsRetry` has 20 steps; conflicts are retried at once here (the next read is
/// fresh, and devcluster's writes are quick).
const RETRIES: usize = 20;

/// The message of every 429 the eviction answers.
const REFUSED: &str = "Cannot evict pod as it would violate the pod's disruption budget.";

/// Handles one eviction of the pod `t` names. Answers 201 on success; errors are rendered here (a
/// 429 with a retry hint carries a `Retry-After` header, as upstream's).
///
/// # Errors
/// Never: every failure is answered as a `Status` response.
pub async fn evict(st: &ApiState, t: &Target, body: &[u8]) -> Result<Response, ApiError> {
    Ok(match run(st, t, body).await {
        Ok(response) => response,
        Err(err) => render_error(err),
    })
}

fn render_error(err: ApiError) -> Response {
    let retry = err
        .details
        .as_ref()
        .and_then(|d| d["retryAfterSeconds"].as_i64())
        .filter(|s| *s > 0);
    let mut response = err.into_response();
    if let Some(seconds) = retry
        && let Ok(v) = HeaderValue::from_str(&seconds.to_string())
    {
        response.headers_mut().insert("retry-after", v);
    }
    response
}

async fn run(st: &ApiState, t: &Target, body: &[u8]) -> Result<Response, ApiError> {
    let eviction: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding Eviction: {e}")))?;
    if !eviction.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request must be an Eviction",
        ));
    }
    if let Some(api_version) = eviction["apiVersion"].as_str()
        && !matches!(api_version, "policy/v1" | "policy/v1beta1")
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version (policy/v1)"
        )));
    }
    let name = t.name.clone().unwrap_or_default();
    if eviction["metadata"]["name"].as_str().unwrap_or("") != name {
        return Err(ApiError::bad_request(
            "name in URL does not match name in Eviction object",
        ));
    }
    let delete_options = eviction.get("deleteOptions").filter(|o| !o.is_null());
    let dry_run = dry_run(&t.query, delete_options)?;
    let options_body = delete_options
        .map(|o| serde_json::to_vec(o).unwrap_or_default())
        .unwrap_or_default();
    let original = DeleteOptions::parse(&Query::default(), &options_body)?;
    let mut query = Query::default();
    if dry_run {
        query.set("dryRun", "All");
    }
    let pods = Target::new(
        t.info.clone(),
        t.namespace.clone(),
        t.name.clone(),
        query,
        t.manager.clone(),
    )
    .with_user(t.user.clone());

    // A pod that disrupts nothing by going is deleted without looking at budgets.
    let may_retry = original.resource_version().is_none();
    let mut pod = Value::Null;
    for attempt in 0..RETRIES {
        pod = objects::get(st, &pods).await?;
        if !can_ignore_pdb(&pod) {
            break;
        }
        let mut options = original.clone();
        if should_enforce_resource_version(&pod) && may_retry {
            options = options.with_resource_version(resource_version(&pod));
        }
        match condition_and_delete(st, &pods, options, dry_run).await {
            Ok(()) => return Ok(success()),
            Err(err) if err.code == 409 && may_retry && attempt + 1 < RETRIES => continue,
            Err(err) => return Err(err),
        }
    }
    if can_ignore_pdb(&pod) {
        return Err(ApiError::conflict(
            t.info.gr(),
            &name,
            "too many concurrent writes; please retry",
        ));
    }

    let namespace = t.namespace.clone().unwrap_or_default();
    let budgets = matching_budgets(st, &namespace, &pod).await?;
    if budgets.len() > 1 {
        return Ok(super::http::json_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
                "code": 500,
            }),
        ));
    }
    let mut pinned = false;
    let mut budget_name = String::new();
    if let Some(budget) = budgets.into_iter().next() {
        budget_name = meta::name(&budget).to_string();
        if !is_ready(&pod) && unhealthy_may_go(&budget) {
            pinned = true;
        } else {
            decrement(st, &namespace, &name, budget, dry_run).await?;
        }
    }
    let mut options = original.clone();
    if pinned {
        options = options.with_resource_version(resource_version(&pod));
    }
    match condition_and_delete(st, &pods, options, dry_run).await {
        Ok(()) => Ok(success()),
        Err(err) if err.code == 409 && pinned && may_retry => Err(still_processing(&budget_name)),
        Err(err) => Err(err),
    }
}

/// The dry-run choice of the request: the query's `dryRun` and `deleteOptions.dryRun` must agree
/// when both are given (upstream's `propagateDryRun`).
fn dry_run(query: &Query, delete_options: Option<&Value>) -> Result<bool, ApiError> {
    let from_query: Vec<String> = query
        .get("dryRun")
        .map(|v| vec![v.to_string()])
        .unwrap_or_default();
    let from_body: Vec<String> = delete_options
        .and_then(|o| o["dryRun"].as_array())
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(String::from))
        .collect();
    if !from_query.is_empty() && !from_body.is_empty() && from_query != from_body {
        return Err(ApiError::bad_request(format!(
            "Non-matching dry-run options in request and content: [{}] and [{}]",
            from_query.join(" "),
            from_body.join(" ")
        )));
    }
    let chosen = if from_body.is_empty() {
        from_query
    } else {
        from_body
    };
    Ok(chosen.iter().any(|v| v == "All"))
}

fn success() -> Response {
    super::http::json_response(
        StatusCode::CREATED,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    )
}

fn phase(pod: &Value) -> &str {
    pod["status"]["phase"].as_str().unwrap_or("")
}

/// Upstream's `canIgnorePDB`.
fn can_ignore_pdb(pod: &Value) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed" | "Pending") || meta::deleting(pod)
}

/// Upstream's `shouldEnforceResourceVersion`: a Pending pod is pinned (it could turn ready), a
/// terminal or terminating one is not.
fn should_enforce_resource_version(pod: &Value) -> bool {
    !(matches!(phase(pod), "Succeeded" | "Failed") || meta::deleting(pod))
}

fn resource_version(obj: &Value) -> String {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// Upstream's `IsPodReady`: the Ready condition is True.
fn is_ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// Whether an unready pod may go without consuming the budget: `AlwaysAllow`, or (the default
/// `IfHealthyBudget`) the application is not disrupted now.
fn unhealthy_may_go(budget: &Value) -> bool {
    if budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow" {
        return true;
    }
    let status = &budget["status"];
    let current = status["currentHealthy"].as_i64().unwrap_or(0);
    let desired = status["desiredHealthy"].as_i64().unwrap_or(0);
    current >= desired && desired > 0
}

/// The PDBs of `namespace` whose selector matches the pod's labels. A PDB without a selector or
/// with an invalid one matches nothing; an empty selector matches every pod (policy/v1).
async fn matching_budgets(
    st: &ApiState,
    namespace: &str,
    pod: &Value,
) -> Result<Vec<Value>, ApiError> {
    let info = budget_info(st)?;
    let page = st
        .storage
        .list(&info.collection_prefix(Some(namespace)), None, None)
        .await
        .map_err(objects::internal)?;
    let empty = serde_json::Map::new();
    let labels = pod["metadata"]["labels"].as_object().unwrap_or(&empty);
    Ok(page
        .items
        .into_iter()
        .map(|s| s.value)
        .filter(|pdb| {
            let selector = &pdb["spec"]["selector"];
            !selector.is_null()
                && LabelSelector::from_object(selector).is_ok_and(|s| s.matches_map(labels))
        })
        .collect())
}

fn budget_info(st: &ApiState) -> Result<std::sync::Arc<super::registry::ResourceInfo>, ApiError> {
    st.registry
        .lookup("policy", "v1", "poddisruptionbudgets")
        .ok_or_else(|| ApiError::internal("poddisruptionbudgets are not served"))
}

/// Checks the budget and takes one disruption from it (upstream's `checkAndDecrement`, with its
/// retry on conflict: a refused write re-reads the PDB and checks again).
async fn decrement(
    st: &ApiState,
    namespace: &str,
    pod_name: &str,
    mut budget: Value,
    dry_run: bool,
) -> Result<(), ApiError> {
    let info = budget_info(st)?;
    let budget_name = meta::name(&budget).to_string();
    let mut query = Query::default();
    if dry_run {
        query.set("dryRun", "All");
    }
    // Like upstream's, the write is the API server's own (manager `kube-apiserver`).
    let target = Target::new(
        info,
        Some(namespace.to_string()),
        Some(budget_name.clone()),
        query,
        "kube-apiserver".into(),
    );
    for attempt in 0..RETRIES {
        if attempt > 0 {
            budget = objects::get(st, &target).await?;
        }
        let updated = check(&budget, pod_name)?;
        if dry_run {
            return Ok(());
        }
        match objects::guaranteed_update(st, &target, Part::Status, "Update", None, |_| {
            Ok(updated.clone())
        })
        .await
        {
            Ok(_) => return Ok(()),
            Err(err) if err.code == 409 => continue,
            Err(err) => return Err(err),
        }
    }
    Err(ApiError {
        code: 504,
        reason: "Timeout",
        message: format!("couldn't update PodDisruptionBudget \"{budget_name}\" due to conflicts"),
        details: Some(Box::new(json!({"retryAfterSeconds": 10}))),
        metadata: Box::new(json!({})),
    })
}

/// The budget after one more disruption of `pod_name`, or why there may be none. The result keeps
/// the read resourceVersion, so its write fails on a budget changed since.
fn check(budget: &Value, pod_name: &str) -> Result<Value, ApiError> {
    let name = meta::name(budget).to_string();
    let gr = Gr {
        group: "policy",
        resource: "poddisruptionbudget",
    };
    let status = &budget["status"];
    let observed = status["observedGeneration"].as_i64().unwrap_or(0);
    let generation = budget["metadata"]["generation"].as_i64().unwrap_or(0);
    if observed < generation {
        return Err(still_processing(&name));
    }
    let allowed = status["disruptionsAllowed"].as_i64().unwrap_or(0);
    if allowed < 0 {
        return Err(ApiError::forbidden(
            gr,
            &name,
            "pdb disruptions allowed is negative",
            Vec::new(),
        ));
    }
    let disrupted = status["disruptedPods"].as_object().map_or(0, |m| m.len());
    if disrupted > MAX_DISRUPTED_POD_SIZE {
        return Err(ApiError::forbidden(
            gr,
            &name,
            "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
            Vec::new(),
        ));
    }
    if allowed == 0 {
        let desired = status["desiredHealthy"].as_i64().unwrap_or(0);
        let current = status["currentHealthy"].as_i64().unwrap_or(0);
        return Err(too_many_requests(
            format!(
                "The disruption budget {name} needs {desired} healthy pods and has {current} currently"
            ),
            0,
        ));
    }
    let mut updated = budget.clone();
    updated["status"]["disruptionsAllowed"] = json!(allowed - 1);
    if allowed - 1 == 0 {
        disruption_allowed_condition(&mut updated);
    }
    if !updated["status"]["disruptedPods"].is_object() {
        updated["status"]["disruptedPods"] = json!({});
    }
    updated["status"]["disruptedPods"][pod_name] = json!(meta::now());
    Ok(updated)
}

/// Upstream's `UpdateDisruptionAllowedCondition` (with `meta.SetStatusCondition`'s rules: the
/// transition time moves only when the status changes).
fn disruption_allowed_condition(pdb: &mut Value) {
    let allowed = pdb["status"]["disruptionsAllowed"].as_i64().unwrap_or(0) > 0;
    let (status, reason) = if allowed {
        ("True", "SufficientPods")
    } else {
        ("False", "InsufficientPods")
    };
    let observed = pdb["status"]["observedGeneration"].as_i64().unwrap_or(0);
    if !pdb["status"]["conditions"].is_array() {
        pdb["status"]["conditions"] = json!([]);
    }
    let Some(conditions) = pdb["status"]["conditions"].as_array_mut() else {
        return;
    };
    match conditions
        .iter_mut()
        .find(|c| c["type"] == "DisruptionAllowed")
    {
        Some(c) => {
            if c["status"] != status {
                c["status"] = json!(status);
                c["lastTransitionTime"] = json!(meta::now());
            }
            c["reason"] = json!(reason);
            c["message"] = json!("");
            set_observed_generation(c, observed);
        }
        None => {
            let mut c = json!({"type": "DisruptionAllowed", "status": status});
            set_observed_generation(&mut c, observed);
            c["lastTransitionTime"] = json!(meta::now());
            c["reason"] = json!(reason);
            c["message"] = json!("");
            conditions.push(c);
        }
    }
}

fn set_observed_generation(condition: &mut Value, observed: i64) {
    if let Some(m) = condition.as_object_mut() {
        if observed == 0 {
            m.remove("observedGeneration");
        } else {
            m.insert("observedGeneration".into(), json!(observed));
        }
    }
}

/// Upstream's `NewTooManyRequests` with a `DisruptionBudget` cause.
fn too_many_requests(cause: String, retry_after: i64) -> ApiError {
    let mut details = json!({"causes": [{"reason": "DisruptionBudget", "message": cause}]});
    if retry_after > 0 {
        details["retryAfterSeconds"] = json!(retry_after);
    }
    ApiError {
        code: 429,
        reason: "TooManyRequests",
        message: REFUSED.to_string(),
        details: Some(Box::new(details)),
        metadata: Box::new(json!({})),
    }
}

/// Upstream's `createTooManyRequestsError`: the budget's status is behind its spec, or a pinned
/// delete lost a race.
fn still_processing(budget: &str) -> ApiError {
    too_many_requests(
        format!("The disruption budget {budget} is still being processed by the server."),
        10,
    )
}

/// Upstream's `addConditionAndDeletePod`: marks the pod `DisruptionTarget=True` through its status
/// (checking the delete's preconditions against the stored pod first), then deletes it with
/// `options`, whose resourceVersion precondition follows the condition write.
async fn condition_and_delete(
    st: &ApiState,
    pods: &Target,
    mut options: DeleteOptions,
    dry_run: bool,
) -> Result<(), ApiError> {
    if !dry_run {
        let name = pods.name.clone().unwrap_or_default();
        let (uid, rv) = (
            options.uid().map(String::from),
            options.resource_version().map(String::from),
        );
        let written = objects::guaranteed_update(st, pods, Part::Status, "Update", None, |cur| {
            preconditions(cur, &name, uid.as_deref(), rv.as_deref())?;
            let mut pod = cur.clone();
            disruption_target(&mut pod);
            Ok(pod)
        })
        .await?;
        if options.resource_version().is_some() {
            options = options.with_resource_version(resource_version(&written));
        }
    }
    objects::delete(st, pods, &options).await.map(|_| ())
}

fn preconditions(
    pod: &Value,
    name: &str,
    uid: Option<&str>,
    rv: Option<&str>,
) -> Result<(), ApiError> {
    let gr = Gr {
        group: "",
        resource: "Pod",
    };
    let have_uid = pod["metadata"]["uid"].as_str().unwrap_or("");
    if let Some(uid) = uid.filter(|u| !u.is_empty())
        && uid != have_uid
    {
        return Err(ApiError::conflict(
            gr,
            name,
            &format!(
                "the UID in the precondition ({uid}) does not match the UID in record ({have_uid}). The object might have been deleted and then recreated"
            ),
        ));
    }
    let have_rv = resource_version(pod);
    if let Some(rv) = rv.filter(|r| !r.is_empty())
        && rv != have_rv
    {
        return Err(ApiError::conflict(
            gr,
            name,
            &format!(
                "the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({have_rv}). The object might have been modified"
            ),
        ));
    }
    Ok(())
}

/// Upstream's `UpdatePodCondition` with `DisruptionTarget=True`, reason `EvictionByEvictionAPI`.
fn disruption_target(pod: &mut Value) {
    if !pod["status"]["conditions"].is_array() {
        pod["status"]["conditions"] = json!([]);
    }
    let Some(conditions) = pod["status"]["conditions"].as_array_mut() else {
        return;
    };
    let reason = "EvictionByEvictionAPI";
    let message = "Eviction API: evicting";
    match conditions
        .iter_mut()
        .find(|c| c["type"] == "DisruptionTarget")
    {
        Some(c) => {
            if c["status"] != "True" {
                c["status"] = json!("True");
                c["lastTransitionTime"] = json!(meta::now());
            }
            c["reason"] = json!(reason);
            c["message"] = json!(message);
        }
        None => conditions.push(json!({
            "type": "DisruptionTarget",
            "status": "True",
            "lastProbeTime": null,
            "lastTransitionTime": meta::now(),
            "reason": reason,
            "message": message,
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(allowed: i64, observed: i64, generation: i64) -> Value {
        json!({
            "metadata": {"name": "web-pdb", "generation": generation, "resourceVersion": "7"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
            "status": {"observedGeneration": observed, "disruptionsAllowed": allowed,
                       "currentHealthy": 2, "desiredHealthy": 2, "expectedPods": 3,
                       "conditions": [{"type": "DisruptionAllowed", "status": "True", "observedGeneration": 1,
                                       "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": "SufficientPods", "message": ""}]},
        })
    }

    #[test]
    fn a_budget_with_no_disruptions_left_refuses_with_upstreams_exact_status() {
        let err = check(&budget(0, 1, 1), "web-npj7j").unwrap_err();
        assert_eq!(
            err.status_json(),
            json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "Cannot evict pod as it would violate the pod's disruption budget.",
                "reason": "TooManyRequests",
                "details": {"causes": [{"reason": "DisruptionBudget",
                    "message": "The disruption budget web-pdb needs 2 healthy pods and has 2 currently"}]},
                "code": 429,
            })
        );
    }

    #[test]
    fn taking_the_last_disruption_records_the_pod_and_turns_the_condition_false() {
        let updated = check(&budget(1, 1, 1), "web-kfgwr").unwrap();
        let status = &updated["status"];
        assert_eq!(status["disruptionsAllowed"], 0);
        assert!(status["disruptedPods"]["web-kfgwr"].is_string());
        let c = &status["conditions"][0];
        assert_eq!(
            (&c["status"], &c["reason"]),
            (&json!("False"), &json!("InsufficientPods"))
        );
        assert_ne!(c["lastTransitionTime"], "2026-01-01T00:00:00Z");
        assert_eq!(
            updated["metadata"]["resourceVersion"], "7",
            "the write is guarded"
        );
    }

    #[test]
    fn a_budget_whose_status_is_behind_its_spec_asks_to_retry_in_ten_seconds() {
        let err = check(&budget(1, 1, 2), "p").unwrap_err();
        assert_eq!(err.code, 429);
        let details = err.details.unwrap();
        assert_eq!(details["retryAfterSeconds"], 10);
        assert_eq!(
            details["causes"][0]["message"],
            "The disruption budget web-pdb is still being processed by the server."
        );
    }

    #[test]
    fn pending_terminal_and_terminating_pods_skip_the_budget() {
        assert!(can_ignore_pdb(&json!({"status": {"phase": "Pending"}})));
        assert!(can_ignore_pdb(&json!({"status": {"phase": "Failed"}})));
        assert!(can_ignore_pdb(
            &json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}, "status": {"phase": "Running"}})
        ));
        assert!(!can_ignore_pdb(&json!({"status": {"phase": "Running"}})));
        assert!(should_enforce_resource_version(
            &json!({"status": {"phase": "Pending"}})
        ));
        assert!(!should_enforce_resource_version(
            &json!({"status": {"phase": "Succeeded"}})
        ));
    }

    #[test]
    fn an_unready_pod_goes_free_only_under_always_allow_or_a_healthy_budget() {
        let mut b = budget(0, 1, 1);
        assert!(unhealthy_may_go(&b), "2 healthy of 2 desired");
        b["status"]["currentHealthy"] = json!(1);
        assert!(!unhealthy_may_go(&b));
        b["spec"]["unhealthyPodEvictionPolicy"] = json!("AlwaysAllow");
        assert!(unhealthy_may_go(&b));
    }

    #[test]
    fn dry_run_options_must_agree_between_query_and_body() {
        let q = Query::parse(Some("dryRun=All"));
        assert!(dry_run(&q, None).unwrap());
        assert!(dry_run(&Query::default(), Some(&json!({"dryRun": ["All"]}))).unwrap());
        assert!(!dry_run(&Query::default(), None).unwrap());
        assert_eq!(
            dry_run(&q, Some(&json!({"dryRun": ["Other"]})))
                .unwrap_err()
                .code,
            400
        );
    }
}
