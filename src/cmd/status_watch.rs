//! `flotilla status --watch`: the fleet as its leader sees it, redrawn in place every interval — leader and
//! term, each worker's connection, items in flight and shards, each controller's queue depth and
//! reconciles per second — until Ctrl-C (or SIGTERM), which restores the terminal and exits 0.
//!
//! On a terminal the view takes the alternate screen (the shell's scrollback is left as it was) and hides
//! the cursor; [`TerminalGuard`] gives both back on every way out, an error or a panic included. When
//! stdout is not a terminal each refresh is printed as plain text, one block after another.

use std::collections::HashMap;
use std::future::Future;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::{CellAlignment, ContentArrangement, Table};
use crossterm::{cursor, execute, queue, terminal};
use flotilla_proto as proto;

/// Below this many columns the terminal's width is taken as unknown.
const MIN_WIDTH: u16 = 20;

/// Reconciles per second per controller, from two readings of the leader's done counters.
#[derive(Debug, Default)]
pub struct Rates {
    last: Option<(Instant, String, HashMap<String, u64>)>,
    per_second: HashMap<String, f64>,
}

impl Rates {
    /// Takes a new reading taken at `at`. A new leader (its counters start again) or a counter that went
    /// backwards gives no rate until the next reading, rather than a negative one.
    pub fn observe(&mut self, at: Instant, status: &proto::StatusResponse) {
        let done: HashMap<String, u64> = status
            .queues
            .iter()
            .map(|q| (q.controller.clone(), q.done))
            .collect();
        self.per_second.clear();
        if let Some((then, leader, before)) = &self.last {
            let seconds = at.duration_since(*then).as_secs_f64();
            if *leader == status.leader_id && seconds > 0.0 {
                for (controller, now) in &done {
                    if let Some(before) = before.get(controller).filter(|b| *b <= now) {
                        self.per_second
                            .insert(controller.clone(), (now - before) as f64 / seconds);
                    }
                }
            }
        }
        self.last = Some((at, status.leader_id.clone(), done));
    }

    /// The rate of `controller`, when two readings of the same leader gave one.
    pub fn of(&self, controller: &str) -> Option<f64> {
        self.per_second.get(controller).copied()
    }
}

/// The view of one reading: a header line, the workers' table and the queues' table; `width` (the
/// terminal's width, when known) bounds the tables.
pub fn render(
    fleet: &str,
    status: Result<&proto::StatusResponse, &str>,
    rates: &Rates,
    width: Option<u16>,
) -> String {
    let status = match status {
        Ok(status) => status,
        Err(err) => return format!("fleet {fleet}: {err}\n(retrying; Ctrl-C to quit)\n"),
    };
    let connected = status.workers.iter().filter(|w| w.connected).count();
    let mut out = format!(
        "fleet {fleet}   leader {} at {}   term {}   workers {connected}/{}   shards {}\n",
        status.leader_id,
        status.leader_address,
        status.term,
        status.workers.len(),
        status.shard_count,
    );
    let mut workers = table(
        width,
        &["WORKER", "CONNECTED", "IN FLIGHT", "CAPACITY", "SHARDS"],
    );
    for w in &status.workers {
        workers.add_row(vec![
            w.id.clone(),
            if w.connected { "yes" } else { "no" }.to_owned(),
            w.in_flight.to_string(),
            w.capacity.to_string(),
            w.shards.to_string(),
        ]);
    }
    let mut queues = table(
        width,
        &["CONTROLLER", "QUEUE DEPTH", "PROCESSING", "RECONCILES/S"],
    );
    for q in &status.queues {
        queues.add_row(vec![
            q.controller.clone(),
            q.depth.to_string(),
            q.processing.to_string(),
            rates
                .of(&q.controller)
                .map_or_else(|| "-".to_owned(), |r| format!("{r:.1}")),
        ]);
    }
    out.push_str(&workers.to_string());
    out.push('\n');
    out.push_str(&queues.to_string());
    out.push_str("\nCtrl-C to quit\n");
    out
}

fn table(width: Option<u16>, header: &[&str]) -> Table {
    let mut table = Table::new();
    table
        .load_style(UTF8_FULL_CONDENSED)
        .set_header(header.to_vec());
    if let Some(width) = width {
        table
            .set_content_arrangement(ContentArrangement::Dynamic)
            .set_width(width);
    }
    for column in table.column_iter_mut().skip(1) {
        column.set_cell_alignment(CellAlignment::Right);
    }
    table
}

/// Holds the terminal in the view's mode (alternate screen, hidden cursor) and gives it back when
/// dropped.
struct TerminalGuard;

impl TerminalGuard {
    fn enter() -> std::io::Result<Self> {
        execute!(
            std::io::stdout(),
            terminal::EnterAlternateScreen,
            cursor::Hide
        )?;
        Ok(Self)
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        // Nothing to do about a failure here: the process is leaving the view either way.
        let _ = execute!(
            std::io::stdout(),
            cursor::Show,
            terminal::LeaveAlternateScreen
        );
    }
}

/// Draws `fetch`'s answer every `interval` until Ctrl-C or SIGTERM, then restores the terminal and
/// returns `Ok`. A failed fetch (no leader during a failover, etcd away) is shown and retried.
///
/// # Errors
/// Only when the terminal cannot be written.
pub async fn run<F, Fut>(fleet: &str, interval: Duration, fetch: F) -> anyhow::Result<()>
where
    F: Fn() -> Fut,
    Fut: Future<Output = anyhow::Result<proto::StatusResponse>>,
{
    let tty = std::io::stdout().is_terminal();
    let _guard = if tty {
        Some(TerminalGuard::enter()?)
    } else {
        None
    };
    let stop = flotilla_common::shutdown_signal();
    tokio::pin!(stop);
    let mut rates = Rates::default();
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            () = &mut stop => return Ok(()),
            _ = ticker.tick() => {}
        }
        let fetched = tokio::select! {
            biased;
            () = &mut stop => return Ok(()),
            fetched = fetch() => fetched,
        };
        let error = fetched.as_ref().err().map(|e| format!("{e:#}"));
        if let Ok(status) = &fetched {
            rates.observe(Instant::now(), status);
        }
        // A pty nobody sized (0 columns) has no width to fit: the tables take what they need.
        let width = terminal::size()
            .ok()
            .map(|(w, _)| w)
            .filter(|w| *w >= MIN_WIDTH);
        let view = render(
            fleet,
            fetched.as_ref().map_err(|_| error.as_deref().unwrap_or("")),
            &rates,
            width,
        );
        let mut out = std::io::stdout().lock();
        if tty {
            queue!(
                out,
                cursor::MoveTo(0, 0),
                terminal::Clear(terminal::ClearType::All)
            )?;
            // Not raw mode: the terminal turns each newline into a carriage return and a newline.
            write!(out, "{view}")?;
        } else {
            writeln!(out, "{view}")?;
        }
        out.flush()?;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn status(leader: &str, done: u64) -> proto::StatusResponse {
        proto::StatusResponse {
            leader_id: leader.into(),
            leader_address: "127.0.0.1:7450".into(),
            term: 42,
            shard_count: 256,
            workers: vec![proto::WorkerStatus {
                id: "worker-0".into(),
                connected: true,
                capacity: 10,
                in_flight: 3,
                shards: 256,
                lacking: vec![],
            }],
            queues: vec![proto::QueueStatus {
                controller: "greeting".into(),
                depth: 7,
                processing: 3,
                waiting: 0,
                done,
            }],
            ..Default::default()
        }
    }

    #[test]
    fn the_view_shows_the_leader_term_workers_and_queues() {
        let view = render("demo", Ok(&status("c0", 0)), &Rates::default(), Some(100));
        for part in [
            "leader c0",
            "term 42",
            "worker-0",
            "greeting",
            "IN FLIGHT",
            "QUEUE DEPTH",
        ] {
            assert!(view.contains(part), "{part} missing from\n{view}");
        }
    }

    #[test]
    fn reconciles_per_second_come_from_two_readings_of_one_leader() {
        let mut rates = Rates::default();
        let t0 = Instant::now();
        rates.observe(t0, &status("c0", 100));
        assert_eq!(rates.of("greeting"), None, "one reading gives no rate");
        rates.observe(t0 + Duration::from_secs(2), &status("c0", 150));
        assert_eq!(rates.of("greeting"), Some(25.0));
        rates.observe(t0 + Duration::from_secs(3), &status("c1", 10));
        assert_eq!(
            rates.of("greeting"),
            None,
            "a new leader's counters start again"
        );
    }
}
