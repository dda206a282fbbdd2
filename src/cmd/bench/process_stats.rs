//! What the benchmarks read of a running process: its CPU time and peak memory from `/proc`, and
//! counters from its `/metrics`.

use std::time::Duration;

use anyhow::{Context, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::cmd::procs::Child;

/// Clock ticks per second of `/proc/<pid>/stat`'s times (`getconf CLK_TCK`; 100 on Linux).
const CLOCK_TICKS_PER_SECOND: f64 = 100.0;

/// User plus system CPU seconds a process has used so far.
///
/// # Errors
/// When its `/proc/<pid>/stat` cannot be read or parsed.
pub(super) fn cpu_seconds(child: &Child) -> anyhow::Result<f64> {
    let path = format!("/proc/{}/stat", child.pid());
    let stat = std::fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
    cpu_ticks(&stat)
        .map(|ticks| ticks as f64 / CLOCK_TICKS_PER_SECOND)
        .with_context(|| format!("cannot parse {path}"))
}

/// utime + stime of a `/proc/<pid>/stat` line. The command name (field 2) may hold spaces and
/// parentheses, so fields are counted after its last `)`.
fn cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    // After the name: state is field 3, utime field 14 and stime field 15.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// The samples of one metric in a Prometheus text exposition: labels in order, and the value.
pub(super) fn samples(text: &str, metric: &str) -> Vec<(Vec<(String, String)>, f64)> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let rest = line.strip_prefix(metric)?;
            let (labels, value) = match rest.strip_prefix('{') {
                Some(rest) => {
                    let (labels, value) = rest.split_once('}')?;
                    (parse_labels(labels), value)
                }
                None if rest.starts_with(' ') => (Vec::new(), rest),
                None => return None,
            };
            let value = value.split_whitespace().next()?.parse().ok()?;
            Some((labels, value))
        })
        .collect()
}

/// `a="x",b="y"` → [(a, x), (b, y)]. Label values here never hold quotes or commas.
fn parse_labels(labels: &str) -> Vec<(String, String)> {
    labels
        .split(',')
        .filter_map(|pair| {
            let (name, value) = pair.split_once('=')?;
            Some((
                name.trim().to_owned(),
                value.trim().trim_matches('"').to_owned(),
            ))
        })
        .collect()
}

/// A memory line of a `/proc/<pid>/status` (`VmHWM:`, the peak resident set size, or `VmRSS:`, the
/// current one), in KiB.
fn status_kib(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

pub(super) fn peak_rss_mib(child: &Child) -> anyhow::Result<f64> {
    status_mib(child, "VmHWM:")
}

/// The current resident set size of a process (`VmRSS`), in MiB.
///
/// # Errors
/// When its `/proc/<pid>/status` cannot be read or lacks the line.
pub(super) fn rss_mib(child: &Child) -> anyhow::Result<f64> {
    status_mib(child, "VmRSS:")
}

fn status_mib(child: &Child, field: &str) -> anyhow::Result<f64> {
    let path = format!("/proc/{}/status", child.pid());
    let status = std::fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
    let kib = status_kib(&status, field).with_context(|| format!("no {field} in {path}"))?;
    Ok(kib as f64 / 1024.0)
}

/// The `/metrics` text of a process that logged its ops address as `metrics=ADDR` in its start line.
pub(super) async fn fetch_metrics(child: &Child) -> anyhow::Result<String> {
    let log = child.log_text();
    let addr = log
        .lines()
        .filter(|l| l.contains(" started"))
        .find_map(|l| {
            Some(
                l[l.find("metrics=")? + "metrics=".len()..]
                    .split_whitespace()
                    .next()?
                    .to_owned(),
            )
        })
        .with_context(|| format!("{} did not log its metrics address", child.name()))?;
    let mut stream = tokio::net::TcpStream::connect(&addr)
        .await
        .with_context(|| format!("cannot reach {}'s metrics at {addr}", child.name()))?;
    // HTTP/1.0: the server closes the connection after one plain (not chunked) response.
    stream
        .write_all(format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await?;
    let mut response = String::new();
    tokio::time::timeout(
        Duration::from_secs(10),
        stream.read_to_string(&mut response),
    )
    .await
    .context("metrics request timed out")??;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .context("malformed metrics response")?;
    if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
        bail!(
            "{}'s /metrics answered {}",
            child.name(),
            head.lines().next().unwrap_or_default()
        );
    }
    Ok(body.to_owned())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_are_utime_plus_stime_even_with_a_name_holding_spaces_and_parentheses() {
        let stat = "4242 (flo (tilla) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 1234 56 0 0 20 0 3 0 99 1000 200";
        assert_eq!(cpu_ticks(stat), Some(1234 + 56));
        assert_eq!(cpu_ticks("4242 (flotilla) S 1"), None);
    }

    #[test]
    fn peak_rss_is_read_from_the_vm_hwm_line() {
        let status =
            "Name:\tflotilla\nVmPeak:\t  900000 kB\nVmHWM:\t   51200 kB\nVmRSS:\t   40000 kB\n";
        assert_eq!(status_kib(status, "VmHWM:"), Some(51_200));
        assert_eq!(status_kib(status, "VmRSS:"), Some(40_000));
        assert_eq!(status_kib("Name:\tkthreadd\n", "VmHWM:"), None);
    }

    #[test]
    fn counter_samples_are_read_with_their_labels_and_other_metrics_are_ignored() {
        let text = "\
# HELP rest_client_requests Kubernetes API requests sent.
# TYPE rest_client_requests counter
rest_client_requests_total{code=\"200\",method=\"GET\"} 12
rest_client_requests_total{code=\"409\",method=\"PUT\"} 3
rest_client_requests_total_other 99
flotilla_worker_fenced_total 1
# EOF
";
        let s = samples(text, "rest_client_requests_total");
        assert_eq!(s.len(), 2);
        assert_eq!(s.iter().map(|(_, v)| v).sum::<f64>(), 15.0);
        assert_eq!(
            s[1].0,
            vec![
                ("code".to_owned(), "409".to_owned()),
                ("method".to_owned(), "PUT".to_owned())
            ]
        );
        assert_eq!(samples("up 1\n", "up"), vec![(Vec::new(), 1.0)]);
    }
}
