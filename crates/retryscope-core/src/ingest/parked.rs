//! Sessions' streams ended because they went quiet, kept so that the session's next record
//! continues where it was.
//!
//! A reader that keeps a stream per session (the OTLP receiver, a cluster partition's OTLP
//! sessions) cannot tell when a session is over, so it ends the ones quiet for the idle
//! timeout ([`Ingest::end_quiet`], [`Ingest::park`]): their decoders are flushed as at a
//! stream's end, and the stream's memory goes. But a quiet session is not an ended one: Codex
//! running a tool for longer than the idle timeout sends nothing meanwhile, then its next
//! model call. A decoder started afresh for that call would name it as the session's first
//! (`<conversation.id>` again, not `#2`) and put it in the turn already closed, or merge it
//! with the call that failed before the pause. So what names the next turn and relates the
//! next record to the last (the decoder's state, as a checkpoint keeps it) is parked here,
//! and the next line under the name opens the stream from it.
//!
//! Owns: [`Parked`] and [`ParkedStreams`], bounded by [`MAX_PARKED`] and [`MAX_PARKED_BYTES`]:
//! past either, the sessions parked longest ago are forgotten (counted; one that sends again
//! starts afresh), and so is one quiet for [`PARKED_FOR_MS`] (a session is over by then; kept
//! longer, every checkpoint would carry every session ever seen). A state is kept as what
//! differs from a fresh decoder's, field by top-level field (an OTLP stream's decoder holds
//! one sub-decoder per agent, and a session uses one): under 200 bytes for a Codex session
//! whose whole state is 516; checkpoints keep it so too.

use serde_json::Value;

use super::stream::{plain_decoding, reads};
use super::{Decoding, Ingest, Note, Source, StreamId};
use crate::correlate::Output;
use crate::decode::Format;
use crate::fasthash::FastMap;

/// Sessions' states kept at most (each a decoder's compact state, a few hundred bytes).
pub const MAX_PARKED: usize = 100_000;

/// Bytes of parked states (and their names) kept at most: a decoder that remembers much (a
/// GenAI session's span ids, up to 10,000) parks large.
pub const MAX_PARKED_BYTES: usize = 64 << 20;

/// How long a session's state is kept after its last line (on the reader's clock): six hours.
pub const PARKED_FOR_MS: i64 = 6 * 3600 * 1000;

/// What is kept of a session's stream ended for quiet.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Parked {
    /// The format it was read as.
    pub(super) format: Format,
    /// Lines read from it.
    pub(super) lines: u64,
    /// When its last line arrived.
    pub(super) last_ms: i64,
    /// What its decoder's state has that a fresh one's has not ([`compact`]), as JSON text
    /// (a `serde_json::Value` is several times larger).
    pub(super) state: Box<str>,
}

impl Parked {
    /// What its decoder's state has that a fresh one's has not.
    pub(super) fn compact_state(&self) -> Option<Value> {
        serde_json::from_str(&self.state).ok()
    }
}

/// `state` without the top-level fields equal to `fresh`'s (a fresh decoder's state).
fn compact(state: Value, fresh: Option<&Value>) -> Value {
    match (state, fresh) {
        (Value::Object(mut m), Some(Value::Object(f))) => {
            m.retain(|k, v| f.get(k) != Some(v));
            Value::Object(m)
        }
        (state, _) => state,
    }
}

/// `fresh` with `compact`'s fields put back ([`compact`]'s inverse).
fn expand(compact: Value, fresh: Option<Value>) -> Value {
    match (compact, fresh) {
        (Value::Object(c), Some(Value::Object(mut f))) => {
            f.extend(c);
            Value::Object(f)
        }
        (compact, _) => compact,
    }
}

/// A fresh decoder's state for a stream `name` of `format`.
fn fresh_state(format: Format, name: &str) -> Option<Value> {
    match plain_decoding(format, name) {
        Decoding::Provider(d) => d.state(),
        _ => None,
    }
}

/// The parked sessions, by source and name.
#[derive(Debug, Default)]
pub(super) struct ParkedStreams {
    by_source: [FastMap<String, Parked>; Source::ALL.len()],
    /// Bytes of their names and states.
    bytes: usize,
}

/// What one parked session costs, counted against [`MAX_PARKED_BYTES`].
fn cost(name: &str, p: &Parked) -> usize {
    name.len() + p.state.len()
}

impl ParkedStreams {
    /// Park `name`'s state; returns how many sessions were forgotten to stay within
    /// [`MAX_PARKED`] and [`MAX_PARKED_BYTES`] (the oldest, down to nine tenths of both at
    /// once, so that forgetting is rare).
    pub(super) fn park(&mut self, source: Source, name: String, parked: Parked) -> usize {
        self.bytes += cost(&name, &parked);
        let map = &mut self.by_source[source as usize];
        if let Some(old) = map.get(&name).map(|old| cost(&name, old)) {
            self.bytes -= old;
        }
        map.insert(name, parked);
        if self.len() <= MAX_PARKED && self.bytes <= MAX_PARKED_BYTES {
            return 0;
        }
        let mut ages: Vec<(i64, usize, &str, usize)> = self
            .by_source
            .iter()
            .enumerate()
            .flat_map(|(s, m)| {
                m.iter()
                    .map(move |(n, p)| (p.last_ms, s, n.as_str(), cost(n, p)))
            })
            .collect();
        ages.sort_unstable();
        let (mut len, mut bytes) = (self.len(), self.bytes);
        let oldest: Vec<(usize, String)> = ages
            .iter()
            .take_while(|(_, _, _, c)| {
                let over = len > MAX_PARKED * 9 / 10 || bytes > MAX_PARKED_BYTES * 9 / 10;
                if over {
                    len -= 1;
                    bytes -= c;
                }
                over
            })
            .map(|(_, s, n, _)| (*s, (*n).to_owned()))
            .collect();
        for (s, n) in &oldest {
            self.by_source[*s].remove(n);
        }
        self.bytes = bytes;
        oldest.len()
    }

    /// Forget the sessions whose last line is older than `horizon_ms`; how many.
    pub(super) fn expire(&mut self, horizon_ms: i64) -> usize {
        let before = self.len();
        let mut freed = 0;
        for m in &mut self.by_source {
            m.retain(|n, p| {
                let keep = p.last_ms >= horizon_ms;
                if !keep {
                    freed += cost(n, p);
                }
                keep
            });
        }
        self.bytes -= freed;
        before - self.len()
    }

    /// Take `name`'s state, if it is parked.
    pub(super) fn take(&mut self, source: Source, name: &str) -> Option<Parked> {
        let p = self.by_source[source as usize].remove(name)?;
        self.bytes -= cost(name, &p);
        Some(p)
    }

    /// Every parked session, with its source.
    pub(super) fn iter(&self) -> impl Iterator<Item = (Source, &str, &Parked)> {
        Source::ALL.into_iter().flat_map(move |s| {
            self.by_source[s as usize]
                .iter()
                .map(move |(n, p)| (s, n.as_str(), p))
        })
    }

    /// How many are parked.
    pub(super) fn len(&self) -> usize {
        self.by_source.iter().map(FastMap::len).sum()
    }
}

impl Ingest {
    /// A session's stream went quiet: end it as [`Ingest::end`] does (its provider decoder is
    /// flushed, its handle released) but keep its decoder's state, so that its next line
    /// continues the session instead of starting it again.
    pub fn park(
        &mut self,
        id: StreamId,
        now_ms: i64,
        out: &mut Vec<Output>,
        note: &mut dyn FnMut(Note<'_>),
    ) {
        let Some((stream, Some(decoder))) = self.end_keeping(id, Some(now_ms), out, note) else {
            return;
        };
        let (Some(format), Some(state)) = (stream.format, decoder.state()) else {
            return;
        };
        let state = compact(state, fresh_state(format, &stream.name).as_ref());
        let parked = Parked {
            format,
            lines: stream.lines,
            last_ms: stream.last_ms,
            state: state.to_string().into_boxed_str(),
        };
        let forgotten = self.parked.park(stream.source, stream.name, parked);
        if forgotten > 0 {
            note(Note::Forgotten {
                sessions: forgotten as u64,
            });
        }
        self.expire_parked(now_ms);
    }

    /// Sessions parked ([`Ingest::park`]) and not yet continued.
    pub fn parked_sessions(&self) -> usize {
        self.parked.len()
    }

    /// Open `name` again from its parked state (already taken out).
    pub(super) fn unpark(&mut self, source: Source, name: &str, parked: Parked) -> StreamId {
        let id = self.stream_as(source, name, parked.format);
        if let Some(stream) = self.streams.get_mut(id.0 as usize).and_then(Option::as_mut) {
            stream.lines = parked.lines;
            stream.last_ms = parked.last_ms;
            // Its format was told when it was first read.
            stream.announced = true;
            if let (Decoding::Provider(d), Some(state)) =
                (&mut stream.decoding, parked.compact_state())
            {
                // A state this build wrote fits its decoder; one that does not leaves the
                // decoder fresh, as before parking was kept.
                let full = expand(state, d.state());
                d.resume(full);
            }
            stream.note_records_executions(&mut self.pipeline);
        }
        id
    }

    /// Forget the sessions parked and quiet for longer than [`PARKED_FOR_MS`] at `now_ms`,
    /// at most once a minute of that clock: a session is over by then.
    pub(super) fn expire_parked(&mut self, now_ms: i64) {
        if now_ms.saturating_sub(self.parked_expired_ms) >= 60_000 {
            self.parked_expired_ms = now_ms;
            self.parked.expire(now_ms.saturating_sub(PARKED_FOR_MS));
        }
    }

    /// Park `name` from a checkpoint's state, as [`Ingest::park`] keeps it (see `resume.rs`).
    pub(super) fn park_state(
        &mut self,
        source: Source,
        name: String,
        format: Format,
        lines: u64,
        last_ms: i64,
        state: &Value,
    ) {
        // Sharded, each worker is handed every stream's state: only the one that reads the
        // session keeps it.
        if !reads(self.shard, self.routing(format, &name)) {
            return;
        }
        let parked = Parked {
            format,
            lines,
            last_ms,
            state: state.to_string().into_boxed_str(),
        };
        self.parked.park(source, name, parked);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::correlate::{Correlator, CorrelatorConfig};
    use crate::cost::PriceTable;

    /// A Codex conversation's OTLP log records (the receiver's lines, as Codex 0.169.0 sends
    /// them: tests/fixtures/agents/codex/otlp-after-tool-reset), `(ms, event.name, extra
    /// attributes)`: a model call whose tool runs before the stream breaks, a pause, then the
    /// break reported and the next call (the tool's output sent back) completing.
    fn codex_line(ms: i64, event: &str, extra: &str) -> Vec<u8> {
        format!(
            r#"{{"otlp":"log","service":"codex_exec","time_unix_nano":{ns},"attributes":{{"event.name":"{event}","event.timestamp":"{ms}","conversation.id":"c1"{extra}}}}}"#,
            ns = ms * 1_000_000
        )
        .into_bytes()
    }

    fn before_pause() -> Vec<Vec<u8>> {
        vec![
            codex_line(
                1_000,
                "codex.api_request",
                r#","attempt":0,"model":"gpt-5""#,
            ),
            codex_line(
                1_050,
                "codex.tool_decision",
                r#","call_id":"call_1","tool_name":"exec_command""#,
            ),
            codex_line(
                1_100,
                "codex.tool_result",
                r#","call_id":"call_1","tool_name":"exec_command","arguments":"{\"cmd\":\"touch a\"}""#,
            ),
        ]
    }

    fn after_pause() -> Vec<Vec<u8>> {
        vec![
            codex_line(
                20_000,
                "codex.sse_event",
                r#","event.kind":"error","error.message":"stream disconnected""#,
            ),
            codex_line(
                20_100,
                "codex.api_request",
                r#","attempt":0,"model":"gpt-5""#,
            ),
            codex_line(
                20_200,
                "codex.sse_event",
                r#","event.kind":"response.completed","input_token_count":10,"output_token_count":5"#,
            ),
        ]
    }

    /// The turns `lines` make, `(turn, status, attempts)`, with `pause` called between the
    /// two halves (at 10 s: the session has been quiet 8.9 s).
    fn turns(pause: impl Fn(&mut Ingest, &mut Vec<Output>)) -> Vec<(String, String, usize)> {
        let c = Correlator::new(CorrelatorConfig::default(), Arc::new(PriceTable::builtin()));
        let mut i = Ingest::new(c, Format::Auto);
        let mut out = Vec::new();
        // Each line of `lines` into the session's stream, a millisecond apart from `at`.
        let feed = |i: &mut Ingest, out: &mut Vec<Output>, lines: Vec<Vec<u8>>, at: i64| {
            for (n, line) in lines.iter().enumerate() {
                let id = i.stream_as(Source::Otlp, "otlp:codex_exec/c1", Format::Otlp);
                i.line(id, None, line, Some(at + n as i64), out, &mut |_| {});
            }
        };
        feed(&mut i, &mut out, before_pause(), 1_000);
        pause(&mut i, &mut out);
        feed(&mut i, &mut out, after_pause(), 20_000);
        i.close_all(&mut out, &mut |_| {});
        let mut t: Vec<(String, String, usize)> = out
            .iter()
            .filter_map(|o| match o {
                Output::TurnClosed(r) => {
                    Some((r.turn.clone(), format!("{:?}", r.status), r.attempts.len()))
                }
                _ => None,
            })
            .collect();
        t.sort();
        t
    }

    /// The regression: a session quiet past the idle timeout (Codex running a long tool)
    /// was started again from nothing, so its next call was named as its first and merged
    /// into the call that had failed: one completed turn instead of a failed and a completed.
    #[test]
    fn a_session_parked_for_quiet_continues_as_if_it_had_never_paused() {
        let whole = turns(|_, _| {});
        assert_eq!(
            whole.iter().map(|t| t.0.as_str()).collect::<Vec<_>>(),
            ["c1", "c1#2"],
            "{whole:?}"
        );
        let session =
            |name: &str, f: Option<Format>| name.starts_with("otlp:") && f == Some(Format::Otlp);
        let paused = turns(|i, out| {
            i.end_quiet(10_000, 5_000, session, out, &mut |_| {});
            assert_eq!(i.parked_sessions(), 1);
        });
        assert_eq!(paused, whole);
        // And through a checkpoint taken while parked (a restart, a partition taken over).
        let restored = turns(|i, out| {
            i.end_quiet(10_000, 5_000, session, out, &mut |_| {});
            let states = i.stream_states().states;
            assert!(states.iter().any(|s| s.parked), "{states:?}");
            let c = Correlator::new(CorrelatorConfig::default(), Arc::new(PriceTable::builtin()));
            let mut fresh = Ingest::new(c, Format::Auto);
            assert_eq!(fresh.resume_streams(states), 0);
            assert_eq!(fresh.parked_sessions(), 1);
            // The turns stay in `i`'s correlator: move the parked state back to show it
            // round-trips.
            let back = fresh.stream_states().states;
            i.parked = ParkedStreams::default();
            assert_eq!(i.resume_streams(back), 0);
        });
        assert_eq!(restored, whole);
    }

    /// An agent we have never seen, instrumented with the OpenTelemetry GenAI conventions: its
    /// model call fails, the session pauses, and the next call retries it. Parked, the retry
    /// stays the failed call's second attempt; started afresh, it was a new turn of the same
    /// id. Nothing here is Codex's: what is kept is whatever the session's decoder keeps.
    #[test]
    fn an_unknown_agents_retry_after_a_pause_stays_a_retry() {
        let span = |span: &str, ms: i64, failed: bool| {
            let status = if failed {
                r#","status":{"code":2,"message":"overloaded"}"#
            } else {
                ""
            };
            format!(
                r#"{{"otlp":"span","service":"my-agent","name":"chat m1","trace_id":"t","span_id":"{span}","start_time_unix_nano":{s},"end_time_unix_nano":{e}{status},"attributes":{{"gen_ai.operation.name":"chat","gen_ai.conversation.id":"g1","gen_ai.request.model":"m1"}}}}"#,
                s = ms * 1_000_000,
                e = (ms + 50) * 1_000_000,
            )
            .into_bytes()
        };
        let turns = |pause: bool| {
            let c = Correlator::new(CorrelatorConfig::default(), Arc::new(PriceTable::builtin()));
            let mut i = Ingest::new(c, Format::Auto);
            let mut out = Vec::new();
            let name = "otlp:my-agent/g1";
            let id = i.stream_as(Source::Otlp, name, Format::Otlp);
            i.line(
                id,
                None,
                &span("s1", 1_000, true),
                Some(1_000),
                &mut out,
                &mut |_| {},
            );
            if pause {
                i.end_quiet(10_000, 5_000, |_, _| true, &mut out, &mut |_| {});
                assert_eq!(i.parked_sessions(), 1);
            }
            let id = i.stream_as(Source::Otlp, name, Format::Otlp);
            i.line(
                id,
                None,
                &span("s2", 20_000, false),
                Some(20_000),
                &mut out,
                &mut |_| {},
            );
            i.close_all(&mut out, &mut |_| {});
            let closed: Vec<(String, usize, u32)> = out
                .iter()
                .filter_map(|o| match o {
                    Output::TurnClosed(r) => Some((r.turn.clone(), r.attempts.len(), r.retries)),
                    _ => None,
                })
                .collect();
            closed
        };
        let whole = turns(false);
        assert_eq!(whole, [("g1".to_owned(), 2, 1)]);
        assert_eq!(turns(true), whole);
    }

    /// What is parked is what differs from a fresh decoder (Codex's part of an OTLP
    /// decoder, and that it has read an agent's record), and it goes once the session has been quiet for [`PARKED_FOR_MS`].
    #[test]
    fn a_parked_state_is_what_differs_from_a_fresh_one_and_goes_after_six_hours() {
        let c = Correlator::new(CorrelatorConfig::default(), Arc::new(PriceTable::builtin()));
        let mut i = Ingest::new(c, Format::Auto);
        let mut out = Vec::new();
        // A session's first request at `at`, then the session parked 10 s later.
        let mut session = |i: &mut Ingest, name: &str, at: i64| {
            let id = i.stream_as(Source::Otlp, name, Format::Otlp);
            let line = &before_pause()[0];
            i.line(id, None, line, Some(at), &mut out, &mut |_| {});
            i.end_quiet(at + 10_000, 5_000, |_, _| true, &mut out, &mut |_| {});
        };
        session(&mut i, "otlp:codex_exec/c1", 1_000);
        let states = i.stream_states().states;
        let state = states[0].decoder.as_ref().expect("a state");
        let keys: Vec<&String> = state.as_object().expect("an object").keys().collect();
        // (And that it has read an agent's record: its input records executions.)
        assert_eq!(keys, ["agent_seen", "codex"], "{state}");
        // A build before parking ignores the flag: it reads the compact state as an open
        // stream's, cannot resume its decoder from it, and starts that stream afresh.
        let mut old = states.clone();
        old[0].parked = false;
        let c = Correlator::new(CorrelatorConfig::default(), Arc::new(PriceTable::builtin()));
        assert_eq!(Ingest::new(c, Format::Auto).resume_streams(old), 1);
        // Another session parked six hours later: c1, quiet as long, goes.
        session(&mut i, "otlp:codex_exec/c2", PARKED_FOR_MS + 1_000);
        assert_eq!(i.parked_sessions(), 1);
        // And c2 goes when it has been quiet as long.
        let mut out = Vec::new();
        let late = 2 * PARKED_FOR_MS + 60_000;
        i.end_quiet(late, 5_000, |_, _| true, &mut out, &mut |_| {});
        assert_eq!(i.parked_sessions(), 0);
    }

    fn parked(last_ms: i64) -> Parked {
        Parked {
            format: Format::Otlp,
            lines: 1,
            last_ms,
            state: "{}".into(),
        }
    }

    #[test]
    fn past_the_bound_the_sessions_parked_longest_ago_are_forgotten() {
        let mut p = ParkedStreams::default();
        let mut forgotten = 0;
        for n in 0..=MAX_PARKED {
            forgotten += p.park(Source::Otlp, format!("s{n}"), parked(n as i64));
        }
        assert_eq!(forgotten, MAX_PARKED + 1 - MAX_PARKED * 9 / 10);
        assert_eq!(p.len(), MAX_PARKED * 9 / 10);
        assert_eq!(p.iter().count(), p.len());
        // The oldest went, the newest stayed.
        assert!(p.take(Source::Otlp, "s0").is_none());
        assert!(p.take(Source::Otlp, &format!("s{MAX_PARKED}")).is_some());
        // Parking a name again replaces it without counting it twice.
        let before = (p.len(), p.bytes);
        p.park(Source::Otlp, "s99999".into(), parked(1));
        p.park(Source::Otlp, "s99999".into(), parked(2));
        assert_eq!((p.len(), p.bytes), before);
    }

    #[test]
    fn past_the_byte_bound_the_sessions_parked_longest_ago_are_forgotten() {
        let mut p = ParkedStreams::default();
        let big = "x".repeat(1 << 20);
        let mut forgotten = 0;
        for n in 0..70 {
            let mut s = parked(n);
            s.state = big.clone().into_boxed_str();
            forgotten += p.park(Source::Otlp, format!("s{n}"), s);
            assert!(p.bytes <= MAX_PARKED_BYTES, "{n}: {}", p.bytes);
        }
        // 64 states of 1 MiB (and their names) are more than the bound: down to nine tenths.
        assert_eq!(forgotten, 70 - p.len());
        assert!(p.len() < 64 && p.len() >= 50, "{}", p.len());
        assert!(p.take(Source::Otlp, "s0").is_none());
        assert!(p.take(Source::Otlp, "s69").is_some());
        let left: usize = p.iter().map(|(_, n, s)| cost(n, s)).sum();
        assert_eq!(p.bytes, left);
    }
}
