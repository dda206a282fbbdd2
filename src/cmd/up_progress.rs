//! What `flotilla up` shows while it starts the demo: a list of steps, each ticked off with how long it
//! took, and one progress line redrawn in place. On a terminal a step shows `…` while it runs and is
//! overwritten by its tick; when stdout is not a terminal (a log, CI) each finished step and each new
//! progress line is printed once, as a plain line.

use std::io::{IsTerminal, Write};
use std::time::Instant;

use crossterm::{cursor, queue, terminal};

/// The step list on stdout.
pub struct Progress {
    tty: bool,
    /// The step running now: its title and start.
    current: Option<(String, Instant)>,
    /// The last progress line shown (plain output prints a line only when it changed).
    last_line: String,
}

impl Progress {
    /// Progress on stdout, drawn in place when stdout is a terminal.
    pub fn stdout() -> Self {
        Self {
            tty: std::io::stdout().is_terminal(),
            current: None,
            last_line: String::new(),
        }
    }

    /// Starts the step `title` (a step still running is ticked off first, without detail).
    pub fn step(&mut self, title: &str) {
        if self.current.is_some() {
            self.done("");
        }
        if self.tty {
            self.write(&format!("  …  {title}"), false);
        }
        self.current = Some((title.to_owned(), Instant::now()));
    }

    /// Ticks off the running step, with `detail` (what it started, where) after it.
    pub fn done(&mut self, detail: &str) {
        let Some((title, started)) = self.current.take() else {
            return;
        };
        let seconds = started.elapsed().as_secs_f64();
        let detail = if detail.is_empty() {
            String::new()
        } else {
            format!("  {detail}")
        };
        let mark = if self.tty { "✔" } else { "ok" };
        self.write(&format!("  {mark}  {title} ({seconds:.1}s){detail}"), true);
    }

    /// Shows `line` as the progress line: redrawn in place on a terminal, printed when it changed
    /// otherwise. The next [`Progress::step`], [`Progress::done`] or [`Progress::finish_line`] keeps it.
    pub fn line(&mut self, line: &str) {
        if line == self.last_line {
            return;
        }
        self.last_line = line.to_owned();
        self.write(&format!("     {line}"), !self.tty);
    }

    /// Ends the progress line so what follows starts on a line of its own.
    pub fn finish_line(&mut self) {
        if self.tty && !self.last_line.is_empty() {
            println!();
        }
        self.last_line.clear();
    }

    /// Writes `text` over the current line on a terminal (ending it when `end`), or as a line of its own.
    fn write(&self, text: &str, end: bool) {
        let mut out = std::io::stdout().lock();
        // A failed write to stdout is no reason to stop the demo.
        if self.tty {
            let _ = queue!(
                out,
                cursor::MoveToColumn(0),
                terminal::Clear(terminal::ClearType::CurrentLine)
            );
            let _ = write!(out, "{text}");
            if end {
                let _ = writeln!(out);
            }
        } else {
            let _ = writeln!(out, "{text}");
        }
        let _ = out.flush();
    }
}
