//! `flotilla status`: the fleet as its leader sees it — leader and term, workers, queues, informers.

use std::time::Duration;

use anyhow::Context;
use flotilla_common::tls::{ClientTransport, TlsFlags};
use flotilla_common::{Election, EtcdClientConfig, EtcdFlags};
use flotilla_proto as proto;
use serde_json::json;

/// Flags of `flotilla status`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The fleet's etcd (--etcd-endpoints, TLS, user, --etcd-prefix), as its coordinators use it.
    #[command(flatten)]
    pub etcd: EtcdFlags,
    /// Fleet name.
    #[arg(long, default_value = "default")]
    pub fleet: String,
    /// Output: `text` (a table) or `json` (one object; scripts rely on its field names).
    #[arg(short = 'o', long, default_value = "text")]
    pub output: Output,
    /// Mutual TLS to the leader's Admin service (--tls-cert, --tls-key, --tls-client-ca,
    /// --tls-server-name: any client certificate of the coordinators' --tls-client-ca), or
    /// --insecure-plaintext for a plaintext fleet; one is required.
    #[command(flatten)]
    pub tls: TlsFlags,
    /// Keep a live view on the terminal, redrawn every `--interval`, until Ctrl-C.
    #[arg(long, short = 'w')]
    pub watch: bool,
    /// How often `--watch` redraws.
    #[arg(long, default_value = "1s", value_parser = flotilla_common::parse_duration)]
    pub interval: Duration,
}

/// Output formats.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum Output {
    /// Human-readable.
    Text,
    /// One JSON object.
    Json,
}

/// Prints the status of the fleet.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let etcd = args.etcd.client_config()?;
    let transport = args.tls.client()?;
    if args.watch {
        let fetch = || fetch_with(&etcd, &transport, &args.fleet);
        return super::status_watch::run(&args.fleet, args.interval, fetch).await;
    }
    let status = fetch_with(&etcd, &transport, &args.fleet).await?;
    match args.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&to_json(&status))?),
        Output::Text => print_text(&status),
    }
    Ok(())
}

/// Finds the leader in a plaintext etcd at `etcd_endpoints` (keys under `/flotilla`) and asks it for
/// its status: [`fetch_with`] for the local fleets of `up` and `bench`.
///
/// # Errors
/// When etcd cannot be reached, there is no leader, or the leader does not answer.
pub async fn fetch(
    etcd_endpoints: &[String],
    fleet: &str,
) -> anyhow::Result<proto::StatusResponse> {
    fetch_with(
        &EtcdClientConfig::plaintext(etcd_endpoints.to_vec()),
        &ClientTransport::Plaintext,
        fleet,
    )
    .await
}

/// Finds the leader in etcd and asks it for its status over `transport` (mutual TLS: the Admin service
/// asks only for a client certificate of the coordinators' `--tls-client-ca`, whatever it names).
///
/// # Errors
/// When etcd cannot be reached or refuses the client, there is no leader, or the leader does not
/// answer (or refuses the TLS handshake).
pub async fn fetch_with(
    etcd: &EtcdClientConfig,
    transport: &ClientTransport,
    fleet: &str,
) -> anyhow::Result<proto::StatusResponse> {
    let keys = etcd.fleet_keys(fleet);
    let etcd = etcd.connect(fleet).await?;
    let election = Election::new(etcd, keys.election());
    let leader = election
        .leader()
        .await?
        .with_context(|| format!("fleet {fleet:?} has no leader"))?;
    let endpoint =
        tonic::transport::Endpoint::from_shared(format!("http://{}", leader.info.address))?
            .connect_timeout(Duration::from_secs(3))
            .timeout(Duration::from_secs(5));
    let channel = transport
        .connect(endpoint)
        .await
        .with_context(|| format!("cannot reach the leader at {}", leader.info.address))?;
    let mut admin = proto::admin_client::AdminClient::new(channel);
    Ok(admin.status(proto::StatusRequest {}).await?.into_inner())
}

/// The JSON form: `leader.{id,address,term}`, `workers[].{id,shards,lacking,...}`,
/// `queues[].{controller,depth,...}`, `informers[].{kind,synced,unserved,objects}`,
/// `retired[].{controller,secondsAgo}`.
pub fn to_json(s: &proto::StatusResponse) -> serde_json::Value {
    json!({
        "leader": {"id": s.leader_id, "address": s.leader_address, "term": s.term},
        "shardCount": s.shard_count,
        "workers": s.workers.iter().map(|w| json!({
            "id": w.id, "connected": w.connected, "capacity": w.capacity, "inFlight": w.in_flight, "shards": w.shards,
            "lacking": w.lacking,
        })).collect::<Vec<_>>(),
        "queues": s.queues.iter().map(|q| json!({
            "controller": q.controller, "depth": q.depth, "processing": q.processing,
        })).collect::<Vec<_>>(),
        "informers": s.informers.iter().map(|i| json!({
            "kind": i.kind, "synced": i.synced, "unserved": i.unserved, "objects": i.objects,
        })).collect::<Vec<_>>(),
        "retired": s.retired.iter().map(|r| json!({
            "controller": r.controller, "secondsAgo": r.seconds_ago,
        })).collect::<Vec<_>>(),
    })
}

fn print_text(s: &proto::StatusResponse) {
    println!(
        "leader   {} at {} (term {}), {} shards",
        s.leader_id, s.leader_address, s.term, s.shard_count
    );
    println!("\nWORKER                           CONNECTED  CAPACITY  IN-FLIGHT  SHARDS  LACKING");
    for w in &s.workers {
        println!(
            "{:<32} {:<10} {:>8}  {:>9}  {:>6}  {}",
            w.id,
            w.connected,
            w.capacity,
            w.in_flight,
            w.shards,
            if w.lacking.is_empty() {
                "-".to_owned()
            } else {
                w.lacking.join(",")
            }
        );
    }
    println!("\nCONTROLLER                       DEPTH  PROCESSING");
    for q in &s.queues {
        println!("{:<32} {:>5}  {:>10}", q.controller, q.depth, q.processing);
    }
    println!("\nINFORMER                                  SYNCED  OBJECTS");
    for i in &s.informers {
        let synced = if i.unserved {
            "unserved"
        } else if i.synced {
            "true"
        } else {
            "false"
        };
        println!("{:<41} {:<7} {:>7}", i.kind, synced, i.objects);
    }
    if !s.retired.is_empty() {
        println!("\nRETIRED CONTROLLER               AGO");
        for r in &s.retired {
            println!("{:<32} {}s", r.controller, r.seconds_ago);
        }
    }
}
