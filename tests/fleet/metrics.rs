//! Every process's `/metrics` after a short run of a real fleet (a coordinator and two workers running the
//! built-in controllers, rolling out a Deployment): the text parses as Prometheus text line by line, each
//! family the issue names is there with its labels, and the Grafana dashboard
//! (`deploy/grafana/flotilla.json`) names only metrics that the scrapes expose.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use prometheus_parse::{LineInfo, Scrape};
use serde_json::{Value, json};

use crate::support::cluster::TestCluster;
use crate::support::fleet::{Fleet, Proc};
use crate::support::namespace::unique_namespace;
use crate::support::wait::wait_for;

/// Families every process exposes: (sample name, its labels).
const EVERY_PROCESS: &[(&str, &[&str])] = &[
    ("flotilla_lease_renew_duration_seconds", &[]),
    ("flotilla_lease_renew_failures_total", &[]),
    ("process_cpu_seconds_total", &[]),
    ("process_resident_memory_bytes", &[]),
    ("process_open_fds", &[]),
];

/// Families of the leading coordinator (histograms by their base name).
const COORDINATOR: &[(&str, &[&str])] = &[
    ("workqueue_depth", &["name"]),
    ("workqueue_adds_total", &["name"]),
    ("workqueue_queue_duration_seconds", &["name"]),
    ("workqueue_work_duration_seconds", &["name"]),
    ("workqueue_retries_total", &["name"]),
    ("workqueue_unfinished_work_seconds", &["name"]),
    ("workqueue_longest_running_processor_seconds", &["name"]),
    ("flotilla_dispatch_assigned_total", &["controller"]),
    ("flotilla_dispatch_done_total", &["controller", "outcome"]),
    ("flotilla_dispatch_in_flight", &["worker"]),
    ("flotilla_dispatch_credits", &["worker"]),
    ("flotilla_informer_lists_total", &["kind"]),
    ("flotilla_informer_relists_total", &["kind"]),
    ("flotilla_informer_watches_total", &["kind"]),
    ("flotilla_informer_events_total", &["kind", "event"]),
    ("flotilla_informer_objects", &["kind"]),
    ("flotilla_shard_moves_total", &[]),
    ("flotilla_leader_term", &[]),
    ("flotilla_is_leader", &[]),
    ("flotilla_leader_terms_started_total", &[]),
    ("flotilla_leader_terms_ended_total", &["reason"]),
    ("leader_election_master_status", &["name"]),
    ("flotilla_read_your_writes_holds", &[]),
    ("flotilla_read_your_writes_held_total", &[]),
    ("flotilla_read_your_writes_released_total", &[]),
    ("flotilla_read_your_writes_expired_total", &[]),
    ("rest_client_requests_total", &["code", "method"]),
    (
        "flotilla_kube_requests_total",
        &["verb", "resource", "code"],
    ),
];

/// Families of a worker.
const WORKER: &[(&str, &[&str])] = &[
    (
        "flotilla_worker_reconciles_total",
        &["controller", "outcome"],
    ),
    ("flotilla_worker_reconcile_errors_total", &["controller"]),
    (
        "flotilla_worker_reconcile_duration_seconds",
        &["controller"],
    ),
    ("flotilla_worker_reconciles_in_flight", &["controller"]),
    ("rest_client_requests_total", &["code", "method"]),
    (
        "flotilla_kube_requests_total",
        &["verb", "resource", "code"],
    ),
    ("rest_client_rate_limiter_duration_seconds", &["controller"]),
];

/// Checks that every line of `text` is Prometheus (OpenMetrics) text: a HELP, TYPE or UNIT comment, a
/// sample, or the closing `# EOF`; returns the sample names (histogram series as `_bucket`, `_sum`,
/// `_count`) and the parsed samples.
fn parse_strictly(who: &str, text: &str) -> (BTreeSet<String>, Scrape) {
    let mut names = BTreeSet::new();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.last(), Some(&"# EOF"), "{who}: no closing # EOF");
    for line in &lines[..lines.len() - 1] {
        match LineInfo::parse(line) {
            LineInfo::Sample { metric_name, .. } => {
                names.insert(metric_name.to_owned());
            }
            LineInfo::Doc { .. } | LineInfo::Type { .. } => {}
            _ if line.starts_with("# UNIT ") => {}
            _ => panic!("{who}: not Prometheus text: {line:?}"),
        }
    }
    let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_owned())))
        .unwrap_or_else(|e| panic!("{who}: {e}"));
    (names, scrape)
}

/// The families of `expected` that `scrape` lacks, or has without one of their labels.
fn missing(scrape: &Scrape, expected: &[(&str, &[&str])]) -> Vec<String> {
    expected
        .iter()
        .filter(|(name, labels)| {
            !scrape
                .samples
                .iter()
                .any(|s| s.metric == *name && labels.iter().all(|l| s.labels.get(l).is_some()))
        })
        .map(|(name, labels)| format!("{name}{{{}}}", labels.join(",")))
        .collect()
}

/// The metric names a PromQL expression selects: identifiers outside strings, label matchers, range
/// brackets and grouping clauses that are neither functions nor keywords.
fn metric_names(expr: &str) -> BTreeSet<String> {
    const KEYWORDS: &[&str] = &[
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "bool",
        "offset",
        "and",
        "or",
        "unless",
        "inf",
        "nan",
    ];
    // Drop what cannot hold a metric name: strings, `{…}`, `[…]`.
    let mut plain = String::new();
    let mut depth = (0, 0, false);
    for c in expr.chars() {
        match c {
            '"' => depth.2 = !depth.2,
            '{' if !depth.2 => depth.0 += 1,
            '}' if !depth.2 => depth.0 -= 1,
            '[' if !depth.2 => depth.1 += 1,
            ']' if !depth.2 => depth.1 -= 1,
            _ if depth.0 == 0 && depth.1 == 0 && !depth.2 => plain.push(c),
            _ => {}
        }
        if matches!(c, '{' | '[' | '"') {
            plain.push(' ');
        }
    }
    let tokens: Vec<(String, char)> = {
        let chars: Vec<char> = plain.chars().collect();
        let mut tokens = Vec::new();
        let mut i = 0;
        while i < chars.len() {
            if chars[i].is_ascii_alphabetic() || chars[i] == '_' || chars[i] == ':' {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
                {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let next = chars[i..].iter().find(|c| !c.is_whitespace()).copied();
                tokens.push((word, next.unwrap_or(' ')));
            } else if chars[i].is_ascii_digit() || chars[i] == '.' {
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                    i += 1;
                }
            } else {
                i += 1;
            }
        }
        tokens
    };
    // Aggregation operators may be followed by their grouping (`sum by (…) (…)`), not by `(`.
    const AGGREGATIONS: &[&str] = &[
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
        "limitk",
        "limit_ratio",
    ];
    let mut names = BTreeSet::new();
    let mut skip_group = false;
    for (word, next) in tokens {
        if skip_group {
            // Inside `by (…)` / `without (…)`: label names up to the closing parenthesis.
            if next == ')' {
                skip_group = false;
            }
            continue;
        }
        if KEYWORDS.contains(&word.as_str()) {
            skip_group = next == '(' && !matches!(word.as_str(), "and" | "or" | "unless");
            continue;
        }
        if next == '(' || AGGREGATIONS.contains(&word.as_str()) {
            continue; // a function or an aggregation
        }
        names.insert(word);
    }
    names
}

/// Every PromQL expression of the dashboard: the panels' targets and the query variables.
fn dashboard_expressions(dashboard: &Value) -> Vec<String> {
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().into_iter().flatten() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = target["expr"].as_str() {
                exprs.push(expr.to_owned());
            }
        }
    }
    for variable in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if variable["type"] == "query"
            && let Some(query) = variable["query"].as_str()
        {
            // label_values(metric, label): the metric is the PromQL part.
            let inner = query
                .strip_prefix("label_values(")
                .and_then(|q| q.split(',').next())
                .unwrap_or(query);
            exprs.push(inner.to_owned());
        }
    }
    exprs
}

async fn scrape(proc: &Proc) -> String {
    proc.metrics_text().await
}

#[test]
fn promql_metric_names_leave_out_functions_labels_ranges_and_groupings() {
    let names = metric_names(
        r#"histogram_quantile(0.99, sum by (name, le) (rate(workqueue_queue_duration_seconds_bucket{job=~"$job", x="a b"}[$__rate_interval]))) / on(instance) group_left max without (pid) (process_open_fds) > bool 2"#,
    );
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        [
            "process_open_fds",
            "workqueue_queue_duration_seconds_bucket"
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn every_process_serves_the_fleet_metrics_as_prometheus_text_and_the_dashboard_uses_only_those()
 {
    let cluster = TestCluster::start().await;
    let client = cluster.client();
    let (_fleet, procs) = Fleet::of_controllers(&cluster, "*", 2).await;
    let ns = unique_namespace(&client, "metrics").await;

    // A short run: Deployments of two replicas make the deployment and replicaset controllers
    // reconcile, write (read-your-writes holds) and call the API. Eight of them, so that both workers
    // get keys that call the API whatever shards the random namespace's keys hash to (with one, a CI
    // run gave every such key to one worker, and the other had no API families to show).
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    for i in 0..8 {
        let app = format!("web-{i}");
        let deployment = json!({
            "metadata": {"name": app},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": app}},
                "template": {
                    "metadata": {"labels": {"app": app}},
                    "spec": {"containers": [{"name": "web", "image": "nginx"}]},
                },
            },
        });
        deployments
            .create(
                &PostParams::default(),
                &serde_json::from_value(deployment).unwrap(),
            )
            .await
            .unwrap();
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    wait_for(
        Duration::from_secs(60),
        "the Deployments' sixteen pods",
        || async {
            let list = pods.list(&ListParams::default()).await.ok()?;
            (list.items.len() == 16).then_some(())
        },
    )
    .await;

    let (coordinator, workers) = procs.split_first().unwrap();
    let mut exposed = BTreeSet::new();
    let mut report = BTreeMap::new();
    // The per-worker gauges are published on the dispatcher's tick, the lease histograms on the first
    // renewal: scrape until every family is there, then assert with what is still missing.
    let coordinator_text = wait_for(
        Duration::from_secs(30),
        "the coordinator's families",
        || async {
            let text = scrape(coordinator).await;
            let (_, parsed) = parse_strictly("c0", &text);
            let gaps = [
                missing(&parsed, COORDINATOR),
                missing(&parsed, EVERY_PROCESS),
            ]
            .concat();
            gaps.is_empty().then_some(text)
        },
    )
    .await;
    let (names, _) = parse_strictly("c0", &coordinator_text);
    exposed.extend(names);
    for (i, worker) in workers.iter().enumerate() {
        let who = format!("w{i}");
        let text = wait_for(
            Duration::from_secs(30),
            &format!("{who}'s families"),
            || async {
                let text = scrape(worker).await;
                let (_, parsed) = parse_strictly(&who, &text);
                let gaps = [missing(&parsed, WORKER), missing(&parsed, EVERY_PROCESS)].concat();
                if gaps.is_empty() {
                    Some(text)
                } else {
                    eprintln!("{who} still lacks {gaps:?}");
                    None
                }
            },
        )
        .await;
        let (names, _) = parse_strictly(&who, &text);
        report.insert(who, names.len());
        exposed.extend(names);
    }

    let dashboard: Value =
        serde_json::from_str(include_str!("../../deploy/grafana/flotilla.json")).unwrap();
    let expressions = dashboard_expressions(&dashboard);
    assert!(expressions.len() >= 20, "the dashboard lost its panels");
    let mut unknown = Vec::new();
    for expr in &expressions {
        let names = metric_names(expr);
        assert!(!names.is_empty(), "no metric in {expr:?}");
        unknown.extend(
            names
                .into_iter()
                .filter(|n| !exposed.contains(n))
                .map(|n| format!("{n} (in {expr})")),
        );
    }
    assert!(
        unknown.is_empty(),
        "the dashboard names metrics no process exposes: {unknown:#?}\nexposed: {exposed:?} ({report:?})"
    );
}
