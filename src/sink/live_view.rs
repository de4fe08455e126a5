//! `run`'s view for a person at a terminal: each finding as one coloured sentence, as `check`
//! prints it (`check::human`, `check::render::Style`), filtered by a minimum severity, and a
//! one-line summary every few seconds and at the stop.
//!
//! Owns: the words of the live view and its counts. It is chosen instead of JSON lines when
//! findings go to stdout and stdout is a terminal (or `--output human`). At the stop, turns
//! still open are closed as incomplete: what that raises (`incomplete_turn`, calls of attempts
//! that never finished) is counted in the final summary, not printed one by one.

use std::fmt::Write as _;
use std::io::{self, Write};
use std::time::{Duration, Instant};

use crate::check::human::{count, explain_live, thousands};
use crate::check::render::Style;
use retryscope_core::correlate::Output;
use retryscope_core::finding::{Finding, FindingKind, Severity};
use retryscope_core::sanitize::display;

/// Settings of the live view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveViewSettings {
    /// Colour severities.
    pub color: bool,
    /// Findings below this are counted, not printed.
    pub min_severity: Severity,
    /// A summary line this often (`None`: only at the stop).
    pub summary_every: Option<Duration>,
}

/// The live view's state: counts since start, and where its lines go.
pub struct LiveView {
    settings: LiveViewSettings,
    out: Box<dyn Write + Send>,
    turns: u64,
    retries: u64,
    by_severity: [u64; 4],
    hidden: u64,
    stopping: bool,
    closed_at_stop: u64,
    other_at_stop: u64,
    last_summary: Instant,
}

impl std::fmt::Debug for LiveView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveView")
            .field("settings", &self.settings)
            .field("turns", &self.turns)
            .finish()
    }
}

fn rank(s: Severity) -> usize {
    Severity::ALL.iter().position(|x| *x == s).unwrap_or(0)
}

impl LiveView {
    /// A view writing to stdout.
    pub fn stdout(settings: LiveViewSettings) -> Self {
        Self::new(settings, Box::new(io::stdout()))
    }

    /// A view writing to `out`.
    pub fn new(settings: LiveViewSettings, out: Box<dyn Write + Send>) -> Self {
        LiveView {
            settings,
            out,
            turns: 0,
            retries: 0,
            by_severity: [0; 4],
            hidden: 0,
            stopping: false,
            closed_at_stop: 0,
            other_at_stop: 0,
            last_summary: Instant::now(),
        }
    }

    fn style(&self) -> Style {
        Style {
            color: self.settings.color,
        }
    }

    /// The line of one finding: severity, kind, turn, and the sentence.
    pub fn finding_line(&self, f: &Finding) -> String {
        format!(
            "{} {}: turn {}: {}\n",
            self.style().severity(f.severity),
            f.kind.as_str(),
            display(&f.turn),
            display(&explain_live(f))
        )
    }

    /// A finding became known: printed when at or above the minimum severity.
    pub fn finding(&mut self, f: &Finding) -> io::Result<()> {
        self.by_severity[rank(f.severity)] += 1;
        if self.stopping {
            match f.kind {
                FindingKind::IncompleteTurn => self.closed_at_stop += 1,
                _ => self.other_at_stop += 1,
            }
            return Ok(());
        }
        if f.severity < self.settings.min_severity {
            self.hidden += 1;
            return Ok(());
        }
        let line = self.finding_line(f);
        self.out.write_all(line.as_bytes())?;
        self.out.flush()
    }

    /// Every output, for the counts.
    pub fn observe(&mut self, o: &Output) {
        match o {
            Output::TurnClosed(_) => self.turns += 1,
            Output::Retry { .. } => self.retries += 1,
            Output::Finding(..) => {}
        }
    }

    /// The stop has begun: open turns are about to be closed as incomplete.
    pub fn stopping(&mut self) {
        self.stopping = true;
    }

    /// The one-line summary.
    pub fn summary_line(&self, open_turns: usize) -> String {
        let mut s = format!(
            "{} {} closed ({} open), {}; findings: ",
            self.style().severity_word("retryscope:", Severity::Info),
            count(self.turns, "turn", "turns"),
            thousands(open_turns as u64),
            count(self.retries, "retry", "retries"),
        );
        let mut parts = Vec::new();
        for sev in Severity::ALL.into_iter().rev() {
            let n = self.by_severity[rank(sev)];
            if n > 0 {
                parts.push(
                    self.style()
                        .severity_word(&format!("{} {}", sev.as_str(), thousands(n)), sev),
                );
            }
        }
        if parts.is_empty() {
            s.push_str("none");
        } else {
            s.push_str(&parts.join(", "));
        }
        if self.hidden > 0 {
            let _ = write!(
                s,
                " ({} below {} not shown; --min-severity)",
                thousands(self.hidden),
                self.settings.min_severity.as_str()
            );
        }
        if self.closed_at_stop > 0 {
            let _ = write!(
                s,
                "; {} still open at the stop, closed as incomplete",
                count(self.closed_at_stop, "turn", "turns")
            );
        }
        if self.other_at_stop > 0 {
            let _ = write!(
                s,
                " ({} from closing them not shown)",
                count(self.other_at_stop, "finding", "findings")
            );
        }
        s.push('\n');
        s
    }

    /// Print the summary when it is due.
    pub fn maybe_summary(&mut self, open_turns: usize) -> io::Result<()> {
        match self.settings.summary_every {
            Some(every) if self.last_summary.elapsed() >= every => self.summary(open_turns),
            _ => Ok(()),
        }
    }

    /// Print the summary now.
    pub fn summary(&mut self, open_turns: usize) -> io::Result<()> {
        self.last_summary = Instant::now();
        let line = self.summary_line(open_turns);
        self.out.write_all(line.as_bytes())?;
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn view(min: Severity) -> (LiveView, Shared) {
        let buf = Shared::default();
        let v = LiveView::new(
            LiveViewSettings {
                color: false,
                min_severity: min,
                summary_every: None,
            },
            Box::new(buf.clone()),
        );
        (v, buf)
    }

    fn text(b: &Shared) -> String {
        String::from_utf8(b.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn findings_below_the_minimum_are_counted_not_printed() {
        let (mut v, buf) = view(Severity::High);
        let early = Finding::new(FindingKind::EarlyExecution, "t1", Some(0), "x".into()).with_call(
            "issue_refund",
            "c1",
            None,
        );
        let unfinished = Finding::new(
            FindingKind::UnfinishedToolExecuted,
            "t1",
            Some(0),
            "executed although its attempt never finished".into(),
        )
        .with_call("issue_refund", "c1", None);
        v.finding(&early).unwrap();
        v.finding(&unfinished).unwrap();
        assert_eq!(
            text(&buf),
            "HIGH     unfinished_tool_executed: turn t1: issue_refund (call c1) from attempt 0 \
             ran although that attempt never finished: the client did not hold the call until \
             the finish event\n"
        );
        assert_eq!(
            v.summary_line(2),
            "retryscope: 0 turns closed (2 open), 0 retries; findings: high 1, warning 1 (1 \
             below high not shown; --min-severity)\n"
        );
    }

    #[test]
    fn incomplete_turns_at_the_stop_are_summed_up_not_listed() {
        let (mut v, buf) = view(Severity::Info);
        v.stopping();
        for t in ["a", "b", "c"] {
            v.finding(&Finding::new(
                FindingKind::IncompleteTurn,
                t,
                None,
                "closed by the stop".into(),
            ))
            .unwrap();
        }
        assert_eq!(text(&buf), "");
        assert!(
            v.summary_line(0)
                .ends_with("; 3 turns still open at the stop, closed as incomplete\n"),
            "{}",
            v.summary_line(0)
        );
    }
}
