//! `flotilla bench dispatch`: the fleet core alone — one coordinator, 1 / 2 / 4 workers in this process
//! on loopback, no-op reconciles of keys enqueued straight into the leader's queue (no objects),
//! reporting keys/s and enqueue → reconcile-start latency.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use flotilla_sdk::{Action, Controller};
use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::json;

use super::in_process::{Backend, InProcessFleet};
use super::otlp_sink::OtlpSink;
use super::{median, percentile, write_json};

/// Flags of `flotilla bench dispatch`.
#[derive(clap::Args, Debug)]
pub struct DispatchArgs {
    /// Keys per run.
    #[arg(long, default_value_t = 100_000)]
    keys: usize,
    /// Worker counts to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    workers: Vec<usize>,
    /// Runs per worker count; the report gives medians.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Concurrent reconciles per worker (--concurrent-bench-syncs).
    #[arg(long, default_value_t = 512)]
    concurrency: u32,
    /// Where to write the JSON result.
    #[arg(long, default_value = "benchmarks/dispatch.json")]
    output: std::path::PathBuf,
    /// Trace the keys, keeping this share of them (0 to 1), and export the spans over OTLP to a
    /// receiver inside this process that counts and drops them. Without it nothing is traced, as in a
    /// fleet without `--otlp-endpoint`.
    #[arg(long)]
    trace_sample_ratio: Option<f64>,
}

/// One measured run.
#[derive(Debug, Clone, Copy, serde::Serialize)]
struct RunResult {
    keys_per_sec: f64,
    burst_p50_ms: f64,
    burst_p99_ms: f64,
    paced_rate: f64,
    paced_p50_ms: f64,
    paced_p99_ms: f64,
}

/// Start times of reconciles, by key number, in ns since `base` (0 = not yet).
struct Clock {
    base: Instant,
    enqueued: Vec<AtomicU64>,
    started: Vec<AtomicU64>,
    count: AtomicUsize,
}

impl Clock {
    fn new(n: usize) -> Self {
        Self {
            base: Instant::now(),
            enqueued: (0..n).map(|_| AtomicU64::new(0)).collect(),
            started: (0..n).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicUsize::new(0),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn reset(&self) {
        for (e, s) in self.enqueued.iter().zip(&self.started) {
            e.store(0, Ordering::Relaxed);
            s.store(0, Ordering::Relaxed);
        }
        self.count.store(0, Ordering::SeqCst);
    }

    fn latencies_ms(&self, range: std::ops::Range<usize>) -> Vec<f64> {
        let mut v: Vec<f64> = range
            .filter_map(|i| {
                let (e, s) = (
                    self.enqueued[i].load(Ordering::Relaxed),
                    self.started[i].load(Ordering::Relaxed),
                );
                (s >= e && s > 0).then(|| (s - e) as f64 / 1e6)
            })
            .collect();
        v.sort_by(f64::total_cmp);
        v
    }
}

/// Runs `flotilla bench dispatch`.
pub(super) async fn run(args: DispatchArgs) -> anyhow::Result<()> {
    let sink = match args.trace_sample_ratio {
        Some(_) => Some(OtlpSink::start().await?),
        None => None,
    };
    let traces = flotilla_common::TraceFlags {
        otlp_endpoint: sink.as_ref().map(|s| s.endpoint.clone()),
        trace_sample_ratio: args.trace_sample_ratio.unwrap_or(1.0),
        ..flotilla_common::TraceFlags::default()
    };
    traces.validate()?;
    let telemetry = flotilla_common::init_telemetry(
        flotilla_common::LogFormat::Text,
        &traces,
        &flotilla_common::ServiceIdentity::new("flotilla-bench", "bench-dispatch"),
    )?;
    let measured = measure(&args).await;
    telemetry.shutdown().await;
    if let Some(sink) = &sink {
        eprintln!(
            "tracing at ratio {}: {} spans received",
            traces.trace_sample_ratio,
            sink.spans()
        );
    }
    let mut result = measured?;
    result["trace_sample_ratio"] = json!(args.trace_sample_ratio);
    result["spans_exported"] = json!(sink.as_ref().map(OtlpSink::spans));
    write_json(&args.output, &result)?;
    println!("\nJSON written to {}", args.output.display());
    Ok(())
}

/// Every run of every worker count; the report, not yet written.
async fn measure(args: &DispatchArgs) -> anyhow::Result<serde_json::Value> {
    let backend = Backend::start().await?;
    let clock = Arc::new(Clock::new(args.keys));
    let mut report = Vec::new();
    for &workers in &args.workers {
        let mut runs = Vec::new();
        for run in 0..args.runs {
            let fleet = format!("bench-{workers}-{run}");
            let result = one_run(args, &fleet, workers, &backend, clock.clone()).await?;
            eprintln!(
                "workers={workers} run={run}: {:.0} keys/s, burst p50 {:.1} ms p99 {:.1} ms, paced at {:.0}/s p50 {:.2} ms p99 {:.2} ms",
                result.keys_per_sec,
                result.burst_p50_ms,
                result.burst_p99_ms,
                result.paced_rate,
                result.paced_p50_ms,
                result.paced_p99_ms
            );
            runs.push(result);
        }
        let med = |f: fn(&RunResult) -> f64| median(runs.iter().map(f).collect());
        report.push(json!({
            "workers": workers,
            "runs": runs,
            "median": {
                "keys_per_sec": med(|r| r.keys_per_sec),
                "burst_p50_ms": med(|r| r.burst_p50_ms),
                "burst_p99_ms": med(|r| r.burst_p99_ms),
                "paced_rate": med(|r| r.paced_rate),
                "paced_p50_ms": med(|r| r.paced_p50_ms),
                "paced_p99_ms": med(|r| r.paced_p99_ms),
            }
        }));
    }
    let result = json!({
        "benchmark": "dispatch",
        "keys": args.keys,
        "concurrency_per_worker": args.concurrency,
        "runs_per_point": args.runs,
        "results": report,
    });
    println!(
        "| workers | keys/s (median) | burst p50 / p99 ms | paced rate keys/s | paced p50 / p99 ms |"
    );
    println!("|---:|---:|---:|---:|---:|");
    for r in result["results"].as_array().into_iter().flatten() {
        let m = &r["median"];
        println!(
            "| {} | {:.0} | {:.1} / {:.1} | {:.0} | {:.2} / {:.2} |",
            r["workers"],
            m["keys_per_sec"].as_f64().unwrap_or(f64::NAN),
            m["burst_p50_ms"].as_f64().unwrap_or(f64::NAN),
            m["burst_p99_ms"].as_f64().unwrap_or(f64::NAN),
            m["paced_rate"].as_f64().unwrap_or(f64::NAN),
            m["paced_p50_ms"].as_f64().unwrap_or(f64::NAN),
            m["paced_p99_ms"].as_f64().unwrap_or(f64::NAN),
        );
    }
    backend.shutdown().await;
    Ok(result)
}

async fn one_run(
    args: &DispatchArgs,
    fleet: &str,
    workers: usize,
    backend: &Backend,
    clock: Arc<Clock>,
) -> anyhow::Result<RunResult> {
    clock.reset();
    let concurrency = args.concurrency;
    let running = InProcessFleet::start(backend, fleet, workers, "bench", |_| {
        let clock = clock.clone();
        Controller::<ConfigMap>::new("bench")
            .concurrency(concurrency)
            .reconcile(move |request, _ctx| {
                let clock = clock.clone();
                async move {
                    if let Some(i) = request
                        .key()
                        .strip_prefix("b/")
                        .and_then(|n| n.parse::<usize>().ok())
                        && let Some(slot) = clock.started.get(i)
                        && slot
                            .compare_exchange(0, clock.now(), Ordering::Relaxed, Ordering::Relaxed)
                            .is_ok()
                    {
                        clock.count.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok::<_, Infallible>(Action::await_change())
                }
            })
            .into()
    })
    .await?;
    let coordinator = &running.coordinator;
    // Burst: every key at once, in batches, as fast as the queue takes them.
    let keys: Vec<String> = (0..args.keys).map(|i| format!("b/{i}")).collect();
    let start = Instant::now();
    for (chunk_no, chunk) in keys.chunks(10_000).enumerate() {
        let now = clock.now();
        for i in 0..chunk.len() {
            clock.enqueued[chunk_no * 10_000 + i].store(now, Ordering::Relaxed);
        }
        if !coordinator.enqueue("bench", chunk.to_vec()).await {
            bail!("the coordinator is not leading");
        }
    }
    wait_count(&clock, args.keys, Duration::from_secs(120))
        .await
        .context("burst phase")?;
    let elapsed = start.elapsed().as_secs_f64();
    let keys_per_sec = args.keys as f64 / elapsed;
    let burst = clock.latencies_ms(0..args.keys);

    // Paced: half that rate, one batch per millisecond, on fresh keys (the same numbers, reset).
    clock.reset();
    let rate = keys_per_sec / 2.0;
    let paced_keys = args.keys.min((rate * 2.0) as usize).max(1000);
    let per_tick = ((rate / 1000.0).ceil() as usize).max(1);
    let mut ticker = tokio::time::interval(Duration::from_millis(1));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut next = 0;
    let paced_start = Instant::now();
    while next < paced_keys {
        ticker.tick().await;
        let end = (next + per_tick).min(paced_keys);
        let now = clock.now();
        for i in next..end {
            clock.enqueued[i].store(now, Ordering::Relaxed);
        }
        coordinator
            .enqueue("bench", (next..end).map(|i| format!("b/{i}")).collect())
            .await;
        next = end;
    }
    wait_count(&clock, paced_keys, Duration::from_secs(120))
        .await
        .context("paced phase")?;
    let paced_rate = paced_keys as f64 / paced_start.elapsed().as_secs_f64();
    let paced = clock.latencies_ms(0..paced_keys);

    running.shutdown().await;
    Ok(RunResult {
        keys_per_sec,
        burst_p50_ms: percentile(&burst, 0.50),
        burst_p99_ms: percentile(&burst, 0.99),
        paced_rate,
        paced_p50_ms: percentile(&paced, 0.50),
        paced_p99_ms: percentile(&paced, 0.99),
    })
}

async fn wait_count(clock: &Clock, n: usize, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    while clock.count.load(Ordering::Relaxed) < n {
        if Instant::now() > deadline {
            bail!(
                "only {} of {n} keys reconciled within {timeout:?}",
                clock.count.load(Ordering::Relaxed)
            );
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}
