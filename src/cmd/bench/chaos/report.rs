//! What `bench chaos` reports: the faults survived, the invariants checked and their violations, the
//! times, as JSON and as the `## Chaos` section of RELIABILITY.md (the section is replaced, the rest
//! of the file kept).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use serde::Serialize;

/// One run's result.
#[derive(Debug, Clone, Serialize)]
pub(super) struct ChaosReport {
    pub seed: u64,
    pub command: String,
    pub machine: String,
    pub date: String,
    pub deployments: usize,
    pub replicas: i32,
    pub coordinators: usize,
    pub workers: usize,
    pub duration_seconds: f64,
    pub faults: Faults,
    pub times: Times,
    pub invariants: Vec<Invariant>,
    /// Coordinator processes started, the first ones included.
    pub coordinator_lives: usize,
    /// Worker processes started, the first ones included.
    pub worker_lives: usize,
    /// Fleet processes that exited without being killed, each with its last log line.
    pub unexpected_exits: Vec<String>,
}

/// The faults dealt, each survived when the run converged with no violation.
#[derive(Debug, Clone, Default, Serialize)]
pub(super) struct Faults {
    pub worker_kills: usize,
    pub leader_kills: usize,
    /// Leader kills planned when no coordinator led (skipped).
    pub leader_kills_skipped: usize,
    pub cuts: usize,
    /// Cuts by link kind (`worker↔etcd` …).
    pub cuts_by_link: BTreeMap<String, usize>,
    pub cut_seconds: f64,
    pub etcd_restarts: usize,
    pub etcd_down_seconds: Vec<f64>,
}

/// When things happened, seconds from the first create.
#[derive(Debug, Clone, Default, Serialize)]
pub(super) struct Times {
    /// Every Deployment rolled out the first time (`None`: not by the template change).
    pub first_rollout_seconds: Option<f64>,
    /// The template change of every Deployment written.
    pub template_change_seconds: f64,
    /// The last fault healed.
    pub chaos_end_seconds: f64,
    /// Everything converged.
    pub converged_seconds: f64,
    /// From the last fault healed to converged.
    pub converge_after_chaos_seconds: f64,
}

/// One invariant: what was checked, and what broke it.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Invariant {
    pub name: String,
    /// What was checked, e.g. `300 Deployments, 900 pods`.
    pub checked: String,
    pub violations: u64,
    /// The first violations, described.
    pub examples: Vec<String>,
}

impl ChaosReport {
    /// Violations of every invariant, summed.
    pub fn violations(&self) -> u64 {
        self.invariants.iter().map(|i| i.violations).sum()
    }

    /// The human report: the tables of [`ChaosReport::markdown`].
    pub fn print(&self) {
        println!("{}", self.markdown());
        for i in self.invariants.iter().filter(|i| i.violations > 0) {
            eprintln!("{}: {} violations, first ones:", i.name, i.violations);
            for e in &i.examples {
                eprintln!("  {e}");
            }
        }
    }

    /// The body of RELIABILITY.md's `## Chaos` section.
    pub fn markdown(&self) -> String {
        let f = &self.faults;
        let t = &self.times;
        let mut out = format!(
            "`{}` — seed {}, {} on {}.\n\n\
             {} Deployments × {} replicas on simulated nodes, rolled out twice (created, then, half-way \
             through the faults, a template change) by {} coordinators and {} workers running the built-in \
             `deployment` and `replicaset` controllers, while for {:.0} s every fleet process's links ran \
             through a cuttable proxy and faults struck on the seeded schedule. {}\n\n",
            self.command,
            self.seed,
            self.date,
            self.machine,
            self.deployments,
            self.replicas,
            self.coordinators,
            self.workers,
            self.duration_seconds,
            match self.violations() {
                0 => "The fleet converged with no violation: every fault was survived.".to_owned(),
                n => format!("**{n} violations** (below)."),
            },
        );
        out.push_str("| fault | dealt |\n|---|---:|\n");
        out.push_str(&format!(
            "| worker killed (`kill -9`) and restarted | {} |\n",
            f.worker_kills
        ));
        out.push_str(&format!(
            "| leader killed (`kill -9`) and restarted | {}{} |\n",
            f.leader_kills,
            if f.leader_kills_skipped > 0 {
                format!(" ({} found no leader)", f.leader_kills_skipped)
            } else {
                String::new()
            }
        ));
        let by_link: Vec<String> = f
            .cuts_by_link
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        out.push_str(&format!(
            "| link cut for {:.0} s ({}) | {} |\n",
            f.cut_seconds,
            by_link.join(", "),
            f.cuts
        ));
        let down: Vec<String> = f
            .etcd_down_seconds
            .iter()
            .map(|s| format!("{s:.1} s"))
            .collect();
        out.push_str(&format!(
            "| etcd killed and restarted on its data (down {}) | {} |\n",
            if down.is_empty() {
                "—".to_owned()
            } else {
                down.join(", ")
            },
            f.etcd_restarts
        ));
        out.push_str("\n| invariant | checked | violations |\n|---|---|---:|\n");
        for i in &self.invariants {
            out.push_str(&format!(
                "| {} | {} | {} |\n",
                i.name, i.checked, i.violations
            ));
        }
        for i in self.invariants.iter().filter(|i| i.violations > 0) {
            out.push_str(&format!("\n{}, the first violations:\n", i.name));
            for e in i.examples.iter().take(5) {
                out.push_str(&format!("- {e}\n"));
            }
        }
        let first = t
            .first_rollout_seconds
            .map_or("not by the template change".to_owned(), |s| {
                format!("{s:.1} s")
            });
        out.push_str(&format!(
            "\nFirst rollout complete: {first}; template change written at {:.1} s; the last fault healed \
             at {:.1} s; everything converged at {:.1} s, {:.1} s after the chaos ended.\n",
            t.template_change_seconds,
            t.chaos_end_seconds,
            t.converged_seconds,
            t.converge_after_chaos_seconds,
        ));
        if !self.unexpected_exits.is_empty() {
            let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
            for exit in &self.unexpected_exits {
                *reasons.entry(exit_reason(exit)).or_default() += 1;
            }
            let reasons: Vec<String> = reasons
                .iter()
                .map(|(reason, n)| format!("{n} × “{reason}”"))
                .collect();
            out.push_str(&format!(
                "\n{} processes exited without being killed and were started again {} s later, as a \
                 supervisor would: {}.\n",
                self.unexpected_exits.len(),
                super::fleet::RESTART_BACKOFF.as_secs(),
                reasons.join(", ")
            ));
        }
        out
    }
}

/// Why a process exited, from its exit's description (`… exited …: <last log line>`): the last log
/// line's error without its details, e.g. `cannot reach etcd`.
fn exit_reason(exit: &str) -> String {
    let last = exit.split_once(".log: ").map_or(exit, |(_, line)| line);
    let error = last.split_once("error: ").map_or(last, |(_, e)| e);
    let end = [" at ", ": "]
        .iter()
        .filter_map(|sep| error.find(sep))
        .min()
        .unwrap_or(error.len());
    error[..end].trim().to_owned()
}

/// Replaces the body of `## Chaos` in the Markdown file `path` with `body` (appending the section
/// when there is none, creating the file when there is no file).
///
/// # Errors
/// When the file cannot be read or written.
pub(super) fn write_section(path: &Path, body: &str) -> anyhow::Result<()> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(err) => return Err(err).with_context(|| format!("cannot read {}", path.display())),
    };
    std::fs::write(path, replace_section(&text, "## Chaos", body))
        .with_context(|| format!("cannot write {}", path.display()))
}

/// `text` with the body of its `heading` section (up to the next `## ` heading) replaced by `body`.
fn replace_section(text: &str, heading: &str, body: &str) -> String {
    let section = format!("{heading}\n\n{}\n", body.trim_end());
    let start = text
        .match_indices(heading)
        .find(|(i, _)| {
            (*i == 0 || text[..*i].ends_with('\n'))
                && text[i + heading.len()..].starts_with(['\n', '\r'])
        })
        .map(|(i, _)| i);
    let Some(start) = start else {
        let sep = if text.is_empty() || text.ends_with("\n\n") {
            ""
        } else if text.ends_with('\n') {
            "\n"
        } else {
            "\n\n"
        };
        return format!("{text}{sep}{section}");
    };
    let after = start + heading.len();
    let end = text[after..]
        .find("\n## ")
        .map_or(text.len(), |i| after + i + 1);
    let rest = &text[end..];
    let sep = if rest.is_empty() { "" } else { "\n" };
    format!("{}{section}{sep}{rest}", &text[..start])
}

/// `uname -srm` and the CPU model with its core count, e.g. `Linux 6.1 x86_64, 2 × AMD EPYC …`.
pub(super) fn machine() -> String {
    let uname = std::process::Command::new("uname")
        .arg("-srm")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, m)| m.trim().to_owned())
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    format!("{uname}, {cores} × {model}")
}

/// The date and time now, UTC (`date -u`).
pub(super) fn now_utc() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_section_is_replaced_up_to_the_next_heading_and_the_rest_kept() {
        let text =
            "# R\n\nintro\n\n## Partitions\n\np\n\n## Chaos\n\n<!-- old -->\n\n## Fuzzing\n\nf\n";
        let out = replace_section(text, "## Chaos", "new body\n");
        assert_eq!(
            out,
            "# R\n\nintro\n\n## Partitions\n\np\n\n## Chaos\n\nnew body\n\n## Fuzzing\n\nf\n"
        );
        assert_eq!(replace_section(&out, "## Chaos", "new body"), out);
    }

    #[test]
    fn an_exit_reason_is_the_error_without_its_details() {
        let exit = "worker-0-5 exited (exit status: 1); see /tmp/x/worker-0-5.log: error: cannot reach \
                    etcd at http://127.0.0.1:1: grpc request error";
        assert_eq!(exit_reason(exit), "cannot reach etcd");
        assert_eq!(exit_reason("x exited; see /l.log: panicked"), "panicked");
    }

    #[test]
    fn a_missing_section_is_appended_and_a_last_section_replaced() {
        assert_eq!(
            replace_section("# R\n", "## Chaos", "b"),
            "# R\n\n## Chaos\n\nb\n"
        );
        assert_eq!(
            replace_section("# R\n\n## Chaos\n\nold\n", "## Chaos", "b"),
            "# R\n\n## Chaos\n\nb\n"
        );
        assert_eq!(
            replace_section("## Chaos tests\n", "## Chaos", "b"),
            "## Chaos tests\n\n## Chaos\n\nb\n",
            "only the heading itself matches"
        );
    }
}
