//! Creating a benchmark's objects from its own client (no rate limit), many at once, so the creates
//! do not pace what the fleet is measured on.

use std::fmt::Debug;

use anyhow::Context;
use futures::{StreamExt, TryStreamExt};
use kube::Resource;
use kube::api::{Api, PostParams};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::run_report::Unit;

/// Creates in flight at once.
const CREATE_CONCURRENCY: usize = 32;

/// Creates `n` objects of `unit`'s kind through `api`, the `i`-th as `object(i)` describes it,
/// [`CREATE_CONCURRENCY`] at once.
///
/// # Errors
/// When an object does not parse as `K` or the API refuses one, naming it.
pub(super) async fn create_all<K>(
    api: &Api<K>,
    unit: Unit,
    n: usize,
    object: impl Fn(usize) -> serde_json::Value,
) -> anyhow::Result<()>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            let value = object(i);
            async move {
                let name = value["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let object: K = serde_json::from_value(value)
                    .with_context(|| format!("{} {name} is malformed", unit.one))?;
                api.create(&PostParams::default(), &object)
                    .await
                    .with_context(|| format!("cannot create {} {name}", unit.one))
            }
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .try_for_each(|_| async { Ok(()) })
        .await
}
