//! `flotilla bench scaleout`: what adding workers buys for an I/O-bound controller. Each reconcile of a
//! synthetic controller awaits a fixed delay, like a cloud API call, so a worker's throughput is bound
//! by its concurrency, not by CPU; the fleet's throughput should then grow with the workers. The
//! benchmark runs an in-process fleet over N keys with each worker count, prints keys/s and the
//! speed-up over one worker, and draws both in an SVG plot.

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use flotilla_sdk::{Action, Controller};
use k8s_openapi::api::core::v1::ConfigMap;
use plotters::prelude::*;
use serde_json::json;

use super::in_process::{Backend, InProcessFleet};
use super::{median, write_json};

/// Flags of `flotilla bench scaleout`.
#[derive(clap::Args, Debug)]
pub struct ScaleoutArgs {
    /// Keys per run, each reconciled once.
    #[arg(long, default_value_t = 20_000)]
    keys: usize,
    /// How long every reconcile awaits.
    #[arg(long, default_value = "20ms", value_parser = flotilla_common::parse_duration)]
    reconcile: Duration,
    /// Concurrent reconciles per worker.
    #[arg(long, default_value_t = 10)]
    concurrency: u32,
    /// Worker counts to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    workers: Vec<usize>,
    /// Runs per worker count; the report gives medians.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Where to write the JSON result.
    #[arg(long, default_value = "benchmarks/scaleout.json")]
    output: PathBuf,
    /// Where to draw the plot.
    #[arg(long, default_value = "benchmarks/scaleout.svg")]
    plot: PathBuf,
}

/// Runs `flotilla bench scaleout`.
pub(super) async fn run(args: ScaleoutArgs) -> anyhow::Result<()> {
    if args.workers.is_empty() || args.workers.contains(&0) {
        bail!("--workers needs positive counts");
    }
    let backend = Backend::start().await?;
    let mut points = Vec::new();
    for &workers in &args.workers {
        let mut runs = Vec::new();
        for run in 0..args.runs {
            let keys_per_sec = one_run(&args, &backend, workers, run)
                .await
                .with_context(|| format!("{workers} worker(s), run {run}"))?;
            eprintln!("workers={workers} run={run}: {keys_per_sec:.0} keys/s");
            runs.push(keys_per_sec);
        }
        points.push((workers, median(runs.clone()), runs));
    }
    backend.shutdown().await;

    // One worker's throughput, measured or (when 1 is not among the counts) not available.
    let one = points.iter().find(|(w, ..)| *w == 1).map(|(_, m, _)| *m);
    let ideal_per_worker =
        f64::from(args.concurrency) / args.reconcile.as_secs_f64().max(f64::EPSILON);
    let results: Vec<_> = points
        .iter()
        .map(|(workers, med, runs)| {
            json!({
                "workers": workers,
                "runs": runs,
                "median_keys_per_sec": med,
                "speedup_over_one": one.map(|o| med / o),
                "efficiency": one.map(|o| med / (o * *workers as f64)),
            })
        })
        .collect();
    write_json(
        &args.output,
        &json!({
            "benchmark": "scaleout",
            "keys": args.keys,
            "reconcile_ms": args.reconcile.as_secs_f64() * 1000.0,
            "concurrency_per_worker": args.concurrency,
            "ideal_keys_per_sec_per_worker": ideal_per_worker,
            "results": results,
        }),
    )?;
    draw(&args.plot, &points, one, ideal_per_worker)?;
    println!("| workers | keys/s (median) | × one worker | per-worker efficiency |");
    println!("|---:|---:|---:|---:|");
    for (workers, med, _) in &points {
        let speedup = one.map_or(f64::NAN, |o| med / o);
        println!(
            "| {workers} | {med:.0} | {speedup:.2} | {:.2} |",
            speedup / *workers as f64
        );
    }
    println!(
        "\nideal: {ideal_per_worker:.0} keys/s per worker ({} concurrent × {:?}); JSON written to {}, plot to {}",
        args.concurrency,
        args.reconcile,
        args.output.display(),
        args.plot.display()
    );
    Ok(())
}

/// One fleet of `workers` workers reconciles every key once; returns keys per second.
async fn one_run(
    args: &ScaleoutArgs,
    backend: &Backend,
    workers: usize,
    run: usize,
) -> anyhow::Result<f64> {
    let finished = Arc::new(AtomicUsize::new(0));
    let (concurrency, delay) = (args.concurrency, args.reconcile);
    let fleet = InProcessFleet::start(
        backend,
        &format!("scaleout-{workers}-{run}"),
        workers,
        "scaleout",
        |_| {
            let finished = finished.clone();
            Controller::<ConfigMap>::new("scaleout")
                .concurrency(concurrency)
                .reconcile(move |_request, _ctx| {
                    let finished = finished.clone();
                    async move {
                        tokio::time::sleep(delay).await;
                        finished.fetch_add(1, Ordering::Relaxed);
                        Ok::<_, Infallible>(Action::await_change())
                    }
                })
                .into()
        },
    )
    .await?;
    let keys: Vec<String> = (0..args.keys).map(|i| format!("s/{i}")).collect();
    let start = Instant::now();
    for chunk in keys.chunks(10_000) {
        if !fleet.coordinator.enqueue("scaleout", chunk.to_vec()).await {
            bail!("the coordinator is not leading");
        }
    }
    let bound = Duration::from_secs(600);
    while finished.load(Ordering::Relaxed) < args.keys {
        if start.elapsed() > bound {
            bail!(
                "only {} of {} keys reconciled within {bound:?}",
                finished.load(Ordering::Relaxed),
                args.keys
            );
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let keys_per_sec = args.keys as f64 / start.elapsed().as_secs_f64();
    fleet.shutdown().await;
    Ok(keys_per_sec)
}

/// Keys/s against workers, with the line a perfect scale-out from one worker would draw.
fn draw(
    path: &Path,
    points: &[(usize, f64, Vec<f64>)],
    one: Option<f64>,
    ideal_per_worker: f64,
) -> anyhow::Result<()> {
    if let Some(parent) = path.parent()
        && !parent.as_os_str().is_empty()
    {
        std::fs::create_dir_all(parent)?;
    }
    let max_workers = points.iter().map(|(w, ..)| *w).max().unwrap_or(1) as f64;
    let max_rate = points
        .iter()
        .map(|(_, m, _)| *m)
        .chain(one.map(|o| o * max_workers))
        .fold(ideal_per_worker, f64::max);
    let root = SVGBackend::new(path, (720, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_error)?;
    let mut chart = ChartBuilder::on(&root)
        .caption("flotilla bench scaleout", ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..max_workers * 1.05, 0.0..max_rate * 1.1)
        .map_err(plot_error)?;
    chart
        .configure_mesh()
        .x_desc("workers")
        .y_desc("keys/s")
        .draw()
        .map_err(plot_error)?;
    if let Some(one) = one {
        chart
            .draw_series(LineSeries::new(
                [(0.0, 0.0), (max_workers, one * max_workers)],
                BLACK.mix(0.3),
            ))
            .map_err(plot_error)?
            .label("N × one worker")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK.mix(0.3)));
    }
    let measured: Vec<(f64, f64)> = points.iter().map(|(w, m, _)| (*w as f64, *m)).collect();
    chart
        .draw_series(LineSeries::new(measured.clone(), BLUE.stroke_width(2)))
        .map_err(plot_error)?
        .label("measured (median)")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLUE.stroke_width(2)));
    chart
        .draw_series(measured.iter().map(|p| Circle::new(*p, 4, BLUE.filled())))
        .map_err(plot_error)?;
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(plot_error)?;
    root.present().map_err(plot_error)?;
    Ok(())
}

fn plot_error(err: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("cannot draw the plot: {err}")
}
