//! `retryscope check --html FILE`: one self-contained HTML page (inline CSS, SVG and a little
//! script; no network, no external asset) with the summary, a table of every turn that sorts
//! and filters by finding, and a timeline for each turn worth looking at.
//!
//! Bounded for large inputs: the table keeps at most [`HtmlLimits::max_rows`] turns (turns
//! with findings or retries first) and only turns with a finding or a retry get a timeline, at
//! most [`HtmlLimits::max_timelines`], the most severe first; the page says how many were
//! left out. The table's rows travel as JSON in a `<script type="application/json">` block
//! and are drawn a page at a time by the script, so a 100,000-turn report opens quickly.
//!
//! A link can choose the table's filter: `report.html#filter=all`, or `#filter=kN` for the
//! N-th kind of [`FindingKind::ALL`] (`k0` is `abandoned_tool_executed`).
//!
//! Every string from the log is HTML-escaped ([`esc`]); text content appears only when the
//! report holds it (the input had it and content capture was on for the local report).

mod timeline;

use std::fmt::Write as _;
use std::io;

use serde_json::json;

use super::Summary;
use super::human::{clip, count, explain, thousands, usd};
use retryscope_core::finding::{FindingKind, Severity};
use retryscope_core::report::{Outcome, TurnReport};

pub use timeline::svg as timeline_svg;

const TEMPLATE: &str = include_str!("html/page.html");

/// `&`, `<`, `>`, `"` and `'` as entities; control characters as visible escapes.
pub fn esc(s: &str) -> String {
    let s = retryscope_core::sanitize::display(s);
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// JSON that is safe inside a `<script>` element: `<`, `>` and `&` as `\u` escapes (JSON
/// outside strings never contains them).
fn script_json(v: &serde_json::Value) -> String {
    v.to_string()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

/// How much of a large input the page keeps.
#[derive(Debug, Clone, Copy)]
pub struct HtmlLimits {
    /// Rows of the turn table.
    pub max_rows: usize,
    /// Turns drawn as timelines.
    pub max_timelines: usize,
}

impl Default for HtmlLimits {
    fn default() -> Self {
        HtmlLimits {
            max_rows: 200_000,
            max_timelines: 200,
        }
    }
}

struct Row {
    turn: String,
    status: &'static str,
    model: String,
    attempts: usize,
    retries: u32,
    cost: f64,
    wasted: f64,
    /// Bit per [`FindingKind::ALL`] index.
    kinds: u32,
    /// 0 none, else 1 + the most severe finding's rank.
    severity: u8,
    /// Where the turn came from (file and first line, stream or session).
    source: String,
}

struct Kept {
    /// Severity rank and arrival order: the most severe, then the earliest, are kept.
    rank: (u8, std::cmp::Reverse<u64>),
    row: Option<usize>,
    html: String,
}

/// Collects closed turns and writes the page.
pub struct HtmlReport {
    limits: HtmlLimits,
    rows: Vec<Row>,
    rows_left_out: u64,
    kept: Vec<Kept>,
    worth: u64,
    seen: u64,
}

fn kind_bit(kind: FindingKind) -> u32 {
    let i = FindingKind::ALL
        .iter()
        .position(|k| *k == kind)
        .unwrap_or(0);
    1 << i
}

fn severity_rank(r: &TurnReport) -> u8 {
    r.findings.iter().map(|f| f.severity).max().map_or(0, |s| {
        1 + Severity::ALL.iter().position(|x| *x == s).unwrap_or(0) as u8
    })
}

/// The page's sink: each closed turn is added to it (the page is written at the end).
impl crate::engine::Sink for HtmlReport {
    fn name(&self) -> &'static str {
        "html"
    }

    fn deliver(
        &mut self,
        output: &retryscope_core::correlate::Output,
        _at: Option<crate::engine::sinks::At<'_>>,
    ) {
        if let retryscope_core::correlate::Output::TurnClosed(report) = output {
            self.add(report);
        }
    }
}

impl HtmlReport {
    /// An empty report.
    pub fn new(limits: HtmlLimits) -> Self {
        HtmlReport {
            limits,
            rows: Vec::new(),
            rows_left_out: 0,
            kept: Vec::new(),
            worth: 0,
            seen: 0,
        }
    }

    /// Add a closed turn.
    pub fn add(&mut self, r: &TurnReport) {
        self.seen += 1;
        let worth = !r.findings.is_empty() || r.retries > 0;
        let severity = severity_rank(r);
        let row = if self.rows.len() < self.limits.max_rows {
            self.rows.push(Row {
                turn: r.turn.clone(),
                status: r.status.as_str(),
                model: r.model.clone().unwrap_or_default(),
                attempts: r.attempts.len(),
                retries: r.retries,
                cost: r.cost_usd,
                wasted: r.wasted_cost_usd,
                kinds: r.findings.iter().fold(0, |acc, f| acc | kind_bit(f.kind)),
                severity,
                source: super::human::turn_from(r).unwrap_or_default(),
            });
            Some(self.rows.len() - 1)
        } else {
            self.rows_left_out += 1;
            None
        };
        if !worth {
            return;
        }
        self.worth += 1;
        let rank = (severity, std::cmp::Reverse(self.seen));
        if self.kept.len() >= self.limits.max_timelines {
            let Some((weakest, _)) = self.kept.iter().enumerate().min_by_key(|(_, k)| k.rank)
            else {
                return;
            };
            if self.kept[weakest].rank >= rank {
                return;
            }
            self.kept.swap_remove(weakest);
        }
        self.kept.push(Kept {
            rank,
            row,
            html: turn_section(r, row),
        });
    }

    /// Write the page.
    pub fn write(&self, summary: &Summary, out: &mut dyn io::Write) -> io::Result<()> {
        let mut kept: Vec<&Kept> = self.kept.iter().collect();
        kept.sort_by_key(|k| std::cmp::Reverse(k.rank));
        let with_timeline: std::collections::HashSet<usize> =
            kept.iter().filter_map(|k| k.row).collect();
        let rows: Vec<serde_json::Value> = self
            .rows
            .iter()
            .enumerate()
            .map(|(i, r)| {
                json!([
                    r.turn,
                    r.status,
                    r.model,
                    r.attempts,
                    r.retries,
                    r.cost,
                    r.wasted,
                    r.kinds,
                    r.severity,
                    with_timeline.contains(&i),
                    r.source
                ])
            })
            .collect();
        let kinds: Vec<serde_json::Value> = FindingKind::ALL
            .iter()
            .map(|k| json!([k.as_str(), k.severity().as_str()]))
            .collect();
        let data = json!({ "rows": rows, "kinds": kinds, "left_out": self.rows_left_out });
        let mut timelines = String::new();
        let left = self.worth - kept.len() as u64;
        let _ = write!(
            timelines,
            r#"<p class="note" id="timeline-count">{} drawn{}.</p>"#,
            count(kept.len() as u64, "timeline", "timelines"),
            if left > 0 {
                format!(
                    "; {} with findings or retries left out (the {} most severe are drawn)",
                    count(left, "turn", "turns"),
                    thousands(kept.len() as u64)
                )
            } else {
                String::new()
            }
        );
        for k in kept {
            timelines.push_str(&k.html);
        }
        let page = TEMPLATE
            .replace("{{SUMMARY}}", &summary_html(summary, self.seen))
            .replace("{{TIMELINES}}", &timelines)
            .replace("{{DATA}}", &script_json(&data));
        out.write_all(page.as_bytes())
    }
}

fn summary_html(s: &Summary, seen: u64) -> String {
    let mut h = String::from(r#"<dl class="summary">"#);
    let mut item = |k: &str, v: String| {
        let _ = write!(h, "<div><dt>{k}</dt><dd>{v}</dd></div>");
    };
    item("turns", thousands(seen));
    item("attempts", thousands(s.attempts));
    item("retries", thousands(s.retries));
    item("cost", usd(s.cost_usd));
    let share = if s.cost_usd > 0.0 {
        format!(" ({:.1}%)", 100.0 * s.wasted_cost_usd / s.cost_usd)
    } else {
        String::new()
    };
    item(
        "wasted on abandoned attempts",
        format!("{}{share}", usd(s.wasted_cost_usd)),
    );
    item(
        "lines",
        format!("{} ({} bad)", thousands(s.lines), thousands(s.bad_lines)),
    );
    h.push_str("</dl><ul class=\"sev-totals\">");
    for sev in Severity::ALL.into_iter().rev() {
        for k in FindingKind::ALL.into_iter().filter(|k| k.severity() == sev) {
            let n = s.findings.get(k.as_str()).copied().unwrap_or(0);
            if n > 0 {
                let _ = write!(
                    h,
                    r#"<li class="{}"><b>{}</b> {} <span class="n">{}</span></li>"#,
                    timeline::severity_class(sev),
                    sev.as_str().to_uppercase(),
                    k.as_str(),
                    thousands(n)
                );
            }
        }
    }
    if s.findings.values().all(|n| *n == 0) {
        h.push_str("<li>no findings</li>");
    }
    h.push_str("</ul>");
    let blind = super::human::blind_spot_sentences(s);
    if !blind.is_empty() {
        h.push_str(r#"<ul class="blind-spots">"#);
        for sentence in blind {
            let _ = write!(
                h,
                r#"<li class="warning"><b>BLIND SPOT</b> {}</li>"#,
                esc(&sentence)
            );
        }
        if s.blind_spots.iter().any(|b| b.cannot_show == "cuts") {
            h.push_str(
                "<li class=\"warning\">No input can show a cut stream: no finding about one \
                 could be raised, so \u{201c}no findings\u{201d} is not \u{201c}healthy\u{201d}.</li>",
            );
        }
        h.push_str("</ul>");
    }
    if s.unpriced_attempts > 0 {
        let _ = write!(
            h,
            r#"<p class="note">{} used models with no price (not in the cost).</p>"#,
            count(s.unpriced_attempts, "attempt", "attempts")
        );
    }
    h
}

/// What the user finally saw, as far as the report knows.
fn user_saw(r: &TurnReport) -> String {
    let spliced = r
        .findings
        .iter()
        .find(|f| f.kind == FindingKind::SplicedText)
        .map(|f| {
            format!(
                " It holds attempt {}'s abandoned text.",
                f.attempt.unwrap_or(0)
            )
        })
        .unwrap_or_default();
    if let Some(text) = r.output_prefix.as_deref().filter(|t| !t.is_empty()) {
        let total = r.output_chars.unwrap_or(0);
        return format!(
            r#"<blockquote class="saw-text">{}</blockquote><p>{} shown{}.{}</p>"#,
            esc(&clip(text, 400)),
            count(total, "character", "characters"),
            if (text.chars().count() as u64) < total {
                " (the start is quoted)"
            } else {
                ""
            },
            esc(&spliced)
        );
    }
    if let Some(n) = r.output_chars {
        return format!(
            "<p>The client logged an output of {} (its text is not in this report).{}</p>",
            count(n, "character", "characters"),
            esc(&spliced)
        );
    }
    let last = r
        .attempts
        .iter()
        .rev()
        .find(|a| a.outcome == Outcome::Completed)
        .or(r.attempts.last());
    match last {
        Some(a) => {
            let quote = a
                .text_prefix
                .as_deref()
                .filter(|t| !t.is_empty())
                .map(|t| {
                    format!(
                        r#"<blockquote class="saw-text">{}</blockquote>"#,
                        esc(&clip(t, 400))
                    )
                })
                .unwrap_or_default();
            format!(
                "<p>No output event was logged; attempt {} streamed {}.{}</p>{quote}",
                a.attempt,
                count(a.text_chars, "character", "characters"),
                esc(&spliced)
            )
        }
        None => "<p>Nothing: the turn had no attempt.</p>".to_owned(),
    }
}

fn turn_section(r: &TurnReport, row: Option<usize>) -> String {
    let mut h = String::new();
    let id = row.map_or_else(String::new, |i| format!(r#" id="t{i}""#));
    let _ = write!(
        h,
        r#"<section class="turn"{id} data-turn="{}"><h3>turn <code>{}</code></h3><p class="meta">{} · {} · {} · {} · {} · cost {} · wasted {}</p>"#,
        esc(&r.turn),
        esc(&r.turn),
        esc(r.model.as_deref().unwrap_or("unknown model")),
        esc(r.provider.as_deref().unwrap_or("unknown provider")),
        r.status.as_str(),
        count(r.attempts.len() as u64, "attempt", "attempts"),
        count(u64::from(r.retries), "retry", "retries"),
        usd(r.cost_usd),
        usd(r.wasted_cost_usd)
    );
    if let Some(from) = super::human::turn_from(r) {
        let _ = write!(
            h,
            r#"<p class="meta source">from <code>{}</code></p>"#,
            esc(&from)
        );
    }
    let findings = timeline::by_severity(r);
    if !findings.is_empty() {
        h.push_str(r#"<ul class="findings">"#);
        for (i, f) in findings.into_iter().enumerate() {
            let _ = write!(
                h,
                r#"<li class="{}"><span class="fnum">{}</span> <b>{}</b> <code>{}</code> {}</li>"#,
                timeline::severity_class(f.severity),
                i + 1,
                f.severity.as_str().to_uppercase(),
                f.kind.as_str(),
                esc(&explain(f, r))
            );
        }
        h.push_str("</ul>");
    }
    h.push_str(&timeline::svg(r));
    h.push_str(
        r#"<table class="attempts"><thead><tr><th>attempt</th><th>outcome</th><th>ended</th><th>text</th><th>tool calls</th><th>executed</th><th>tokens in / out</th><th>cost</th></tr></thead><tbody>"#,
    );
    for a in &r.attempts {
        let ended = match (&a.finish_reason, &a.error, &a.retry_reason) {
            (Some(f), _, _) => format!("finish: {}", esc(f)),
            (None, Some(e), _) => format!("error: {}", esc(&clip(e, 60))),
            _ => String::new(),
        };
        let retry = a
            .retry_reason
            .as_deref()
            .map(|x| format!(" (retry: {})", esc(x)))
            .unwrap_or_default();
        let calls: Vec<String> = a
            .tool_calls
            .iter()
            .map(|c| format!("{} ({})", esc(&c.name), esc(&c.id)))
            .collect();
        let execs: Vec<String> = a
            .executed
            .iter()
            .map(|e| {
                format!(
                    "{} ({}){}",
                    esc(&e.name),
                    esc(&e.id),
                    if e.read { ", read" } else { "" }
                )
            })
            .collect();
        let u = &a.usage;
        let _ = write!(
            h,
            r#"<tr class="row-{outcome}"><td>{n}</td><td>{outcome}{retry}</td><td>{ended}</td><td>{text}</td><td>{calls}</td><td>{execs}</td><td class="num">{tin} / {tout} <span class="src">{src}</span></td><td class="num">{cost}</td></tr>"#,
            n = a.attempt,
            outcome = a.outcome.as_str(),
            text = count(a.text_chars, "char", "chars"),
            calls = calls.join(", "),
            execs = execs.join(", "),
            tin = thousands(u.tokens.input_tokens),
            tout = thousands(u.tokens.output_tokens),
            src = u.source.as_str(),
            cost = a.cost_usd.map_or_else(|| "unpriced".to_owned(), usd),
        );
    }
    h.push_str("</tbody></table>");
    let _ = write!(
        h,
        r#"<div class="saw"><h4>What the user finally saw</h4>{}</div></section>"#,
        user_saw(r)
    );
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_control_characters() {
        assert_eq!(
            esc("<script>alert('x')</script> & \"q\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"
        );
        assert_eq!(esc("a\u{1b}[2Jb"), "a\\x1b[2Jb");
    }

    #[test]
    fn script_json_cannot_close_the_script_element() {
        let v = json!(["</script><script>alert(1)</script>"]);
        let s = script_json(&v);
        assert!(!s.contains("</script>"), "{s}");
        let back: serde_json::Value = serde_json::from_str(&s).unwrap();
        assert_eq!(back, v);
    }
}
