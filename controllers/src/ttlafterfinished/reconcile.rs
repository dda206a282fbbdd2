//! One check of a Job's TTL (upstream `processJob`): from the cache, requeue for exactly the time
//! left; once it has run out, re-read the Job live, check again on the fresh copy, and delete it with
//! a UID precondition and foreground propagation.

use flotilla_sdk::k8s_openapi::api::batch::v1::Job;
use flotilla_sdk::k8s_openapi::jiff::Timestamp;
use flotilla_sdk::kube;
use flotilla_sdk::kube::api::{Api, DeleteParams, Preconditions, PropagationPolicy};
use flotilla_sdk::{Action, Context, Request};

use super::expiry::{Expiry, ExpiryError, expiry};

/// Errors of one check; the key is retried with the fleet's rate limiter, as upstream's.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Job finished at an unknown time.
    #[error(transparent)]
    Expiry(#[from] ExpiryError),
    /// The Job lacks a namespace or uid, so it cannot be re-read or deleted safely.
    #[error("job {0} lacks a namespace or uid")]
    Incomplete(String),
    /// The live re-read failed.
    #[error("cannot read job {key} before deleting it")]
    Get {
        /// `namespace/name`.
        key: String,
        /// Why.
        source: kube::Error,
    },
    /// The delete failed (a 409 means the Job was replaced by another of the same name since the
    /// re-read: the retry checks the new one).
    #[error("cannot delete job {key}")]
    Delete {
        /// `namespace/name`.
        key: String,
        /// Why.
        source: kube::Error,
    },
}

/// Checks one Job against its TTL at the wall clock's now.
///
/// # Errors
/// [`Error`] when the finish time is unknown or the live read or delete fails.
pub async fn reconcile(request: Request<Job>, ctx: Context) -> Result<Action, Error> {
    let Some(cached) = request.object() else {
        return Ok(Action::await_change());
    };
    match expiry(cached, Timestamp::now())? {
        Expiry::NotApplicable => return Ok(Action::await_change()),
        Expiry::Remaining(left) => return Ok(Action::requeue(left)),
        Expiry::Expired(_) => {}
    }
    let key = request.key().to_owned();
    let namespace = request
        .namespace()
        .ok_or_else(|| Error::Incomplete(key.clone()))?;
    let jobs: Api<Job> = Api::namespaced(ctx.client(), namespace);
    // The cache may be stale (the TTL raised, the Job replaced); only a fresh copy may be deleted.
    let fresh = match jobs.get_opt(request.name()).await {
        Ok(Some(fresh)) => fresh,
        Ok(None) => return Ok(Action::await_change()),
        Err(source) => return Err(Error::Get { key, source }),
    };
    match expiry(&fresh, Timestamp::now())? {
        Expiry::NotApplicable => return Ok(Action::await_change()),
        Expiry::Remaining(left) => return Ok(Action::requeue(left)),
        Expiry::Expired(expired_at) => {
            tracing::debug!(key = %key, %expired_at, "deleting job whose ttl after finished expired");
        }
    }
    let uid = fresh
        .metadata
        .uid
        .clone()
        .ok_or_else(|| Error::Incomplete(key.clone()))?;
    let params = delete_params(uid);
    match jobs.delete(request.name(), &params).await {
        Ok(_) => Ok(Action::await_change()),
        // Deleted meanwhile: the goal holds.
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(Action::await_change()),
        Err(source) => Err(Error::Delete { key, source }),
    }
}

/// Upstream's delete options: only the Job that was checked (its UID), its pods first (foreground).
pub fn delete_params(uid: String) -> DeleteParams {
    DeleteParams {
        propagation_policy: Some(PropagationPolicy::Foreground),
        preconditions: Some(Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..DeleteParams::default()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use flotilla_sdk::k8s_openapi::jiff::SignedDuration;
    use flotilla_sdk::kube::client::Body;
    use http::{Method, Request as HttpRequest, Response};
    use serde_json::{Value, json};

    use super::*;

    /// (method, path, body) of each request the mock API answered.
    type Seen = Arc<Mutex<Vec<(Method, String, Value)>>>;

    /// A Job `ns/pi` with `uid` and `ttl`, Complete since `ago`.
    fn job(uid: &str, ttl: i32, ago: Duration) -> Value {
        let at = Timestamp::now()
            .checked_sub(SignedDuration::try_from(ago).unwrap())
            .unwrap();
        let at = flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at);
        json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "pi", "namespace": "ns", "uid": uid},
            "spec": {"ttlSecondsAfterFinished": ttl, "template": {}},
            "status": {"conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": at}]},
        })
    }

    /// A mock API whose GET of the Job answers `fresh` and whose DELETE succeeds.
    fn api(fresh: Value, seen: Seen) -> kube::Client {
        let service = tower::service_fn(move |request: HttpRequest<Body>| {
            let (fresh, seen) = (fresh.clone(), seen.clone());
            async move {
                let (parts, body) = request.into_parts();
                let bytes = body.collect_bytes().await?;
                let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                seen.lock().unwrap().push((
                    parts.method.clone(),
                    parts.uri.path().to_owned(),
                    body,
                ));
                let response = Response::new(Body::from(serde_json::to_vec(&fresh)?));
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(response)
            }
        });
        kube::Client::new(service, "default")
    }

    async fn run(cached: Value, fresh: Value) -> (Action, Vec<(Method, String, Value)>) {
        let seen: Seen = Arc::default();
        let ctx = Context::for_test().client(api(fresh, seen.clone())).build();
        let request =
            Request::new(Some("ns"), "pi").with_object(serde_json::from_value(cached).unwrap());
        let action = reconcile(request, ctx).await.unwrap();
        let seen = seen.lock().unwrap().clone();
        (action, seen)
    }

    #[tokio::test]
    async fn an_expired_job_is_re_read_live_and_deleted_in_the_foreground_by_the_fresh_uid() {
        let long_ago = Duration::from_secs(100);
        let (action, seen) = run(job("u-1", 1, long_ago), job("u-2", 1, long_ago)).await;
        assert_eq!(action, Action::await_change());
        let path = "/apis/batch/v1/namespaces/ns/jobs/pi";
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert_eq!((&seen[0].0, seen[0].1.as_str()), (&Method::GET, path));
        assert_eq!((&seen[1].0, seen[1].1.as_str()), (&Method::DELETE, path));
        assert_eq!(seen[1].2["propagationPolicy"], "Foreground");
        assert_eq!(seen[1].2["preconditions"], json!({"uid": "u-2"}));
    }

    #[tokio::test]
    async fn a_job_whose_live_copy_has_a_longer_ttl_is_requeued_and_not_deleted() {
        let long_ago = Duration::from_secs(100);
        let (action, seen) = run(job("u-1", 1, long_ago), job("u-1", 3600, long_ago)).await;
        assert_eq!(seen.len(), 1, "only the live read: {seen:?}");
        let after = action.requeue_after().unwrap();
        assert!(
            after > Duration::from_secs(3400) && after <= Duration::from_secs(3500),
            "{after:?}"
        );
    }

    #[tokio::test]
    async fn a_job_not_yet_expired_in_the_cache_is_requeued_without_a_request() {
        let (action, seen) = run(job("u-1", 60, Duration::from_secs(10)), Value::Null).await;
        assert!(seen.is_empty(), "{seen:?}");
        let after = action.requeue_after().unwrap();
        assert!(
            after > Duration::from_secs(45) && after <= Duration::from_secs(50),
            "{after:?}"
        );
    }

    #[test]
    fn the_delete_is_foreground_and_bound_to_the_checked_uid() {
        let params = delete_params("u-1".into());
        assert_eq!(
            params.propagation_policy,
            Some(PropagationPolicy::Foreground)
        );
        let preconditions = params.preconditions.as_ref();
        assert_eq!(preconditions.and_then(|p| p.uid.as_deref()), Some("u-1"));
        assert_eq!(params.grace_period_seconds, None);
    }
}
