//! Words and numbers for people: one cost format, thousands separators, plurals, and each
//! finding's evidence as a plain sentence. Shared by the text and HTML reports.
//!
//! Attempts are numbered as in the log's `attempt` field, from 0: attempt 0 is the first
//! try, attempt 1 the first retry. Every human-facing report uses this numbering.
//!
//! The sentences are raw text from the log (tool names, ids, attempt text): callers escape
//! them for their medium (`sanitize::display` for a terminal, HTML escaping for a page).

use retryscope_core::finding::{Finding, FindingKind};
use retryscope_core::report::TurnReport;

/// `1234567` as `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// USD with four decimals and thousands separators (`$0.0031`, `$1,974.7215`); amounts too
/// small to show are `<$0.0001`, nothing at all is `$0`.
pub fn usd(v: f64) -> String {
    if v == 0.0 {
        return "$0".to_owned();
    }
    if v.abs() < 0.000_05 {
        return "<$0.0001".to_owned();
    }
    let s = format!("{:.4}", v.abs());
    let (int, frac) = s.split_once('.').unwrap_or((&s, "0000"));
    let int: u64 = int.parse().unwrap_or(0);
    let sign = if v < 0.0 { "-" } else { "" };
    format!("{sign}${}.{frac}", thousands(int))
}

/// `1 attempt`, `2 attempts`.
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{} {}", thousands(n), if n == 1 { one } else { many })
}

/// At most `max` characters of `text`, with `…` when cut.
pub fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}

fn call(f: &Finding) -> String {
    match (&f.tool, &f.call_id) {
        (Some(tool), Some(id)) => format!("{tool} (call {id})"),
        (Some(tool), None) => tool.clone(),
        _ => "a tool call".to_owned(),
    }
}

fn attempt(f: &Finding) -> String {
    f.attempt
        .map_or_else(|| "an attempt".to_owned(), |n| format!("attempt {n}"))
}

/// The attempt text an abandoned attempt streamed, when the report holds it (content capture).
fn attempt_text(report: &TurnReport, n: u32) -> Option<&str> {
    report
        .attempts
        .iter()
        .find(|a| a.attempt == n)
        .and_then(|a| a.text_prefix.as_deref())
        .filter(|t| !t.is_empty())
}

/// The execution that first had this finding's effect, other than the finding's own call.
fn first_same_effect(report: &TurnReport, f: &Finding) -> Option<(u32, String)> {
    let key = f.effect_key.as_deref()?;
    report.attempts.iter().find_map(|a| {
        a.executed
            .iter()
            .find(|e| e.effect_key == key && Some(&e.id) != f.call_id.as_ref())
            .map(|e| (a.attempt, e.id.clone()))
    })
}

/// What proves a finding, as a sentence. Quotes attempt text only when the report carries it
/// (it does only when the input held it and content capture is on).
pub fn explain(f: &Finding, report: &TurnReport) -> String {
    explain_with(f, Some(report))
}

/// [`explain`] for a finding as it becomes known, before its turn's report exists (`run`'s
/// live view): the same sentences, without what only the report holds (quoted text, the
/// first call of a duplicate, the attempt count).
pub fn explain_live(f: &Finding) -> String {
    explain_with(f, None)
}

fn explain_with(f: &Finding, report: Option<&TurnReport>) -> String {
    match f.kind {
        FindingKind::AbandonedToolExecuted => {
            let when = if f.evidence.contains("after") {
                "after the retry had abandoned it"
            } else {
                "and then a retry abandoned it"
            };
            let mut s = if f.evidence.contains("aborted or cancelled") {
                format!(
                    "{} from {} was run {when}, and its result says it was aborted or \
                     cancelled: whether its effect landed is a race, check it",
                    call(f),
                    attempt(f)
                )
            } else if f.evidence.contains("result is an error") {
                format!(
                    "{} from {} ran {when} and failed: check whether its effect landed",
                    call(f),
                    attempt(f)
                )
            } else {
                format!(
                    "{} from {} ran {when}: its effect happened for an answer the user never got",
                    call(f),
                    attempt(f)
                )
            };
            if let Some(q) = &f.quote {
                s.push_str(&format!(" (its result: '{}')", clip(q, 80)));
            }
            s
        }
        FindingKind::DuplicateEffect => match report.and_then(|r| first_same_effect(r, f)) {
            Some((n, id)) => format!(
                "{} from {} repeats the effect of call {id} from attempt {n} (same tool, same \
                 arguments): it happened twice",
                call(f),
                attempt(f)
            ),
            None => format!(
                "{} from {} repeats an effect that already happened ({})",
                call(f),
                attempt(f),
                f.evidence
            ),
        },
        FindingKind::SplicedText => {
            let mut s = match f.evidence.as_str() {
                "output" => format!(
                    "the user saw {}'s abandoned text together with the retry's (the client's \
                     logged output holds both)",
                    attempt(f)
                ),
                "no_reset" => format!(
                    "the retry's text followed {}'s on screen with no render reset between: \
                     the user read both",
                    attempt(f)
                ),
                r if r.starts_with(retryscope_core::rules::spliced_text::RESTART_EVIDENCE) => {
                    format!(
                        "the retry was asked to continue {}'s cut text but started its answer over, \
                     and the client kept both (their openings share '{}')",
                        attempt(f),
                        clip(
                            &r[retryscope_core::rules::spliced_text::RESTART_EVIDENCE.len()..],
                            60
                        )
                    )
                }
                other => format!("the user saw {}'s abandoned text ({other})", attempt(f)),
            };
            if let Some(text) = report.zip(f.attempt).and_then(|(r, n)| attempt_text(r, n)) {
                s.push_str(&format!(": '{}'", clip(text, 60)));
            }
            s
        }
        FindingKind::SplicedStream => format!(
            "the recorded stream carries a retried generation after {} ({})",
            attempt(f),
            f.evidence
                .strip_prefix("stream carries a retried generation: ")
                .unwrap_or(&f.evidence)
        ),
        FindingKind::EarlyExecution => format!(
            "{} ran before {} finished: had the stream broken after it, the effect would stand \
             for an abandoned answer",
            call(f),
            attempt(f)
        ),
        FindingKind::UnfinishedToolExecuted => format!(
            "{} from {} ran although that attempt {}: the client did not hold the call until \
             the finish event",
            call(f),
            attempt(f),
            f.evidence
                .strip_prefix("executed although its attempt ")
                .unwrap_or(&f.evidence)
        ),
        FindingKind::RetryCapExceeded => match report {
            Some(r) => format!(
                "{} (the turn has {})",
                f.evidence,
                count(r.attempts.len() as u64, "attempt", "attempts")
            ),
            None => f.evidence.clone(),
        },
        FindingKind::IncompleteTurn => f.evidence.clone(),
    }
}

/// Where a turn came from, for a person: `examples/bookstore/naive.jsonl:1`, with the
/// session when the input does not name it (`<stdin>:3, session 7f3a…`).
pub fn turn_from(r: &TurnReport) -> Option<String> {
    let source = r.source.as_ref()?;
    let mut s = source.to_string();
    if let Some(session) = &r.session
        && !source.input.contains(session.as_str())
    {
        s.push_str(", session ");
        s.push_str(session);
    }
    Some(s)
}

/// The summary's blind spots as sentences, one per input kind and advice:
/// "gemini-cli-stream-json cannot show attempts, cuts: add gemini-cli's telemetry file …".
pub fn blind_spot_sentences(summary: &super::Summary) -> Vec<String> {
    let mut groups: Vec<(&str, &str, Vec<&str>)> = Vec::new();
    for b in &summary.blind_spots {
        let what = match b.cannot_show.as_str() {
            "displayed_text" => "the displayed text",
            other => other,
        };
        match groups
            .iter_mut()
            .find(|(k, a, _)| *k == b.input_kind && *a == b.add)
        {
            Some((_, _, sights)) => sights.push(what),
            None => groups.push((&b.input_kind, &b.add, vec![what])),
        }
    }
    groups
        .into_iter()
        .map(|(kind, add, sights)| format!("{kind} cannot show {}: {add}", sights.join(", ")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(2_000_745), "2,000,745");
    }

    #[test]
    fn one_cost_format() {
        assert_eq!(usd(0.0), "$0");
        assert_eq!(usd(0.0116), "$0.0116");
        assert_eq!(usd(0.005580), "$0.0056");
        assert_eq!(usd(974.72154), "$974.7215");
        assert_eq!(usd(12345.6), "$12,345.6000");
        assert_eq!(usd(0.00001), "<$0.0001");
    }

    #[test]
    fn plurals_and_clipping() {
        assert_eq!(count(1, "request", "requests"), "1 request");
        assert_eq!(count(2, "request", "requests"), "2 requests");
        assert_eq!(clip("abcdef", 3), "abc…");
        assert_eq!(clip("abc", 3), "abc");
    }
}
