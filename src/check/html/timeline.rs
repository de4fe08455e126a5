//! One turn's timeline as inline SVG: attempts as lanes on a shared time axis, their text runs
//! and tool calls, where each attempt was cut, every tool execution drawn from the attempt
//! whose call it ran, and the findings where they became known.
//!
//! Everything from the log goes through [`esc`]; the SVG has no script and no external
//! reference.

use std::fmt::Write as _;

use super::esc;
use crate::check::human::{clip, explain};
use retryscope_core::finding::Severity;
use retryscope_core::report::{AttemptReport, MarkKind, Outcome, TurnReport};

const WIDTH: f64 = 1000.0;
const GUTTER: f64 = 150.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 34.0;
const LANE: f64 = 48.0;

/// CSS class of a severity (colours live in the page's style sheet).
pub fn severity_class(s: Severity) -> &'static str {
    match s {
        Severity::Critical => "sev-critical",
        Severity::High => "sev-high",
        Severity::Warning => "sev-warning",
        Severity::Info => "sev-info",
    }
}

/// A turn's findings, most severe first (stable: equal severities in the order they became
/// known). The page numbers them in this order, in the list and on the timeline.
pub fn by_severity(r: &TurnReport) -> Vec<&retryscope_core::finding::Finding> {
    let mut v: Vec<_> = r.findings.iter().collect();
    v.sort_by_key(|f| std::cmp::Reverse(f.severity));
    v
}

/// The time span drawn: the times of the attempts, their events and the findings (the turn's
/// own first and last times only when there are none: a turn-level event whose time is a
/// stand-in from another clock must not squeeze the attempts into a corner).
fn extent(r: &TurnReport) -> (i64, i64) {
    let mut times: Vec<i64> = Vec::new();
    for a in &r.attempts {
        times.extend(a.started_ms);
        times.extend(a.ended_ms);
        times.extend(a.executed.iter().filter_map(|e| e.ts_ms));
        for m in &a.timeline {
            times.push(m.ts_ms);
            times.extend(m.end_ms);
        }
    }
    times.extend(r.findings.iter().filter_map(|f| f.ts_ms));
    if times.is_empty() {
        times.extend(r.started_ms);
        times.extend(r.ended_ms);
    }
    let t0 = times.iter().copied().min().unwrap_or(0);
    let t1 = times.iter().copied().max().unwrap_or(0);
    (t0, t1.max(t0 + 1))
}

struct Scale {
    t0: i64,
    t1: i64,
}

impl Scale {
    fn x(&self, t: i64) -> f64 {
        let frac = (t - self.t0) as f64 / (self.t1 - self.t0) as f64;
        GUTTER + frac.clamp(0.0, 1.0) * (WIDTH - GUTTER - RIGHT)
    }
}

/// Where the attempt's stream broke: its error, else its last event, else its end.
fn cut_time(a: &AttemptReport) -> Option<i64> {
    if !a.outcome.is_wasted() {
        return None;
    }
    let error = a.timeline.iter().find(|m| m.kind == MarkKind::Error);
    error
        .map(|m| m.ts_ms)
        .or_else(|| a.timeline.iter().map(|m| m.end_ms.unwrap_or(m.ts_ms)).max())
        .or(a.ended_ms)
}

/// The `x` (and anchor) of a label beside a mark at `x`: to its right, or to its left when a
/// label about `room` wide would run past the drawing's right edge.
fn label_x(x: f64, gap: f64, room: f64) -> String {
    if x + gap + room > WIDTH {
        format!(r#" x="{:.1}" text-anchor="end""#, x - gap)
    } else {
        format!(r#" x="{:.1}""#, x + gap)
    }
}

/// Height of each extra row of the executions lane.
const EXEC_ROW: f64 = 20.0;

/// The row of each execution with a time (in drawing order: attempts, then their
/// executions), and how many rows: an execution whose marker or label would overlap one
/// already placed goes one row down, so two executions at the same time (gemini-cli runs the
/// abandoned call and the retry's together) are both visible.
fn exec_rows(r: &TurnReport, sc: &Scale) -> (Vec<usize>, usize) {
    // Horizontal span each row is taken up to.
    let mut taken: Vec<Vec<(f64, f64)>> = Vec::new();
    let mut rows = Vec::new();
    for a in &r.attempts {
        for e in &a.executed {
            let Some(ts) = e.ts_ms else { continue };
            let x = sc.x(ts);
            // The marker and its label, "name · attempt n" at ~6.5 px a character.
            let label = (e.name.chars().count() + 12) as f64 * 6.5 + 9.0;
            let span = if x + 9.0 + 180.0 > WIDTH {
                (x - label, x + 6.0)
            } else {
                (x - 6.0, x + label)
            };
            let row = taken
                .iter()
                .position(|spans| spans.iter().all(|(a, b)| span.1 < *a || span.0 > *b))
                .unwrap_or(taken.len());
            if row == taken.len() {
                taken.push(Vec::new());
            }
            taken[row].push(span);
            rows.push(row);
        }
    }
    let n = taken.len().max(1);
    (rows, n)
}

fn lane_y(i: usize) -> f64 {
    TOP + i as f64 * LANE
}

/// A "nice" tick step (1, 2 or 5 × 10ⁿ ms) giving at most about eight ticks.
fn tick_step(span_ms: i64) -> i64 {
    let raw = (span_ms as f64 / 8.0).max(1.0);
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    step as i64
}

fn seconds(ms: i64) -> String {
    if ms % 1000 == 0 {
        format!("{} s", ms / 1000)
    } else if ms % 100 == 0 {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else {
        format!("{ms} ms")
    }
}

/// The SVG of one turn.
pub fn svg(r: &TurnReport) -> String {
    let (t0, t1) = extent(r);
    let sc = Scale { t0, t1 };
    let lanes = r.attempts.len();
    let exec_y = lane_y(lanes);
    let (exec_rows, rows) = exec_rows(r, &sc);
    let extra = (rows.saturating_sub(1)) as f64 * EXEC_ROW;
    let axis_y = exec_y + LANE + extra;
    let height = axis_y + 28.0;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg class="timeline" viewBox="0 0 {WIDTH} {height}" role="img" aria-label="timeline of turn {}">"#,
        esc(&r.turn)
    );
    // Findings row.
    let _ = write!(
        s,
        r#"<text class="lane-label" x="8" y="{}">findings</text>"#,
        TOP - 14.0
    );
    // Numbers of findings at (nearly) the same place share one label: "2,5".
    let mut labels: Vec<(f64, String)> = Vec::new();
    for (i, f) in by_severity(r).into_iter().enumerate() {
        let Some(ts) = f.ts_ms else { continue };
        let x = sc.x(ts);
        match labels.iter_mut().find(|(lx, _)| (lx - x).abs() < 14.0) {
            Some((_, text)) => text.push_str(&format!(",{}", i + 1)),
            None => labels.push((x, (i + 1).to_string())),
        }
        let _ = write!(
            s,
            r#"<g class="finding-mark {cls}" data-kind="{kind}"><title>{num}. {sev} {kind}: {why}</title><line class="finding-guide" x1="{x:.1}" x2="{x:.1}" y1="{y1:.1}" y2="{y2:.1}"/><path d="M{x:.1} {ty:.1} l-6 -10 h12 z"/></g>"#,
            num = i + 1,
            cls = severity_class(f.severity),
            kind = f.kind.as_str(),
            sev = f.severity.as_str().to_uppercase(),
            why = esc(&explain(f, r)),
            y1 = TOP - 8.0,
            y2 = axis_y,
            ty = TOP - 8.0,
        );
    }
    for (x, text) in labels {
        let _ = write!(
            s,
            r#"<text class="finding-num"{} y="{:.1}">{text}</text>"#,
            label_x(x, 8.0, 60.0),
            TOP - 10.0
        );
    }
    for (i, a) in r.attempts.iter().enumerate() {
        lane(&mut s, &sc, i, a);
    }
    // Executions lane: each execution drawn from the call of the attempt that produced it.
    let _ = write!(
        s,
        r#"<g class="lane lane-exec"><rect class="lane-bg" x="{GUTTER}" y="{:.1}" width="{:.1}" height="{:.1}"/><text class="lane-label" x="8" y="{:.1}">tool executions</text></g>"#,
        exec_y + 6.0,
        WIDTH - GUTTER - RIGHT,
        LANE - 12.0 + extra,
        exec_y + LANE / 2.0 + 4.0
    );
    let mut row_of = exec_rows.into_iter();
    for (i, a) in r.attempts.iter().enumerate() {
        for e in &a.executed {
            let Some(ts) = e.ts_ms else { continue };
            let row = row_of.next().unwrap_or(0);
            let x = sc.x(ts);
            let from = a
                .timeline
                .iter()
                .find(|m| m.kind == MarkKind::ToolCall && m.call_id.as_deref() == Some(&e.id))
                .map_or(x, |m| sc.x(m.ts_ms));
            let bad = !e.read && a.outcome == Outcome::Abandoned;
            let cls = if bad {
                "exec exec-abandoned"
            } else if e.read {
                "exec exec-read"
            } else {
                "exec"
            };
            let ly = lane_y(i) + LANE / 2.0;
            let ey = exec_y + LANE / 2.0 + row as f64 * EXEC_ROW;
            let _ = write!(
                s,
                r#"<g class="{cls}" data-attempt="{n}" data-call="{id}"><title>{name} (call {id}) executed, from attempt {n}{status}</title><path class="exec-link" d="M{from:.1} {ly:.1} L{x:.1} {ey:.1}"/><rect x="{rx:.1}" y="{ry:.1}" width="12" height="12" rx="2"/><text class="exec-label"{tx} y="{ty:.1}">{name} · attempt {n}</text></g>"#,
                n = a.attempt,
                id = esc(&e.id),
                name = esc(&e.name),
                status = e
                    .status
                    .as_deref()
                    .map(|st| format!(", status {}", esc(st)))
                    .unwrap_or_default(),
                rx = x - 6.0,
                ry = ey - 6.0,
                tx = label_x(x, 9.0, 180.0),
                ty = ey + 4.0,
            );
        }
    }
    axis(&mut s, &sc, axis_y);
    s.push_str("</svg>");
    s
}

fn lane(s: &mut String, sc: &Scale, i: usize, a: &AttemptReport) {
    let y = lane_y(i);
    let mid = y + LANE / 2.0;
    let start = a.started_ms.unwrap_or(sc.t0);
    let end = a.ended_ms.unwrap_or(start);
    let cut = cut_time(a);
    let drawn_end = cut.unwrap_or(end);
    let _ = write!(
        s,
        r#"<g class="lane lane-{outcome}" data-attempt="{n}"><text class="lane-label" x="8" y="{ly:.1}">attempt {n}</text><text class="lane-sub" x="8" y="{sy:.1}">{outcome}</text><rect class="lane-bg" x="{x0:.1}" y="{by:.1}" width="{w:.1}" height="{h:.1}"><title>attempt {n}: {outcome}</title></rect>"#,
        outcome = a.outcome.as_str(),
        n = a.attempt,
        ly = mid - 2.0,
        sy = mid + 12.0,
        x0 = sc.x(start),
        by = y + 8.0,
        w = (sc.x(drawn_end) - sc.x(start)).max(2.0),
        h = LANE - 16.0,
    );
    if drawn_end < end {
        // Between the break and the retry: the client was waiting.
        let _ = write!(
            s,
            r#"<line class="lane-wait" x1="{:.1}" x2="{:.1}" y1="{mid:.1}" y2="{mid:.1}"><title>waiting for the retry</title></line>"#,
            sc.x(drawn_end),
            sc.x(end)
        );
    }
    for m in &a.timeline {
        let x = sc.x(m.ts_ms);
        match m.kind {
            MarkKind::Text => {
                let x1 = sc.x(m.end_ms.unwrap_or(m.ts_ms));
                let _ = write!(
                    s,
                    r#"<rect class="mark-text" x="{x:.1}" y="{:.1}" width="{:.1}" height="10"><title>text: {} chars{}</title></rect>"#,
                    mid - 5.0,
                    (x1 - x).max(5.0),
                    m.chars.unwrap_or(0),
                    a.text_prefix
                        .as_deref()
                        .filter(|t| !t.is_empty())
                        .map(|t| format!(" (the attempt's text begins: {})", esc(&clip(t, 120))))
                        .unwrap_or_default()
                );
            }
            MarkKind::ToolCall => {
                let id = m.call_id.as_deref().unwrap_or("");
                let name = a
                    .tool_calls
                    .iter()
                    .find(|c| c.id == id)
                    .map_or("call", |c| c.name.as_str());
                let _ = write!(
                    s,
                    r#"<g class="mark-call" data-call="{id}"><title>tool call {name} (call {id})</title><path d="M{x:.1} {t:.1} l6 7 l-6 7 l-6 -7 z"/><text class="mark-label" x="{x:.1}" y="{ty:.1}">{name}</text></g>"#,
                    id = esc(id),
                    name = esc(name),
                    t = mid - 7.0,
                    ty = y + 6.0,
                );
            }
            MarkKind::RenderReset => {
                let _ = write!(
                    s,
                    r#"<g class="mark-reset"><title>render reset</title><line x1="{x:.1}" x2="{x:.1}" y1="{:.1}" y2="{:.1}"/></g>"#,
                    y + 6.0,
                    y + LANE - 6.0
                );
            }
            MarkKind::Usage => {
                let _ = write!(
                    s,
                    r#"<circle class="mark-usage" cx="{x:.1}" cy="{:.1}" r="3"><title>usage reported</title></circle>"#,
                    mid + 10.0
                );
            }
            MarkKind::Finish => {
                let _ = write!(
                    s,
                    r#"<rect class="mark-finish" x="{:.1}" y="{:.1}" width="4" height="16"><title>finish{}</title></rect>"#,
                    x - 2.0,
                    mid - 8.0,
                    a.finish_reason
                        .as_deref()
                        .map(|f| format!(": {}", esc(f)))
                        .unwrap_or_default()
                );
            }
            MarkKind::Error => {}
        }
    }
    if let Some(cut) = cut {
        let x = sc.x(cut);
        let why = a
            .error
            .as_deref()
            .map(|e| clip(e, 40))
            .unwrap_or_else(|| "abandoned by a retry".to_owned());
        let _ = write!(
            s,
            r#"<g class="cut"><title>stream cut: {why}</title><path d="M{x:.1} {y0:.1} l4 6 l-8 6 l8 6 l-8 6 l4 6"/><text class="cut-label"{tx} y="{ty:.1}">cut: {why}</text></g>"#,
            why = esc(&why),
            y0 = y + 6.0,
            tx = label_x(x, 6.0, 280.0),
            ty = y + LANE - 4.0,
        );
    }
    s.push_str("</g>");
}

fn axis(s: &mut String, sc: &Scale, y: f64) {
    let _ = write!(
        s,
        r#"<g class="axis"><line x1="{GUTTER}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}"/>"#,
        WIDTH - RIGHT
    );
    let span = sc.t1 - sc.t0;
    let step = tick_step(span);
    let mut t = 0;
    while t <= span {
        let x = sc.x(sc.t0 + t);
        let _ = write!(
            s,
            r#"<line x1="{x:.1}" x2="{x:.1}" y1="{y:.1}" y2="{:.1}"/><text x="{x:.1}" y="{:.1}">+{}</text>"#,
            y + 5.0,
            y + 18.0,
            seconds(t)
        );
        t += step;
    }
    s.push_str("</g>");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round() {
        assert_eq!(tick_step(4600), 1000);
        assert_eq!(tick_step(100), 20);
        assert_eq!(tick_step(1), 1);
        assert_eq!(seconds(1500), "1.5 s");
        assert_eq!(seconds(2000), "2 s");
        assert_eq!(seconds(1), "1 ms");
        assert_eq!(seconds(40), "40 ms");
    }
}
