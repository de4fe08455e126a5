//! What a checkpoint keeps of the ingest path's streams, so that a stream read on after a
//! restore (`run` after a kill -9, a cluster partition taken over by another collector)
//! decodes as if it had never stopped: each stream whose decoder keeps state (a provider SSE
//! stream's call in progress and how many calls it has had, which names its next turn; an
//! agent output's thread or session), and each stream whose format is still being sniffed
//! (the lines held until a record decides it, not yet decoded).
//!
//! Owns: [`StreamState`], [`Ingest::stream_states`] and [`Ingest::resume_streams`]. A stream
//! refused as a lookalike is not kept (after a restore it is sniffed again). Sessions parked
//! for quiet (`parked.rs`) are kept too, as parked.

use super::{Decoding, Held, Ingest, Source};
use crate::decode::Format;
use crate::reorder::Place;

/// One stream's state, as a checkpoint keeps it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StreamState {
    /// Where the stream comes from ([`Source::as_str`]).
    pub source: String,
    /// Its name.
    pub name: String,
    /// The format it is read as (`None`: still being sniffed). A format this build does not
    /// know (a later one's) reads as none: that stream's state is not resumed, the rest are.
    #[serde(default, deserialize_with = "known_format")]
    pub format: Option<Format>,
    /// Lines read from it.
    pub lines: u64,
    /// Its decoder's state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decoder: Option<serde_json::Value>,
    /// Lines held while its format is sniffed (not decoded yet), in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sniffing: Vec<SniffedLine>,
    /// When its last line arrived (ms, the reader's clock).
    #[serde(default)]
    pub last_ms: i64,
    /// Ended for quiet and kept to be continued (`parked.rs`): no stream is open for it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub parked: bool,
}

/// Streams' states a checkpoint keeps at most: the most recently active (a collector's
/// partition opens a stream per shipped file and OTLP session, and keeps them).
pub const MAX_STREAM_STATES: usize = 10_000;

/// What [`Ingest::stream_states`] gives.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StreamStates {
    /// The states, of the most recently active streams.
    pub states: Vec<StreamState>,
    /// Streams with a state left out past [`MAX_STREAM_STATES`] (after a restore they start
    /// afresh).
    pub left_out: usize,
}

/// A stream whose state a checkpoint keeps: open (its slot), or parked.
enum Kept<'a> {
    Open(usize),
    Parked(Source, &'a str, &'a super::Parked),
}

/// A line held while its stream's format is sniffed.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SniffedLine {
    /// Its line number.
    pub number: u64,
    /// Where it can be read again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub place: Option<Place>,
    /// Its bytes.
    pub line: LineBytes,
}

/// A line's bytes: as text when they are UTF-8 (most are), else as numbers.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
pub enum LineBytes {
    /// UTF-8.
    Text(String),
    /// Anything else.
    Bytes(Vec<u8>),
}

/// A format's name, or none when this build does not know it.
fn known_format<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Format>, D::Error> {
    let name: Option<String> = serde::Deserialize::deserialize(d)?;
    Ok(name.and_then(|n| n.parse().ok()))
}

impl LineBytes {
    fn of(bytes: &[u8]) -> Self {
        match std::str::from_utf8(bytes) {
            Ok(text) => LineBytes::Text(text.to_owned()),
            Err(_) => LineBytes::Bytes(bytes.to_vec()),
        }
    }

    fn into_bytes(self) -> Vec<u8> {
        match self {
            LineBytes::Text(t) => t.into_bytes(),
            LineBytes::Bytes(b) => b,
        }
    }
}

impl Ingest {
    /// The state of every open stream that has one, and of every parked session, for a
    /// checkpoint; past [`MAX_STREAM_STATES`], those of the most recently active.
    pub fn stream_states(&self) -> StreamStates {
        // The streams that have a state, the most recently active first past the bound: chosen
        // before any is written (a receiver may hold 100,000 sessions' streams).
        let mut with: Vec<(i64, Kept<'_>)> = self
            .streams
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let s = s.as_ref()?;
                let has = match &s.decoding {
                    Decoding::Provider(_) => true,
                    Decoding::Sniffing(held) => !held.lines.is_empty(),
                    _ => false,
                };
                has.then_some((s.last_ms, Kept::Open(i)))
            })
            .collect();
        with.extend(
            self.parked
                .iter()
                .map(|(source, name, p)| (p.last_ms, Kept::Parked(source, name, p))),
        );
        let left_out = with.len().saturating_sub(MAX_STREAM_STATES);
        if left_out > 0 {
            with.select_nth_unstable_by_key(MAX_STREAM_STATES, |(at, _)| std::cmp::Reverse(*at));
            with.truncate(MAX_STREAM_STATES);
        }
        with.sort_unstable_by_key(|(_, k)| match k {
            Kept::Open(i) => (0, *i, ""),
            Kept::Parked(s, n, _) => (1, *s as usize, *n),
        });
        let states = with
            .into_iter()
            .filter_map(|(_, kept)| match kept {
                Kept::Open(i) => self.open_state(i),
                Kept::Parked(source, name, p) => Some(StreamState {
                    source: source.as_str().to_owned(),
                    name: name.to_owned(),
                    format: Some(p.format),
                    lines: p.lines,
                    // As parked: what differs from a fresh decoder's state (a build before
                    // parking reads it as an open stream's, fails to resume it and starts the
                    // stream afresh, as it would have).
                    decoder: Some(p.compact_state()?),
                    sniffing: Vec::new(),
                    last_ms: p.last_ms,
                    parked: true,
                }),
            })
            .collect();
        StreamStates { states, left_out }
    }

    /// Open stream `i`'s state, if it has one.
    fn open_state(&self, i: usize) -> Option<StreamState> {
        let s = self.streams.get(i)?.as_ref()?;
        let (decoder, sniffing) = match &s.decoding {
            Decoding::Provider(d) => (Some(d.state()?), Vec::new()),
            Decoding::Sniffing(held) => {
                let lines = held.lines.iter().map(|(number, place, bytes)| SniffedLine {
                    number: *number,
                    place: *place,
                    line: LineBytes::of(bytes),
                });
                (None, lines.collect())
            }
            _ => return None,
        };
        Some(StreamState {
            source: s.source.as_str().to_owned(),
            name: s.name.clone(),
            format: s.format,
            lines: s.lines,
            decoder,
            sniffing,
            last_ms: s.last_ms,
            parked: false,
        })
    }

    /// Open the streams `states` name, each from where it was: read as its format from its
    /// decoder's state, or still sniffing with its held lines (sharded, a stream another
    /// shard reads is only opened, as that shard's); the number that could not be resumed (an
    /// unknown source, a format other than the one this path now forces, a state that does
    /// not fit its format's decoder: those streams start afresh, and lines a stream held while
    /// sniffing are lost).
    pub fn resume_streams(&mut self, states: Vec<StreamState>) -> usize {
        let mut failed = 0;
        for st in states {
            let Some(source) = Source::ALL.into_iter().find(|s| s.as_str() == st.source) else {
                failed += 1;
                continue;
            };
            // Read as this run reads it: a format forced now (`--format`) wins over the one
            // the state was taken with, whose state is then of no use (the OTLP receiver's
            // streams are always OTLP).
            let now = match source {
                Source::Otlp => Format::Otlp,
                _ => self.format,
            };
            if now != Format::Auto && st.format != Some(now) {
                failed += 1;
                continue;
            }
            if st.parked {
                match (st.format, &st.decoder) {
                    (Some(format), Some(state)) => {
                        self.park_state(source, st.name, format, st.lines, st.last_ms, state);
                    }
                    _ => failed += 1,
                }
                continue;
            }
            let id = self.stream_as(source, &st.name, st.format.unwrap_or(Format::Auto));
            let Some(stream) = self.streams.get_mut(id.0 as usize).and_then(Option::as_mut) else {
                failed += 1;
                continue;
            };
            stream.lines = st.lines;
            stream.last_ms = st.last_ms;
            let resumed = match (&mut stream.decoding, st.decoder) {
                (Decoding::Provider(d), Some(state)) => d.resume(state),
                (Decoding::Sniffing(held), None) => {
                    refill(held, st.sniffing);
                    true
                }
                // Another shard's to read (each worker is handed every stream's state).
                (Decoding::Elsewhere, _) => true,
                _ => false,
            };
            if resumed {
                // The previous reader told the format already.
                stream.announced = stream.format.is_some();
                // An OTLP stream's decoder may know now that its input records executions.
                stream.note_records_executions(&mut self.pipeline);
            } else {
                failed += 1;
            }
        }
        failed
    }
}

/// Hold `lines` again, as sniffing held them.
fn refill(held: &mut Held, lines: Vec<SniffedLine>) {
    for l in lines {
        let bytes = l.line.into_bytes();
        held.head.extend_from_slice(&bytes);
        held.head.push(b'\n');
        held.lines.push((l.number, l.place, bytes));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::correlate::{Correlator, CorrelatorConfig};
    use crate::cost::PriceTable;

    fn ingest() -> Ingest {
        let c = Correlator::new(CorrelatorConfig::default(), Arc::new(PriceTable::builtin()));
        Ingest::new(c, Format::Auto)
    }

    #[test]
    fn past_the_bound_the_most_recently_active_streams_states_are_kept() {
        let mut i = ingest();
        let mut out = Vec::new();
        let extra = 5;
        for n in 0..MAX_STREAM_STATES + extra {
            let id = i.stream_as(Source::File, &format!("s{n}.sse"), Format::OpenAiChat);
            // Stream n's only line arrives at n.
            i.line(id, None, b": ping", Some(n as i64), &mut out, &mut |_| {});
        }
        let s = i.stream_states();
        assert_eq!((s.states.len(), s.left_out), (MAX_STREAM_STATES, extra));
        let oldest_kept = s.states.iter().map(|st| st.last_ms).min();
        assert_eq!(
            oldest_kept,
            Some(extra as i64),
            "the five quietest are left out"
        );
        // Resumed, each keeps its recency (so a later bound leaves out the same ones).
        let mut j = ingest();
        assert_eq!(j.resume_streams(s.states.clone()), 0);
        let again = j.stream_states();
        assert_eq!(again.left_out, 0);
        let key = |v: &[StreamState]| {
            let mut k: Vec<(String, i64)> = v.iter().map(|s| (s.name.clone(), s.last_ms)).collect();
            k.sort();
            k
        };
        assert_eq!(key(&again.states), key(&s.states));
    }

    #[test]
    fn a_state_of_another_format_than_the_one_now_forced_or_an_unknown_one_is_not_resumed() {
        let mut i = ingest();
        let mut out = Vec::new();
        let id = i.stream_as(Source::File, "a.sse", Format::OpenAiChat);
        i.line(id, None, b": ping", Some(1), &mut out, &mut |_| {});
        let states = i.stream_states().states;
        // Forced to another format now (`--format anthropic`): not resumed as OpenAI Chat.
        let c = Correlator::new(CorrelatorConfig::default(), Arc::new(PriceTable::builtin()));
        let mut forced = Ingest::new(c, Format::Anthropic);
        assert_eq!(forced.resume_streams(states.clone()), 1);
        let id = forced.stream(Source::File, "a.sse");
        assert_eq!(forced.format_of(id), Some(Format::Anthropic));
        // Forced to the same format, or sniffing: resumed.
        let c = Correlator::new(CorrelatorConfig::default(), Arc::new(PriceTable::builtin()));
        assert_eq!(
            Ingest::new(c, Format::OpenAiChat).resume_streams(states.clone()),
            0
        );
        assert_eq!(ingest().resume_streams(states.clone()), 0);
        // A format this build does not know: that state is not resumed, the checkpoint reads.
        let mut json = serde_json::to_value(&states).expect("encodes");
        json[0]["format"] = "some-later-format".into();
        let back: Vec<StreamState> = serde_json::from_value(json).expect("still reads");
        assert_eq!(back[0].format, None);
        assert_eq!(ingest().resume_streams(back), 1);
    }

    /// A reader that keeps a stream per session parks the quiet ones it picks
    /// ([`Ingest::end_quiet`]): their streams close and their states stay in the checkpoint,
    /// marked parked; the others, and the sessions still sending, stay open.
    #[test]
    fn quiet_streams_picked_by_name_and_format_are_parked_and_kept_in_the_checkpoint() {
        let mut i = ingest();
        let mut out = Vec::new();
        let mut open = |i: &mut Ingest, name: &str, format: Format, at: i64| {
            let id = i.stream_as(Source::Nats, name, format);
            i.line(id, None, b"", Some(at), &mut out, &mut |_| {});
        };
        open(&mut i, "otlp:svc/quiet", Format::Otlp, 1_000);
        open(&mut i, "otlp:svc/busy", Format::Otlp, 9_000);
        open(&mut i, "host:/logs/calls.sse", Format::OpenAiChat, 1_000);
        let names = |i: &Ingest| {
            let mut n: Vec<(String, bool)> = i
                .stream_states()
                .states
                .into_iter()
                .map(|s| (s.name, s.parked))
                .collect();
            n.sort();
            n
        };
        let open_streams = |i: &Ingest| i.streams.iter().flatten().count();
        assert_eq!(names(&i).len(), 3);
        let mut out = Vec::new();
        let session =
            |name: &str, f: Option<Format>| name.starts_with("otlp:") && f == Some(Format::Otlp);
        i.end_quiet(10_000, 5_000, session, &mut out, &mut |_| {});
        let parked = |name: &str, p: bool| (name.to_owned(), p);
        assert_eq!(
            names(&i),
            vec![
                parked("host:/logs/calls.sse", false),
                parked("otlp:svc/busy", false),
                parked("otlp:svc/quiet", true),
            ]
        );
        assert_eq!(open_streams(&i), 2);
        // A session that sends again continues its stream, no longer parked.
        let id = i.stream_as(Source::Nats, "otlp:svc/quiet", Format::Otlp);
        i.line(id, None, b"", Some(11_000), &mut out, &mut |_| {});
        assert_eq!((open_streams(&i), i.parked_sessions()), (3, 0));
        assert!(names(&i).iter().all(|(_, p)| !p));
    }
}
