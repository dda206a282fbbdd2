//! `flotilla bench bounds`: the time and memory of one controller's workqueue at its documented bound
//! of a million keys (RELIABILITY.md, "Bounds"). In-process, the coordinator's own [`WorkQueue`] with
//! the default rate limiter and unregistered metrics, keys shaped like the dispatcher's
//! (`namespace/name`): a million adds, a million adds again (each coalesced into the queued key), a
//! million gets and a million dones. Time is the median over `--runs`; memory is the resident set
//! this process grew by while the first run filled the queue (later runs reuse the freed pages), per
//! key. `tests/fleet/bounds.rs` and the queue's own bounds test assert the behaviour at these sizes.

use std::time::Instant;

use anyhow::Context;
use flotilla_coordinator::{QueueMetrics, WorkQueue, default_controller_rate_limiter};
use serde_json::json;

use super::{median, write_json};

/// Flags of `flotilla bench bounds`.
#[derive(clap::Args, Debug)]
pub struct BoundsArgs {
    /// Keys in the queue.
    #[arg(long, default_value_t = 1_000_000)]
    keys: usize,
    /// Runs; the report gives medians.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Where to write the JSON result.
    #[arg(long, default_value = "benchmarks/bounds.json")]
    output: std::path::PathBuf,
}

/// One run's phases, in seconds, and the resident set it grew by while filling, in MiB.
#[derive(Debug, Clone, Copy, serde::Serialize)]
struct RunResult {
    add_s: f64,
    add_again_s: f64,
    get_s: f64,
    done_s: f64,
    filled_rss_growth_mib: f64,
}

/// This process's resident set (`VmRSS`), in MiB.
fn own_rss_mib() -> anyhow::Result<f64> {
    let status = std::fs::read_to_string("/proc/self/status").context("/proc/self/status")?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .context("no VmRSS in /proc/self/status")?;
    Ok(kib / 1024.0)
}

/// Fills, drains and finishes one queue of `keys` keys.
fn one_run(keys: usize) -> anyhow::Result<RunResult> {
    let names: Vec<String> = (0..keys)
        .map(|i| format!("ns-{}/object-{i}", i / 1000))
        .collect();
    let rss_before = own_rss_mib()?;
    let mut queue: WorkQueue<String> = WorkQueue::new(
        "bounds",
        Box::new(default_controller_rate_limiter()),
        QueueMetrics::unregistered("bounds"),
    );
    let t = Instant::now();
    for name in &names {
        queue.add(name.clone());
    }
    let add_s = t.elapsed().as_secs_f64();
    let filled_rss_growth_mib = own_rss_mib()? - rss_before;
    let t = Instant::now();
    for name in &names {
        queue.add(name.clone());
    }
    let add_again_s = t.elapsed().as_secs_f64();
    anyhow::ensure!(
        queue.len() == keys,
        "{} keys queued, not {keys}",
        queue.len()
    );
    let t = Instant::now();
    let mut handed = Vec::with_capacity(keys);
    while let Some(key) = queue.get() {
        handed.push(key);
    }
    let get_s = t.elapsed().as_secs_f64();
    anyhow::ensure!(handed.len() == keys, "{} keys handed out", handed.len());
    let t = Instant::now();
    for key in &handed {
        queue.done(key);
    }
    let done_s = t.elapsed().as_secs_f64();
    anyhow::ensure!(queue.is_empty() && queue.processing_len() == 0, "keys left");
    Ok(RunResult {
        add_s,
        add_again_s,
        get_s,
        done_s,
        filled_rss_growth_mib,
    })
}

/// Runs `flotilla bench bounds`.
pub(super) async fn run(args: BoundsArgs) -> anyhow::Result<()> {
    let keys = args.keys;
    let runs = tokio::task::spawn_blocking(move || {
        (0..args.runs.max(1))
            .map(|_| one_run(keys))
            .collect::<anyhow::Result<Vec<_>>>()
    })
    .await??;
    let med = |f: fn(&RunResult) -> f64| median(runs.iter().map(f).collect());
    let (add, again, get, done) = (
        med(|r| r.add_s),
        med(|r| r.add_again_s),
        med(|r| r.get_s),
        med(|r| r.done_s),
    );
    let memory = runs[0].filled_rss_growth_mib;
    let bytes_per_key = memory * 1024.0 * 1024.0 / keys as f64;
    println!("| queue of {keys} keys | median of {} runs |", runs.len());
    println!("| --- | --- |");
    println!(
        "| add | {add:.3} s ({:.0} ns/key) |",
        add * 1e9 / keys as f64
    );
    println!(
        "| add again (coalesced) | {again:.3} s ({:.0} ns/key) |",
        again * 1e9 / keys as f64
    );
    println!(
        "| get | {get:.3} s ({:.0} ns/key) |",
        get * 1e9 / keys as f64
    );
    println!(
        "| done | {done:.3} s ({:.0} ns/key) |",
        done * 1e9 / keys as f64
    );
    println!("| memory when full | {memory:.0} MiB ({bytes_per_key:.0} B/key) |");
    write_json(
        &args.output,
        &json!({
            "keys": keys,
            "runs": runs,
            "median_add_s": add,
            "median_add_again_s": again,
            "median_get_s": get,
            "median_done_s": done,
            "filled_rss_growth_mib": memory,
            "bytes_per_key": bytes_per_key,
        }),
    )
}
