//! Shared helpers for the decoder integration tests: decode a whole file through the ingest
//! path `check` and `run` use, keeping the events, then run them through the real correlator.
#![allow(dead_code)]

use std::sync::Arc;

use retryscope_core::correlate::{Correlator, CorrelatorConfig, Output};
use retryscope_core::cost::PriceTable;
use retryscope_core::decode::{Format, SkipCounts};
use retryscope_core::event::{Event, EventKind};
use retryscope_core::finding::FindingKind;
use retryscope_core::ingest::{Ingest, Note, Source};
use retryscope_core::report::TurnReport;

/// Everything decoding one file produced.
pub struct Decoded {
    pub format: Format,
    pub events: Vec<Event<'static>>,
    pub skips: SkipCounts,
    pub errors: usize,
}

/// Decode `bytes` (named `name`) as `format`, or auto-detected when `Format::Auto`, through
/// the one ingest path `check` and `run` use (format choice, framing, blank lines, decoders),
/// keeping the events it correlates.
pub fn decode(name: &str, bytes: &[u8], format: Format) -> Decoded {
    let correlator = Correlator::new(
        CorrelatorConfig {
            idle_timeout_ms: None,
            ..CorrelatorConfig::default()
        },
        Arc::new(PriceTable::builtin()),
    );
    let mut ingest = Ingest::new(correlator, format);
    ingest.pipeline_mut().record_events();
    let mut chosen = format;
    let mut out = Vec::new();
    let mut note = |n: Note<'_>| {
        if let Note::Format { format, .. } = n {
            chosen = format;
        }
    };
    let stream = ingest.stream(Source::File, name);
    let mut lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    if lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop(); // the newline that ends the last line starts no line
    }
    for line in lines {
        ingest.line(stream, None, line, None, &mut out, &mut note);
    }
    ingest.close_all(&mut out, &mut note);
    let counters = ingest.counters().clone();
    Decoded {
        format: chosen,
        events: ingest.pipeline_mut().take_recorded(),
        skips: counters.skips,
        errors: usize::try_from(counters.bad_total()).unwrap_or(usize::MAX),
    }
}

/// Run events through a fresh correlator (no idle timeout) and return the closed turns.
pub fn correlate(events: &[Event<'static>]) -> Vec<TurnReport> {
    correlate_with(events, false)
}

/// [`correlate`], with content capture on or off (error texts are in reports only with it).
pub fn correlate_with(events: &[Event<'static>], capture_content: bool) -> Vec<TurnReport> {
    let cfg = CorrelatorConfig {
        idle_timeout_ms: None,
        capture_content,
        ..CorrelatorConfig::default()
    };
    let mut c = Correlator::new(cfg, Arc::new(PriceTable::builtin()));
    let mut out = Vec::new();
    for (i, ev) in events.iter().enumerate() {
        c.observe(ev, 1_000 + i as i64, &mut out);
    }
    c.close_all(&mut out);
    out.into_iter()
        .filter_map(|o| match o {
            Output::TurnClosed(r) => Some(*r),
            _ => None,
        })
        .collect()
}

/// Sorted finding kinds of a turn.
pub fn findings(r: &TurnReport) -> Vec<FindingKind> {
    let mut k: Vec<FindingKind> = r.findings.iter().map(|f| f.kind).collect();
    k.sort();
    k
}

/// (id, name, args) of every ToolCall event.
pub fn tool_calls(events: &[Event<'static>]) -> Vec<(String, String, String)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolCall { id, name, args } => Some((
                id.to_string(),
                name.to_string(),
                args.as_deref().unwrap_or("").to_owned(),
            )),
            _ => None,
        })
        .collect()
}

/// A one-line summary of a turn report, for failure messages and exploration.
pub fn summary(r: &TurnReport) -> String {
    let attempts: Vec<String> = r
        .attempts
        .iter()
        .map(|a| {
            let calls: Vec<String> = a
                .tool_calls
                .iter()
                .map(|c| format!("{}:{}", c.name, c.id))
                .collect();
            let u = a.usage.tokens;
            format!(
                "#{} {} fin={:?} err={:?} text={} calls=[{}] usage={:?}({},{},{},{},{})",
                a.attempt,
                a.outcome.as_str(),
                a.finish_reason,
                a.error,
                a.text_chars,
                calls.join(","),
                a.usage.source,
                u.input_tokens,
                u.output_tokens,
                u.cached_input_tokens,
                u.cache_write_tokens,
                u.reasoning_tokens
            )
        })
        .collect();
    format!(
        "{} model={:?} provider={:?} status={} findings={:?} | {}",
        r.turn,
        r.model,
        r.provider,
        r.status.as_str(),
        findings(r),
        attempts.join(" | ")
    )
}
