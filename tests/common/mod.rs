//! Shared helpers for the decoder integration tests: decode a whole file the way the `check`
//! command will (detect, pick a decoder, feed lines), then run the events through the real
//! correlator.
#![allow(dead_code)]

use std::sync::Arc;

use retryscope::correlate::{Correlator, CorrelatorConfig, Output};
use retryscope::cost::PriceTable;
use retryscope::decode::native::{NativeLine, decode_line};
use retryscope::decode::{EnvelopeDecoder, Format, SkipCounts, detect, stream_decoder};
use retryscope::event::{Event, EventKind};
use retryscope::finding::FindingKind;
use retryscope::report::TurnReport;

/// Everything decoding one file produced.
pub struct Decoded {
    pub format: Format,
    pub events: Vec<Event<'static>>,
    pub skips: SkipCounts,
    pub errors: usize,
}

/// Decode `bytes` (named `name`) as `format`, or auto-detected when `Format::Auto`.
pub fn decode(name: &str, bytes: &[u8], format: Format) -> Decoded {
    let format = match format {
        Format::Auto => detect(bytes),
        f => f,
    };
    let mut events = Vec::new();
    let mut errors = 0;
    let mut skips = SkipCounts::default();
    let lines = bytes.split(|b| *b == b'\n');
    if let Some(mut d) = stream_decoder(format, name) {
        for line in lines {
            if d.push_line(line, &mut events).is_err() {
                errors += 1;
            }
        }
        d.finish(&mut events);
        skips = d.skips();
    } else {
        let mut env = EnvelopeDecoder::new();
        for line in lines {
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match decode_line(line, &mut skips) {
                Ok(NativeLine::Event(e)) => events.push(e.into_owned()),
                Ok(NativeLine::ProviderChunk(c)) => {
                    if env.push(&c, &mut events).is_err() {
                        errors += 1;
                    }
                }
                Ok(NativeLine::UnknownType) => {}
                Err(_) => errors += 1,
            }
        }
        env.finish(&mut events);
        skips.add(env.skips());
    }
    Decoded {
        format,
        events,
        skips,
        errors,
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
