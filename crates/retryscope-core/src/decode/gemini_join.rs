//! Joining gemini-cli's two outputs of one session: the telemetry outfile (the attempts:
//! requests, errors, retries, logged responses, usage) and the `-o stream-json` output (what
//! the user saw: every delta and `tool_use` as it arrived, and the executions with their call
//! ids). Also any other agent's pair of the same shapes (Qwen Code: gemini-cli's records under
//! `qwen-code.*`, and a stream-json of Claude Code's shape). The telemetry names calls by
//! prompt id, the stream-json by session id; both group under the session id, and the
//! telemetry's calls take the stream-json's names by their order in the session.
//!
//! Owns: [`SessionJoiner`], which holds the events of every gemini-cli input, and merges them
//! in time order (ties keep input order): at the end of a check run, or for a live collector,
//! session by session once a session has been quiet for a while
//! (`SessionJoiner::release_quiet`). For a session that has a
//! stream-json, the telemetry's text, executions and the calls it made up for unlogged
//! attempts are dropped: the stream-json has them all, with ids, and its deltas and calls land
//! in the attempt that was streaming when they arrived (the abandoned attempt's too, which the
//! telemetry never logs); the stream-json's inferred finishes (and timed errors) are dropped
//! too, the telemetry knows how each attempt ended, unless it never logged the end of a call's
//! last attempt (a client that exits before its telemetry is flushed loses the file's tail).
//! A call the telemetry last saw fail, whose screen streamed more after the failure, was
//! retried in the lost tail: the join announces that retry where the screen shows it began.
//! The telemetry's calls take the stream-json's names in `names` (counted across a live
//! collector's batches of a session). `JoinFeed` is the decoder wrapper that diverts an
//! input's events into the joiner.
//! [`JoinerSnapshot`] is what a live collector checkpoints of it: the held events were read
//! past, so a restart must find them there.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use super::gemini_telemetry::SYNTHETIC_CALL_PREFIX;
mod names;
use super::provider::{Format, StreamDecoder};
use super::{DecodeError, SkipCounts};
use crate::event::{Event, EventKind};
use names::CallNames;
pub use names::SessionCalls;

/// Which output an event came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The telemetry outfile.
    Telemetry,
    /// The stream-json output.
    StreamJson,
}

impl Source {
    /// The source for a format that joins, if it does.
    pub(crate) fn of(format: Format) -> Option<Source> {
        match format {
            Format::GeminiCliTelemetry => Some(Source::Telemetry),
            // Claude Code's shape, which other agents (Qwen Code) print too.
            Format::GeminiCliStreamJson | Format::ClaudeCode => Some(Source::StreamJson),
            _ => None,
        }
    }
}

/// The session a turn belongs to: its id up to the step (`#`) or role (`~`) suffix.
fn session_of(turn: &str) -> &str {
    turn.split(['#', '~']).next().unwrap_or(turn)
}

/// Events of every gemini-cli input, held until all are read or their session goes quiet.
#[derive(Default)]
pub struct SessionJoiner {
    events: Vec<(Source, Event<'static>)>,
    /// Per held session: [`SessionJoiner::release_quiet`] calls since its last event.
    quiet: HashMap<String, u32>,
    /// The sessions' calls named so far, kept across batches.
    names: CallNames,
}

/// A [`SessionJoiner`]'s state: its held events, each held session's quiet count, and the
/// sessions' calls named so far (bounded like the joiner itself).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct JoinerSnapshot {
    /// Held events in arrival order, with the output each came from.
    pub events: Vec<(Source, Event<'static>)>,
    /// Per held session: release calls since its last event.
    pub quiet: Vec<(String, u32)>,
    /// By session, its calls named so far (a checkpoint of an older version has none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<(String, SessionCalls)>,
}

/// The reason given a retry the telemetry lost and the screen showed ([`lost_retries`]):
/// the telemetry decoder's own when it logged none. The record that says why (gemini-cli's
/// `network_retry_attempt`) may be lost with the retry, and the failure's code (`TypeError`
/// for a reset connection) is not why the client retried.
const LOST_RETRY_REASON: &str = "retry";

/// Events one session may hold before it is released anyway (bounded memory for a session
/// that never goes quiet).
const MAX_HELD_PER_SESSION: usize = 50_000;

impl SessionJoiner {
    /// Hold `events` from `source`.
    pub fn push(&mut self, source: Source, events: &mut Vec<Event<'static>>) {
        for e in events.iter() {
            let session = session_of(&e.turn);
            match self.quiet.get_mut(session) {
                Some(q) => *q = 0,
                None => {
                    self.quiet.insert(session.to_owned(), 0);
                }
            }
        }
        self.events.extend(events.drain(..).map(|e| (source, e)));
    }

    /// For a live collector, called once per tick: the joined events of every session that
    /// got no event for more than `after` calls (or holds too many), in time order. Events of
    /// a released session that arrive later are joined among themselves, and the correlator
    /// places them in the turn that is still open.
    pub(crate) fn release_quiet(&mut self, after: u32) -> Vec<Event<'static>> {
        let mut held_per_session: HashMap<&str, usize> = HashMap::new();
        for (_, e) in &self.events {
            *held_per_session.entry(session_of(&e.turn)).or_insert(0) += 1;
        }
        let mut ready: HashSet<String> = HashSet::new();
        for (session, q) in self.quiet.iter_mut() {
            *q = q.saturating_add(1);
            let full = held_per_session.get(session.as_str()).copied().unwrap_or(0)
                >= MAX_HELD_PER_SESSION;
            if *q > after || full {
                ready.insert(session.clone());
            }
        }
        self.names.age();
        if ready.is_empty() {
            return Vec::new();
        }
        self.quiet.retain(|s, _| !ready.contains(s));
        let (go, stay): (Vec<_>, Vec<_>) = std::mem::take(&mut self.events)
            .into_iter()
            .partition(|(_, e)| ready.contains(session_of(&e.turn)));
        self.events = stay;
        merge(go, &mut self.names)
    }

    /// The held state, for a checkpoint.
    pub fn snapshot(&self) -> JoinerSnapshot {
        let mut quiet: Vec<(String, u32)> =
            self.quiet.iter().map(|(s, q)| (s.clone(), *q)).collect();
        quiet.sort();
        JoinerSnapshot {
            events: self.events.clone(),
            quiet,
            calls: self.names.snapshot(),
        }
    }

    /// A joiner holding what `snapshot` held.
    pub(crate) fn restore(snapshot: JoinerSnapshot) -> Self {
        SessionJoiner {
            events: snapshot.events,
            quiet: snapshot.quiet.into_iter().collect(),
            names: CallNames::restore(snapshot.calls),
        }
    }

    /// Whether anything is held (events, or the names of calls joined before).
    pub(crate) fn is_empty(&self) -> bool {
        self.events.is_empty() && self.names.is_empty()
    }

    /// Every held event, joined and in time order.
    pub fn finish(&mut self) -> Vec<Event<'static>> {
        self.quiet.clear();
        let mut names = std::mem::take(&mut self.names);
        merge(std::mem::take(&mut self.events), &mut names)
    }
}

/// Held events joined: for a session with a stream-json, one source of each fact; then in time
/// order.
fn merge(held: Vec<(Source, Event<'static>)>, names: &mut CallNames) -> Vec<Event<'static>> {
    let sessions = |source: Source| -> HashSet<String> {
        held.iter()
            .filter(|(s, _)| *s == source)
            .map(|(_, e)| session_of(&e.turn).to_owned())
            .collect()
    };
    let shown = sessions(Source::StreamJson);
    let logged = sessions(Source::Telemetry);
    let renamed = names.map(&held, &shown);
    let mut ended = logged_ends(&held, &renamed);
    let lost = lost_retries(&held, &ended);
    // The lost attempt is the call's last: its end is the screen's to tell.
    for (turn, &i) in &lost {
        if let (Some(last), Some((_, e))) = (ended.get_mut(turn), held.get(i)) {
            *last = LastAttempt {
                began: e.ts_ms,
                ended: false,
                failed: None,
                latest_begin: e.ts_ms,
            };
        }
    }
    // Calls the telemetry saw retried by continuation (a prefill): the stream-json prints
    // their kept text as one message, never the cut part alone, so only the history (the
    // telemetry's output) shows a splice there. Elsewhere the screen is the judge.
    let continued: HashSet<String> = held
        .iter()
        .filter(|(s, e)| {
            *s == Source::Telemetry
                && matches!(
                    &e.kind,
                    EventKind::Retry {
                        prefill: Some(_),
                        ..
                    }
                )
        })
        .map(|(_, e)| e.turn.to_string())
        .collect();
    let mut kept: Vec<(i64, usize, Event<'static>)> = Vec::with_capacity(held.len());
    // Joined sessions whose stream-json gives no time at all (Qwen Code's): its events go
    // after the telemetry's, in their order; they name their attempts, and the attempts are
    // the telemetry's.
    let timed_shown: HashSet<&str> = held
        .iter()
        .filter(|(s, e)| *s == Source::StreamJson && e.ts_ms.is_some())
        .map(|(_, e)| session_of(&e.turn))
        .collect();
    let untimed_shown: HashSet<String> = shown
        .iter()
        .filter(|s| logged.contains(*s) && !timed_shown.contains(s.as_str()))
        .cloned()
        .collect();
    let mut last_ts = i64::MIN;
    for (i, (source, mut e)) in held.into_iter().enumerate() {
        let session = session_of(&e.turn);
        let replaced = match source {
            Source::Telemetry => {
                shown.contains(session)
                    && match &e.kind {
                        EventKind::Text { .. } | EventKind::ToolExec { .. } => true,
                        EventKind::ToolCall { id, .. } => id.starts_with(SYNTHETIC_CALL_PREFIX),
                        EventKind::Output { .. } => !continued.contains(e.turn.as_ref()),
                        _ => false,
                    }
            }
            // The telemetry knows the attempts: how each ended, its usage, the retries
            // (a stream-json's retry record announces the attempt the telemetry logs). But a
            // client that exits before its telemetry is flushed loses the tail of the file:
            // a call whose last attempt the telemetry never saw end keeps the stream-json's
            // finish or error (the screen moved on: the stream was over, or failed).
            Source::StreamJson => {
                let logged_end = || {
                    ended
                        .get(e.turn.as_ref())
                        .is_some_and(|last| !last.open_at(e.ts_ms))
                };
                logged.contains(session)
                    && match e.kind {
                        EventKind::Finish { .. } => logged_end(),
                        // an error without a time could be any attempt's (Qwen Code's)
                        EventKind::Error { .. } => e.ts_ms.is_none() || logged_end(),
                        EventKind::Retry { .. }
                        | EventKind::Usage { .. }
                        | EventKind::AttemptStart { .. } => true,
                        _ => false,
                    }
            }
        };
        if source == Source::Telemetry
            && let Some(name) = renamed.get(e.turn.as_ref())
        {
            e.turn = std::borrow::Cow::Owned(name.clone());
        }
        // An event without a time stays after the one before it.
        let ts = if e.ts_ms.is_none()
            && source == Source::StreamJson
            && untimed_shown.contains(session_of(&e.turn))
        {
            i64::MAX
        } else {
            last_ts = e.ts_ms.unwrap_or(last_ts);
            last_ts
        };
        if lost.get(e.turn.as_ref()) == Some(&i) {
            // The retry the telemetry lost, announced where the screen shows it began.
            kept.push((
                ts,
                i,
                Event {
                    turn: e.turn.clone(),
                    attempt: None,
                    ts_ms: e.ts_ms,
                    kind: EventKind::Retry {
                        reason: Some(std::borrow::Cow::Borrowed(LOST_RETRY_REASON)),
                        prefill: None,
                    },
                },
            ));
        }
        if !replaced {
            kept.push((ts, i, e));
        }
    }
    kept.sort_by_key(|(ts, i, _)| (*ts, *i));
    kept.into_iter().map(|(_, _, e)| e).collect()
}

/// The last attempt the telemetry logged of a call.
struct LastAttempt {
    /// When it began.
    began: Option<i64>,
    /// Its end (a finish or an error) was logged.
    ended: bool,
    /// When it failed, if its logged end was an error.
    failed: Option<i64>,
    /// The latest time any attempt of the call began (records can arrive out of time order:
    /// a failure logged after the retry that followed it is not the call's last word).
    latest_begin: Option<i64>,
}

impl LastAttempt {
    /// Whether an end shown at `ts` can only be this attempt's: it was still open then.
    fn open_at(&self, ts: Option<i64>) -> bool {
        !self.ended && ts.zip(self.began).is_none_or(|(ts, began)| ts >= began)
    }
}

/// The last attempt of each call the telemetry logged, by the stream-json's name of the call.
fn logged_ends(
    held: &[(Source, Event<'static>)],
    renamed: &HashMap<String, String>,
) -> HashMap<String, LastAttempt> {
    let mut last: HashMap<String, LastAttempt> = HashMap::new();
    for (source, e) in held {
        if *source != Source::Telemetry {
            continue;
        }
        let began = match e.kind {
            EventKind::TurnStart { .. }
            | EventKind::AttemptStart { .. }
            | EventKind::Retry { .. } => true,
            EventKind::Finish { .. } | EventKind::Error { .. } => false,
            _ => continue,
        };
        let turn = renamed
            .get(e.turn.as_ref())
            .cloned()
            .unwrap_or_else(|| e.turn.to_string());
        let entry = last.entry(turn).or_insert(LastAttempt {
            began: e.ts_ms,
            ended: false,
            failed: None,
            latest_begin: None,
        });
        if began {
            entry.began = e.ts_ms;
            entry.latest_begin = entry.latest_begin.max(e.ts_ms);
        }
        entry.ended = !began;
        entry.failed = match &e.kind {
            EventKind::Error { .. } => e.ts_ms,
            _ => None,
        };
    }
    last
}

/// Calls whose last attempt the telemetry logged as failed, yet whose screen streamed more
/// of them after that failure: a failed attempt streams nothing more, so the client retried
/// and the telemetry lost the retry (the file's tail, when the client exits before it is
/// flushed). By the stream-json's name of the call: the arrival index of the first event
/// the screen showed of the lost attempt. The stream-json has no retry marker of its own.
fn lost_retries(
    held: &[(Source, Event<'static>)],
    ended: &HashMap<String, LastAttempt>,
) -> HashMap<String, usize> {
    let mut lost: HashMap<String, (i64, usize)> = HashMap::new();
    for (i, (source, e)) in held.iter().enumerate() {
        if *source != Source::StreamJson
            || !matches!(e.kind, EventKind::Text { .. } | EventKind::ToolCall { .. })
        {
            continue;
        }
        let Some(ts) = e.ts_ms else { continue };
        let Some(last) = ended.get(e.turn.as_ref()) else {
            continue;
        };
        let Some(failed_at) = last.failed else {
            continue;
        };
        if ts > failed_at && last.latest_begin.is_none_or(|began| began <= failed_at) {
            let first = lost.entry(e.turn.to_string()).or_insert((ts, i));
            if (ts, i) < *first {
                *first = (ts, i);
            }
        }
    }
    lost.into_iter().map(|(turn, (_, i))| (turn, i)).collect()
}

/// A decoder whose events go to a [`SessionJoiner`] instead of its caller.
pub(crate) struct JoinFeed {
    inner: Box<dyn StreamDecoder>,
    source: Source,
    joiner: Arc<Mutex<SessionJoiner>>,
    scratch: Vec<Event<'static>>,
}

impl JoinFeed {
    /// Divert `inner`'s events (of `source`) into `joiner`.
    pub(crate) fn new(
        inner: Box<dyn StreamDecoder>,
        source: Source,
        joiner: Arc<Mutex<SessionJoiner>>,
    ) -> Self {
        JoinFeed {
            inner,
            source,
            joiner,
            scratch: Vec::new(),
        }
    }

    fn hand_over(&mut self) {
        if !self.scratch.is_empty()
            && let Ok(mut j) = self.joiner.lock()
        {
            j.push(self.source, &mut self.scratch);
        }
        self.scratch.clear();
    }
}

impl StreamDecoder for JoinFeed {
    fn push_line(
        &mut self,
        line: &[u8],
        _out: &mut Vec<Event<'static>>,
    ) -> Result<(), DecodeError> {
        let r = self.inner.push_line(line, &mut self.scratch);
        self.hand_over();
        r
    }

    fn finish(&mut self, _out: &mut Vec<Event<'static>>) {
        self.inner.finish(&mut self.scratch);
        self.hand_over();
    }

    fn skips(&self) -> SkipCounts {
        self.inner.skips()
    }

    fn records_executions(&self) -> bool {
        self.inner.records_executions()
    }

    fn state(&self) -> Option<serde_json::Value> {
        self.inner.state()
    }

    fn resume(&mut self, state: serde_json::Value) -> bool {
        self.inner.resume(state)
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;

    fn e(turn: &str, ts: i64, kind: EventKind<'static>) -> Event<'static> {
        Event {
            turn: Cow::Owned(turn.to_owned()),
            attempt: None,
            ts_ms: Some(ts),
            kind,
        }
    }

    fn turn_start() -> EventKind<'static> {
        EventKind::TurnStart {
            model: None,
            provider: None,
            session: None,
            agent: None,
            traceparent: None,
            wire_only: false,
            requested_model: None,
        }
    }

    fn text(t: &str) -> EventKind<'static> {
        EventKind::Text {
            text: Cow::Owned(t.to_owned()),
        }
    }

    #[test]
    fn merges_by_time_and_keeps_one_source_of_each_fact() {
        let mut j = SessionJoiner::default();
        let mut telemetry = vec![
            e(
                "s",
                10,
                EventKind::AttemptStart {
                    model: None,
                    request_id: None,
                },
            ),
            e("s", 30, text("logged")),
            e(
                "s",
                31,
                EventKind::Finish {
                    reason: Cow::Borrowed("STOP"),
                },
            ),
            e("other", 5, text("no stream-json for this session")),
        ];
        let mut shown = vec![
            e("s", 20, text("shown")),
            e(
                "s#2",
                40,
                EventKind::Finish {
                    reason: Cow::Borrowed("stream_ended"),
                },
            ),
        ];
        j.push(Source::Telemetry, &mut telemetry);
        j.push(Source::StreamJson, &mut shown);
        let got: Vec<(String, &str, Option<i64>)> = j
            .finish()
            .iter()
            .map(|e| (e.turn.to_string(), e.kind.type_name(), e.ts_ms))
            .collect();
        assert_eq!(
            got,
            [
                ("other".to_owned(), "text", Some(5)),
                ("s".to_owned(), "attempt_start", Some(10)),
                ("s".to_owned(), "text", Some(20)),
                ("s".to_owned(), "finish", Some(31)),
                // a call the telemetry never logged: the screen's finish is all there is
                ("s#2".to_owned(), "finish", Some(40)),
            ]
        );
        assert!(j.is_empty());
    }

    /// gemini-cli under load exited before its telemetry outfile was flushed (CI, stop 41):
    /// the retry's request was logged, its response never was. The stream-json printed the
    /// retry's answer and its `result`: that attempt finished, and the one the telemetry saw
    /// fail keeps its error.
    #[test]
    fn a_call_whose_last_attempt_the_telemetry_never_saw_end_keeps_the_screens_finish() {
        let mut j = SessionJoiner::default();
        let mut telemetry = vec![
            e("s", 10, turn_start()),
            e(
                "s",
                20,
                EventKind::Error {
                    message: Cow::Borrowed("reset"),
                    code: None,
                },
            ),
            e(
                "s",
                30,
                EventKind::Retry {
                    reason: None,
                    prefill: None,
                },
            ),
        ];
        let finish = |ts| {
            e(
                "s",
                ts,
                EventKind::Finish {
                    reason: Cow::Borrowed("stream_ended"),
                },
            )
        };
        let mut shown = vec![
            finish(19),
            e("s", 35, text("the retry's answer")),
            finish(40),
        ];
        j.push(Source::Telemetry, &mut telemetry);
        j.push(Source::StreamJson, &mut shown);
        let got: Vec<(&str, Option<i64>)> = j
            .finish()
            .iter()
            .map(|e| (e.kind.type_name(), e.ts_ms))
            .collect();
        assert_eq!(
            got,
            [
                ("turn_start", Some(10)),
                ("error", Some(20)),
                ("retry", Some(30)),
                ("text", Some(35)),
                ("finish", Some(40)),
            ]
        );
    }

    /// The telemetry's tail was lost right after an attempt failed: the retry's request and
    /// answer are not in it. The screen streamed more of the call after the failure, which
    /// a failed attempt cannot do: that is the retry, and its finish is the screen's.
    #[test]
    fn what_the_screen_streamed_after_a_logged_failure_is_a_retry_the_telemetry_lost() {
        let error = |ts| {
            e(
                "s",
                ts,
                EventKind::Error {
                    message: Cow::Borrowed("terminated"),
                    code: Some(Cow::Borrowed("ECONNRESET")),
                },
            )
        };
        let finish = |ts| {
            e(
                "s",
                ts,
                EventKind::Finish {
                    reason: Cow::Borrowed("stream_ended"),
                },
            )
        };
        // The joined events as (type, time), and the reasons of the retries among them.
        let joined = |telemetry: &[Event<'static>], shown: &[Event<'static>]| {
            let mut j = SessionJoiner::default();
            j.push(Source::Telemetry, &mut telemetry.to_vec());
            j.push(Source::StreamJson, &mut shown.to_vec());
            let events = j.finish();
            let reasons: Vec<Option<String>> = events
                .iter()
                .filter_map(|e| match &e.kind {
                    EventKind::Retry { reason, .. } => Some(reason.as_deref().map(str::to_owned)),
                    _ => None,
                })
                .collect();
            let kinds: Vec<(&str, Option<i64>)> = events
                .iter()
                .map(|e| (e.kind.type_name(), e.ts_ms))
                .collect();
            (kinds, reasons)
        };
        let start = e("s", 10, turn_start());
        let shown = [
            e("s", 15, text("the first answer, cut")),
            e("s", 20, text("printed as it failed")),
            e("s", 25, text("the retry's answer")),
            finish(40),
        ];
        let (kinds, reasons) = joined(&[start.clone(), error(20)], &shown);
        assert_eq!(
            kinds,
            [
                ("turn_start", Some(10)),
                ("text", Some(15)),
                ("error", Some(20)),
                ("text", Some(20)),
                ("retry", Some(25)),
                ("text", Some(25)),
                ("finish", Some(40)),
            ]
        );
        assert_eq!(reasons, [Some(LOST_RETRY_REASON.to_owned())]);
        // The whole telemetry: its retry stands alone, and its end is the one kept; so too
        // when the failure's record arrives after the retry's (the retry is still the last).
        let retry = e(
            "s",
            22,
            EventKind::Retry {
                reason: None,
                prefill: None,
            },
        );
        let whole = [start.clone(), error(20), retry.clone(), finish(38)];
        let late_failure = [start.clone(), retry, finish(38), error(20)];
        for telemetry in [&whole[..], &late_failure[..]] {
            let (kinds, reasons) = joined(telemetry, &shown);
            assert_eq!(
                kinds,
                [
                    ("turn_start", Some(10)),
                    ("text", Some(15)),
                    ("error", Some(20)),
                    ("text", Some(20)),
                    ("retry", Some(22)),
                    ("text", Some(25)),
                    ("finish", Some(38)),
                ]
            );
            assert_eq!(reasons, [None]);
        }
        // A run that failed for good: the screen shows its end, nothing streamed after.
        let (kinds, _) = joined(&[start, error(20)], &[e("s", 15, text("cut")), error(30)]);
        assert_eq!(
            kinds,
            [
                ("turn_start", Some(10)),
                ("text", Some(15)),
                ("error", Some(20)),
            ]
        );
    }

    /// A live collector joins a session in batches, one per quiet spell (a tool that runs
    /// longer than the quiet time splits the session). gemini-cli's telemetry numbers its
    /// calls across the session as the screen does: a later batch's `s#2` is still `s#2`,
    /// not the batch's first call.
    #[test]
    fn a_later_batch_of_a_session_keeps_its_calls_names() {
        // Qwen Code's telemetry names calls by prompt id (`q########1`): the k-th call of the
        // session is the screen's k-th, counted across batches. A checkpoint between
        // batches keeps the count.
        let batches = [
            ("s", "s", 10),
            ("s#2", "s#2", 30),
            ("q########1", "q", 10),
            ("q########1#2", "q#2", 30),
        ];
        let mut j = SessionJoiner::default();
        for (logged, shown, ts) in batches {
            j = SessionJoiner::restore(j.snapshot());
            j.push(Source::Telemetry, &mut vec![e(logged, ts, turn_start())]);
            j.push(
                Source::StreamJson,
                &mut vec![e(shown, ts + 2, text("shown"))],
            );
            let released: Vec<String> = j
                .release_quiet(0)
                .iter()
                .map(|e| e.turn.to_string())
                .collect();
            assert_eq!(released, [shown, shown]);
        }
        // A session idle for an hour of releases is forgotten.
        for _ in 0..3600 {
            j.release_quiet(0);
        }
        assert!(!j.snapshot().calls.is_empty());
        j.release_quiet(0);
        assert!(j.snapshot().calls.is_empty());
        // gemini-cli's names are the session's own numbering; Qwen Code's are not.
        assert!(names::in_screen_scheme("s#12", "s"));
        assert!(!names::in_screen_scheme("s########0", "s"));
        assert!(!names::in_screen_scheme("s#", "s"));
        assert!(!names::in_screen_scheme("t#2", "s"));
    }

    /// The screen said the run failed (gemini-cli's error `result`) and the telemetry lost
    /// the attempt's end: the failure stands. One the telemetry logged, or without a time
    /// (any attempt's), is the telemetry's to tell.
    #[test]
    fn the_screens_error_stands_where_the_telemetry_lost_the_end() {
        let error = |ts: Option<i64>| Event {
            ts_ms: ts,
            ..e(
                "s",
                0,
                EventKind::Error {
                    message: Cow::Borrowed("quota"),
                    code: None,
                },
            )
        };
        let mut j = SessionJoiner::default();
        j.push(Source::Telemetry, &mut vec![e("s", 10, turn_start())]);
        j.push(
            Source::StreamJson,
            &mut vec![error(Some(5)), error(None), error(Some(40))],
        );
        let got: Vec<(&str, Option<i64>)> = j
            .finish()
            .iter()
            .map(|e| (e.kind.type_name(), e.ts_ms))
            .collect();
        assert_eq!(got, [("turn_start", Some(10)), ("error", Some(40))]);
    }

    /// Held events were read past: a checkpoint carries them, and the restored joiner
    /// releases the same joined events at the same tick.
    #[test]
    fn held_events_round_trip_through_the_checkpoint_form() {
        let mut j = SessionJoiner::default();
        let mut telemetry = vec![
            e(
                "s",
                10,
                EventKind::ToolExec {
                    id: Cow::Borrowed("call-1"),
                    name: Cow::Borrowed("run_shell_command"),
                    args: Some(Cow::Borrowed("{\"command\":\"touch m\"}")),
                    effect_key: None,
                    step: Some(1),
                    effect: Some(crate::event::EffectClass::Write),
                    status: Some(Cow::Borrowed("success")),
                    result: None,
                },
            ),
            e("s", 30, text("logged")),
            e(
                "quiet",
                1,
                EventKind::Usage {
                    usage: crate::event::Usage {
                        input_tokens: 900,
                        output_tokens: 34,
                        ..Default::default()
                    },
                    model: None,
                },
            ),
        ];
        let mut shown = vec![
            e("s", 20, text("shown")),
            e("s#2", 40, EventKind::RenderReset),
        ];
        j.push(Source::Telemetry, &mut telemetry[2..].to_vec());
        assert!(j.release_quiet(5).is_empty());
        telemetry.truncate(2);
        j.push(Source::Telemetry, &mut telemetry);
        j.push(Source::StreamJson, &mut shown);

        let json = serde_json::to_string(&j.snapshot()).unwrap();
        let back: JoinerSnapshot = serde_json::from_str(&json).unwrap();
        assert_eq!(back, j.snapshot());
        let mut restored = SessionJoiner::restore(back);
        for ticks in 0..8 {
            assert_eq!(
                restored.release_quiet(5),
                j.release_quiet(5),
                "tick {ticks}"
            );
        }
        // Nothing held; the session's call names are kept (and alike) for its next batch.
        assert_eq!(restored.snapshot(), j.snapshot());
        assert!(j.snapshot().events.is_empty());
        assert!(!j.snapshot().calls.is_empty());
    }

    #[test]
    fn a_restored_joiner_releases_what_the_original_would() {
        let mut j = SessionJoiner::default();
        j.push(Source::Telemetry, &mut vec![e("s", 30, text("logged"))]);
        j.push(Source::StreamJson, &mut vec![e("s", 20, text("shown"))]);
        let mut restored = SessionJoiner::restore(j.snapshot());
        let got = restored.finish();
        assert_eq!(got, j.finish());
        assert_eq!(
            got.len(),
            1,
            "the stream-json's text replaces the telemetry's"
        );
        assert_eq!(got[0].kind, text("shown"));
    }
}
