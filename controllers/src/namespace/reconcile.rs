//! One pass over a namespace (upstream's `namespacedResourcesDeleter.Delete`): if it is being deleted
//! and still carries the `kubernetes` finalizer, delete all its content, report progress in its
//! conditions, and finalize it once nothing is left.

use flotilla_sdk::k8s_openapi::api::core::v1::{Namespace, NamespaceStatus};
use flotilla_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use flotilla_sdk::kube::api::{Api, PostParams};
use futures::StreamExt;

use super::conditions::{Findings, desired, merge};
use super::content::purge;
use super::discovery::discover;
use super::finalize::{FinalizeError, finalize, has_finalizer};
use super::tally::Totals;
use flotilla_sdk::{Action, Context, Request};
use flotilla_sdk::{k8s_openapi, kube};

/// How many resources of one namespace are purged at once. The worker's `--kube-api-qps` bounds the
/// request rate anyway; a few in parallel hide the round trips.
const PARALLEL_RESOURCES: usize = 4;

/// Errors of one pass; each makes the key retry with the rate limiter.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The namespace could not be read.
    #[error("cannot read namespace {namespace}")]
    Get {
        /// The namespace.
        namespace: String,
        /// Why.
        source: kube::Error,
    },
    /// Discovery or some deletions failed; the namespace conditions say which. It is not finalized.
    #[error("deleting the content of namespace {namespace} is incomplete: {summary}")]
    Incomplete {
        /// The namespace.
        namespace: String,
        /// The failures, `; `-joined.
        summary: String,
    },
    /// The content is gone but the namespace could not be finalized.
    #[error(transparent)]
    Finalize(#[from] FinalizeError),
}

pub(super) async fn reconcile(request: Request<Namespace>, ctx: Context) -> Result<Action, Error> {
    let deleting = request
        .object()
        .is_some_and(|ns| ns.metadata.deletion_timestamp.is_some());
    if !deleting {
        return Ok(Action::await_change());
    }
    let name = request.name();
    let client = ctx.client();
    let api: Api<Namespace> = Api::all(client.clone());
    // Several controllers edit a terminating namespace; act on its latest state, like upstream.
    let live = api.get_opt(name).await.map_err(|source| Error::Get {
        namespace: name.to_owned(),
        source,
    })?;
    let Some(mut namespace) = live else {
        return Ok(Action::await_change());
    };
    if namespace.metadata.deletion_timestamp.is_none() || !has_finalizer(&namespace) {
        return Ok(Action::await_change());
    }

    let findings = delete_content(&client, name).await;

    let status = namespace
        .status
        .get_or_insert_with(NamespaceStatus::default);
    let mut changed = status.phase.as_deref() != Some("Terminating");
    status.phase = Some("Terminating".to_owned());
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    changed |= merge(status, desired(&findings), &now);
    if changed {
        match api
            .replace_status(name, &PostParams::default(), &namespace)
            .await
        {
            Ok(updated) => namespace = updated,
            // Like upstream, a failed condition update does not stop the deletion; the next pass
            // writes them again.
            Err(err) => {
                tracing::warn!(namespace = name, error = %err, "cannot update the deletion conditions");
            }
        }
    }

    if findings.failed() {
        let mut failures: Vec<String> = findings
            .discovery_failure
            .iter()
            .chain(findings.parsing_failure.iter())
            .cloned()
            .collect();
        failures.extend(findings.content_errors.iter().cloned());
        return Err(Error::Incomplete {
            namespace: name.to_owned(),
            summary: failures.join("; "),
        });
    }
    if let Some(after) = findings.totals.requeue_after() {
        tracing::debug!(
            namespace = name,
            remaining = ?findings.totals.remaining,
            finalizers = ?findings.totals.finalizers,
            ?after,
            "content remains; looking again later"
        );
        return Ok(Action::requeue(after));
    }
    finalize(&api, &namespace).await?;
    tracing::info!(namespace = name, "namespace content deleted; finalized");
    Ok(Action::await_change())
}

/// Discovers every deletable namespaced resource and purges each in `namespace`.
async fn delete_content(client: &kube::Client, namespace: &str) -> Findings {
    let discovered = discover(client).await;
    // Owned values per future: borrowed ones trip the compiler's `Send` inference on the stream.
    let outcomes: Vec<_> = futures::stream::iter(discovered.resources)
        .map(|deletable| {
            let client = client.clone();
            let namespace = namespace.to_owned();
            async move {
                let (leftover, error) = purge(&client, &namespace, &deletable).await;
                (deletable.display_name(), leftover, error)
            }
        })
        .buffer_unordered(PARALLEL_RESOURCES)
        .collect()
        .await;
    let mut totals = Totals::default();
    let mut content_errors = Vec::new();
    for (resource, leftover, error) in outcomes {
        totals.add(resource, &leftover);
        if let Some(error) = error {
            content_errors.push(error.describe());
        }
    }
    Findings {
        discovery_failure: discovered.failure,
        parsing_failure: discovered.parsing_failure,
        content_errors,
        totals,
    }
}
