//! Rendering `check` results: a readable report, or JSON lines.

use std::fmt::Write as _;

use super::Summary;
use super::human::{self, blind_spot_sentences, count, explain, thousands, usd};
use retryscope_core::finding::{FindingKind, Severity};
use retryscope_core::report::{AttemptReport, TurnReport};
use retryscope_core::sanitize::display;

/// JSON line of one turn.
pub fn turn_json(report: &TurnReport) -> String {
    retryscope_core::sanitize::to_json_string(report)
        .unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

/// The `{"summary": {...}}` line.
pub fn summary_json(summary: &Summary) -> String {
    let wrapped = serde_json::json!({ "summary": summary });
    retryscope_core::sanitize::to_json_string(&wrapped).unwrap_or_default()
}

/// Whether to colour: `always` and `never` are what they say; `auto` colours a terminal
/// unless `NO_COLOR` is set to something non-empty (<https://no-color.org>) or `TERM=dumb`.
pub fn color_choice(
    when: &str,
    is_terminal: bool,
    no_color: Option<&str>,
    term: Option<&str>,
) -> bool {
    match when {
        "always" => true,
        "never" => false,
        _ => is_terminal && no_color.is_none_or(str::is_empty) && term != Some("dumb"),
    }
}

/// Colours for a terminal (ANSI SGR), or none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Style {
    /// Colour severities and outcomes.
    pub color: bool,
}

impl Style {
    fn paint(self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    /// A severity label (`CRITICAL` bold red, `HIGH` red, `WARNING` yellow, `INFO` cyan),
    /// padded to a common width.
    pub fn severity(self, sev: Severity) -> String {
        self.severity_word(&format!("{:<8}", sev.as_str().to_uppercase()), sev)
    }

    /// `word` in the colour of `sev`.
    pub fn severity_word(self, word: &str, sev: Severity) -> String {
        let code = match sev {
            Severity::Critical => "1;31",
            Severity::High => "31",
            Severity::Warning => "33",
            Severity::Info => "36",
        };
        self.paint(code, word)
    }

    fn bold(self, text: &str) -> String {
        self.paint("1", text)
    }
}

fn attempt_line(a: &AttemptReport) -> String {
    let mut s = format!("  attempt {}  {}", a.attempt, a.outcome.as_str());
    if let Some(reason) = &a.retry_reason {
        let _ = write!(s, " (retry: {})", display(reason));
    }
    if let Some(f) = &a.finish_reason {
        let _ = write!(s, "  finish={}", display(f));
    }
    match (&a.error, a.error_chars) {
        (Some(e), _) => {
            let _ = write!(s, "  error={}", display(e));
        }
        (None, Some(n)) => {
            let _ = write!(s, "  error ({n} chars; --capture-content shows it)");
        }
        (None, None) => {}
    }
    let _ = write!(s, "  text={}", count(a.text_chars, "char", "chars"));
    if !a.tool_calls.is_empty() {
        let calls: Vec<String> = a
            .tool_calls
            .iter()
            .map(|c| format!("{}({})", display(&c.name), display(&c.id)))
            .collect();
        let _ = write!(s, "  calls: {}", calls.join(", "));
    }
    if !a.executed.is_empty() {
        let execs: Vec<String> = a
            .executed
            .iter()
            .map(|e| {
                if e.read {
                    format!("{}({}, read)", display(&e.name), display(&e.id))
                } else {
                    format!("{}({})", display(&e.name), display(&e.id))
                }
            })
            .collect();
        let _ = write!(s, "  executed: {}", execs.join(", "));
    }
    let u = &a.usage;
    let _ = write!(
        s,
        "  tokens {} in / {} out ({})",
        thousands(u.tokens.input_tokens),
        thousands(u.tokens.output_tokens),
        u.source.as_str()
    );
    match a.cost_usd {
        Some(c) => {
            let _ = write!(s, "  {}", usd(c));
        }
        None => s.push_str("  (unpriced model)"),
    }
    s
}

/// Whether a turn deserves a block in the text report: turns with findings or retries (all
/// turns with `verbose`).
pub fn worth_showing(report: &TurnReport, verbose: bool) -> bool {
    verbose || !report.findings.is_empty() || report.retries > 0
}

/// The text block of one turn, without colour.
pub fn turn_text(report: &TurnReport) -> String {
    turn_text_styled(report, Style::default())
}

/// The text block of one turn: a header, one line per attempt, then the findings, most
/// severe first, each with its evidence as a sentence.
pub fn turn_text_styled(report: &TurnReport, style: Style) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}  model={} provider={}  status={}  {}, {}  cost={} wasted={}",
        style.bold(&format!("turn {}", display(&report.turn))),
        display(report.model.as_deref().unwrap_or("unknown")),
        display(report.provider.as_deref().unwrap_or("unknown")),
        report.status.as_str(),
        count(report.attempts.len() as u64, "attempt", "attempts"),
        count(u64::from(report.retries), "retry", "retries"),
        usd(report.cost_usd),
        usd(report.wasted_cost_usd),
    );
    if let Some(from) = human::turn_from(report) {
        let _ = writeln!(s, "  from {}", display(&from));
    }
    for a in &report.attempts {
        let _ = writeln!(s, "{}", attempt_line(a));
    }
    let mut findings: Vec<_> = report.findings.iter().collect();
    // Stable: equal severities keep the order they became known.
    findings.sort_by_key(|f| std::cmp::Reverse(f.severity));
    for f in findings {
        let _ = writeln!(
            s,
            "  {} {}: {}",
            style.severity(f.severity),
            f.kind.as_str(),
            display(&explain(f, report))
        );
    }
    s
}

/// The closing summary, without colour.
pub fn summary_text(summary: &Summary) -> String {
    summary_text_styled(summary, Style::default())
}

/// The closing summary: counts with thousands separators, findings by severity, cost.
pub fn summary_text_styled(summary: &Summary, style: Style) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{}", style.bold("summary"));
    let _ = writeln!(
        s,
        "  inputs: {}  lines: {}  events: {}  bad lines: {}  unknown types: {}  unknown fields: {}",
        thousands(summary.inputs),
        thousands(summary.lines),
        thousands(summary.events),
        thousands(summary.bad_lines),
        thousands(summary.unknown_types),
        thousands(summary.unknown_fields)
    );
    let statuses: Vec<String> = summary
        .turns_by_status
        .iter()
        .map(|(k, v)| format!("{k} {}", thousands(*v)))
        .collect();
    let statuses = if statuses.is_empty() {
        String::new()
    } else {
        format!(" ({})", statuses.join(", "))
    };
    let _ = writeln!(
        s,
        "  turns: {}{statuses}  attempts: {}  retries: {}",
        thousands(summary.turns),
        thousands(summary.attempts),
        thousands(summary.retries)
    );
    let mut by_sev = Vec::new();
    for sev in Severity::ALL.into_iter().rev() {
        let kinds: Vec<String> = FindingKind::ALL
            .into_iter()
            .filter(|k| k.severity() == sev)
            .filter_map(|k| {
                let n = summary.findings.get(k.as_str()).copied().unwrap_or(0);
                (n > 0).then(|| format!("{} {}", k.as_str(), thousands(n)))
            })
            .collect();
        if !kinds.is_empty() {
            by_sev.push(format!(
                "{}: {}",
                style.severity_word(sev.as_str(), sev),
                kinds.join(", ")
            ));
        }
    }
    if by_sev.is_empty() {
        let _ = writeln!(s, "  findings: none");
    } else {
        let _ = writeln!(s, "  findings: {}", by_sev.join("; "));
    }
    let share = if summary.cost_usd > 0.0 {
        format!(
            " ({:.1}%)",
            100.0 * summary.wasted_cost_usd / summary.cost_usd
        )
    } else {
        String::new()
    };
    let _ = writeln!(
        s,
        "  cost: {}  wasted on abandoned/failed attempts: {}{}",
        usd(summary.cost_usd),
        usd(summary.wasted_cost_usd),
        share
    );
    if summary.unpriced_attempts > 0 {
        let _ = writeln!(
            s,
            "  note: {} used models with no price (not in cost; see --prices)",
            count(summary.unpriced_attempts, "attempt", "attempts")
        );
    }
    for (n, what) in [
        (
            summary.reused_turn_ids,
            "turn ids closed in one input came back in another: checked as new turns with the same id",
        ),
        (
            summary.after_close_events,
            "events came after their turn had closed in the same input: counted, not correlated",
        ),
        (
            summary.evicted_turns,
            "open turns were evicted to bound memory (see --max-open-turns): reported as incomplete",
        ),
    ] {
        if n > 0 {
            let _ = writeln!(s, "  warning: {n} {what}");
        }
    }
    coverage_lines(summary, style, &mut s);
    if !summary.unreadable_inputs.is_empty() {
        let _ = writeln!(
            s,
            "  unreadable inputs: {}",
            display(&summary.unreadable_inputs.join(", "))
        );
    }
    if !summary.refused_inputs.is_empty() {
        let _ = writeln!(
            s,
            "  refused inputs (not a format retryscope reads): {}",
            display(&summary.refused_inputs.join(", "))
        );
    }
    s
}

/// What the inputs cannot show, one line per input kind and advice, and, when no input can
/// show cuts, what that means for the findings above.
fn coverage_lines(summary: &Summary, style: Style, s: &mut String) {
    for sentence in blind_spot_sentences(summary) {
        let _ = writeln!(
            s,
            "  {} {}",
            style.severity_word("blind spot:", Severity::Warning),
            display(&sentence)
        );
    }
    if summary.blind_spots.iter().any(|b| b.cannot_show == "cuts") {
        let _ = writeln!(
            s,
            "  {} no input can show a cut stream, so no finding about one (unfinished or \
             abandoned executions, spliced text) could be raised: \"none\" is not \"healthy\"",
            style.severity_word("warning:", Severity::Warning),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn color_follows_the_flag_the_terminal_and_no_color() {
        assert!(color_choice("auto", true, None, Some("xterm")));
        assert!(!color_choice("auto", false, None, Some("xterm")));
        assert!(!color_choice("auto", true, Some("1"), Some("xterm")));
        assert!(
            color_choice("auto", true, Some(""), None),
            "an empty NO_COLOR is unset"
        );
        assert!(!color_choice("auto", true, None, Some("dumb")));
        assert!(color_choice("always", false, Some("1"), None));
        assert!(!color_choice("never", true, None, None));
    }

    #[test]
    fn severity_labels_are_coloured_only_when_asked() {
        let on = Style { color: true };
        assert_eq!(on.severity(Severity::Critical), "\x1b[1;31mCRITICAL\x1b[0m");
        assert_eq!(Style::default().severity(Severity::High), "HIGH    ");
    }
}
