//! Rendering `check` results: a readable report, or JSON lines.

use std::fmt::Write as _;

use super::Summary;
use crate::finding::{FindingKind, Severity};
use crate::report::{AttemptReport, TurnReport};
use crate::sanitize::display;

/// JSON line of one turn.
pub fn turn_json(report: &TurnReport) -> String {
    serde_json::to_string(report).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

/// The `{"summary": {...}}` line.
pub fn summary_json(summary: &Summary) -> String {
    let wrapped = serde_json::json!({ "summary": summary });
    wrapped.to_string()
}

fn usd(v: f64) -> String {
    if v == 0.0 {
        "$0".to_owned()
    } else if v < 0.01 {
        format!("${v:.6}")
    } else {
        format!("${v:.4}")
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
    let _ = write!(s, "  text={} chars", a.text_chars);
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
        "  usage {} in / {} out ({})",
        u.tokens.input_tokens,
        u.tokens.output_tokens,
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

/// The text block of one turn.
pub fn turn_text(report: &TurnReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "turn {}  model={} provider={}  status={}  attempts={} retries={}  cost={} wasted={}",
        display(&report.turn),
        display(report.model.as_deref().unwrap_or("unknown")),
        display(report.provider.as_deref().unwrap_or("unknown")),
        report.status.as_str(),
        report.attempts.len(),
        report.retries,
        usd(report.cost_usd),
        usd(report.wasted_cost_usd),
    );
    for a in &report.attempts {
        let _ = writeln!(s, "{}", attempt_line(a));
    }
    for f in &report.findings {
        let mut line = format!(
            "  {:<8} {}",
            f.severity.as_str().to_uppercase(),
            f.kind.as_str()
        );
        if let Some(a) = f.attempt {
            let _ = write!(line, "  attempt {a}");
        }
        if let (Some(tool), Some(id)) = (&f.tool, &f.call_id) {
            let _ = write!(line, "  {}({})", display(tool), display(id));
        }
        if let Some(k) = &f.effect_key {
            let _ = write!(line, "  effect_key={}", display(k));
        }
        let _ = write!(line, "  {}", display(&f.evidence));
        let _ = writeln!(s, "{line}");
    }
    s
}

/// The closing summary.
pub fn summary_text(summary: &Summary) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "summary");
    let _ = writeln!(
        s,
        "  inputs: {}  lines: {}  events: {}  bad lines: {}  unknown types: {}  unknown fields: {}",
        summary.inputs,
        summary.lines,
        summary.events,
        summary.bad_lines,
        summary.unknown_types,
        summary.unknown_fields
    );
    let statuses: Vec<String> = summary
        .turns_by_status
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    let _ = writeln!(
        s,
        "  turns: {} ({})  attempts: {}  retries: {}",
        summary.turns,
        statuses.join(", "),
        summary.attempts,
        summary.retries
    );
    let mut by_sev = Vec::new();
    for sev in Severity::ALL.into_iter().rev() {
        let kinds: Vec<String> = FindingKind::ALL
            .into_iter()
            .filter(|k| k.severity() == sev)
            .filter_map(|k| {
                let n = summary.findings.get(k.as_str()).copied().unwrap_or(0);
                (n > 0).then(|| format!("{} {n}", k.as_str()))
            })
            .collect();
        if !kinds.is_empty() {
            by_sev.push(format!("{}: {}", sev.as_str(), kinds.join(", ")));
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
            "  note: {} attempts used models with no price (not in cost; see --prices)",
            summary.unpriced_attempts
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
    if !summary.unreadable_inputs.is_empty() {
        let _ = writeln!(
            s,
            "  unreadable inputs: {}",
            display(&summary.unreadable_inputs.join(", "))
        );
    }
    s
}
