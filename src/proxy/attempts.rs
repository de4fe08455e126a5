//! Attempts and turns from the wire.
//!
//! Owns: deciding what each model request is (a new conversation, the next step of one, or a
//! retry of the same call), numbering turns and attempts, and writing what happened as native
//! event lines for the one ingest path: `turn_start`, `attempt_start`, `retry`, each raw
//! stream chunk as a `provider_chunk` envelope (the core's provider decoders do the decoding),
//! `error` when an attempt ends without its finish (cut, reset, HTTP error, client gone),
//! and, from the next request's history (`next_request`), `tool_exec` and `output` for the
//! turn before it, then its `turn_end`.
//!
//! Turns follow the agent decoders' convention: one per model call, `<conversation>` then
//! `<conversation>#2`, ... numbered by a per-conversation counter, so two requests that extend
//! the same call (a tool-result request and a resend with a note added) are two turns, never
//! one id twice. A request that asks for the same call again (`retry_match`: the same history
//! resent, or continued from the cut attempt's partial output, after that call's last attempt
//! failed or was cut, or with the SDK's retry counter above 0) is the next attempt of the same
//! turn. A request whose history extends an earlier request's is the next call of that
//! conversation; the messages it adds tell what the client did with the
//! earlier call's answer: the tool results it sends back are executions (of the attempt that
//! produced that call id, abandoned or not), its assistant text is the turn's `output`.
//!
//! The tracker decodes each chunk a second time, with the core's `EnvelopeDecoder`, only to
//! learn call ids, text and whether an attempt finished; findings come from the correlator.
//!
//! Modules: `stream` (what each attempt's stream says, and how it ended), `retry_match`,
//! `next_request`, `place`, `calls` (call ids in a stream), `line` (the native lines).

use std::collections::{HashMap, HashSet, VecDeque};

pub use super::feed::LineSink;
use super::feed::Out;
use super::history::{Api, Request};

mod calls;
mod line;
mod next_request;
mod place;
mod retry_match;
mod stream;

use line::{Fields, Line};
use retry_match::{Kept, RetryOf, Strategy};
use retryscope_core::decode::EnvelopeDecoder;

pub use stream::End;

/// An attempt being streamed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRef {
    /// Turn id.
    pub turn: String,
    /// Attempt number (0: the first try).
    pub attempt: u32,
    /// The API.
    pub api: Api,
}

/// What the tracker has counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrackerStats {
    /// Model requests seen.
    pub requests: u64,
    /// Of which retries of an earlier request.
    pub retries: u64,
    /// Of which the next step of a conversation.
    pub steps: u64,
    /// Tool executions read from histories.
    pub executions: u64,
    /// Payloads that were not JSON (skipped; `[DONE]` is one).
    pub not_json: u64,
    /// Turns forgotten to bound memory.
    pub evicted: u64,
    /// Background response streams resumed (the same attempt, continued).
    pub resumed: u64,
}

/// What the tracker knows of an attempt.
#[derive(Debug, Default)]
struct AttemptState {
    finished: bool,
    ended: bool,
    /// An OpenAI Responses background response: it runs on the server whatever happens to
    /// its stream, and `GET /responses/{id}?stream=true` resumes the same attempt.
    background: bool,
    /// Why it failed, as the next retry's reason.
    cause: Option<String>,
}

#[derive(Debug, Clone)]
struct CallInfo {
    turn: String,
    attempt: u32,
    name: String,
}

struct Turn {
    conversation: String,
    step: u32,
    api: Api,
    attempts: Vec<AttemptState>,
    decoder: EnvelopeDecoder,
    /// Fingerprints of its requests' whole histories (a continuation's differs).
    requests: Vec<u64>,
    /// What its newest attempt streamed (after its prefill), to recognise a continuation.
    kept: Kept,
    closed: bool,
    /// The calls its attempts streamed, to place executions whose ids were never streamed.
    seen: place::Seen,
}

impl Turn {
    /// Its newest attempt failed or was cut (or has not ended).
    fn last_failed(&self) -> bool {
        self.attempts
            .last()
            .is_none_or(|a| !a.finished || a.cause.is_some())
    }
}

/// The tracker: one per proxy, behind a lock.
pub struct Tracker {
    out: Out,
    /// Prefix of conversation ids (unique per process start).
    prefix: String,
    next_conversation: u64,
    turns: HashMap<String, Turn>,
    order: VecDeque<String>,
    by_request: HashMap<u64, String>,
    calls: HashMap<String, CallInfo>,
    /// OpenAI Responses ids, to the turn whose attempt streamed them (`previous_response_id`).
    responses: HashMap<String, (String, u32)>,
    /// Call ids seen in a stream whose call the decoder never completed (cut before its
    /// arguments or finish): if a later history executes one, the client did assemble it.
    partial: HashMap<String, CallInfo>,
    /// Call ids whose execution was already reported, per conversation.
    executed: HashMap<String, HashSet<String>>,
    /// The last call number given in each conversation.
    steps: HashMap<String, u32>,
    max_turns: usize,
    stats: TrackerStats,
    scratch: Vec<retryscope_core::event::Event<'static>>,
    /// The client kind of the request being begun (`super::client`): the new turn's agent.
    pub client: &'static str,
}

/// Turns remembered (for retries and the next step's history) before the oldest is forgotten.
pub const MAX_TURNS: usize = 20_000;

impl Tracker {
    /// A tracker writing to `sink`; `prefix` starts every conversation id (make it unique per
    /// process start, so ids never meet a checkpointed turn of an earlier run).
    pub fn new(sink: Box<dyn LineSink>, prefix: String) -> Self {
        Tracker {
            out: Out::Sink(sink),
            prefix,
            next_conversation: 1,
            turns: HashMap::new(),
            order: VecDeque::new(),
            by_request: HashMap::new(),
            calls: HashMap::new(),
            responses: HashMap::new(),
            partial: HashMap::new(),
            executed: HashMap::new(),
            steps: HashMap::new(),
            max_turns: MAX_TURNS,
            stats: TrackerStats::default(),
            scratch: Vec::new(),
            client: super::client::OTHER,
        }
    }

    /// Counters so far.
    pub fn stats(&self) -> TrackerStats {
        self.stats
    }

    /// Where its lines go (`feed.rs`: the proxy holds them to queue them itself).
    pub(super) fn out(&mut self) -> &mut Out {
        &mut self.out
    }

    fn emit(
        &mut self,
        turn: &str,
        kind: &'static str,
        attempt: Option<u32>,
        ts: i64,
        fields: Fields<'_>,
    ) {
        let line = Line {
            turn,
            kind,
            attempt,
            ts,
            fields,
        };
        match serde_json::to_vec(&line) {
            Ok(bytes) => self.out.line(bytes),
            Err(e) => tracing::warn!(error = %e, "cannot serialize a proxy event"),
        }
    }

    /// A model request for `api` (with its parsed body, when it parsed) is being sent
    /// upstream; `retry_count` is the SDK's retry header. Returns the attempt it starts.
    pub fn begin(
        &mut self,
        api: Api,
        request: Option<&Request>,
        retry_count: Option<u32>,
        now_ms: i64,
    ) -> AttemptRef {
        self.stats.requests += 1;
        let fps = request
            .map(Request::prefix_fingerprints)
            .unwrap_or_default();
        let model = request.and_then(|r| r.model.as_deref());
        let full = fps.last().copied();
        if let Some(of) = self.match_retry(request, &fps, retry_count) {
            let background = request.is_some_and(|r| r.background);
            return self.retry(of, api, full, background, now_ms);
        }
        // The previous call of the conversation: the response a Responses request continues
        // on the server (its input is all new), or the longest earlier history this one
        // extends (the messages after it are new).
        let stateful = request
            .and_then(|r| r.previous_response_id.as_ref())
            .and_then(|id| self.responses.get(id))
            .map(|(t, _)| t)
            .map(|t| (0, t.clone()));
        let server_side = stateful.is_some();
        let parent = stateful.or_else(|| {
            fps.len().checked_sub(1).and_then(|n| {
                (0..n)
                    .rev()
                    .find_map(|i| self.by_request.get(&fps[i]).map(|t| (i + 1, t.clone())))
            })
        });
        let (conversation, step) = match parent {
            Some((from, parent)) => {
                self.stats.steps += 1;
                let messages = request.and_then(|r| r.messages.get(from..)).unwrap_or(&[]);
                self.read_history(&parent, messages, server_side, now_ms);
                if let Some(p) = self.turns.get_mut(&parent)
                    && p.closed
                {
                    // A closed call is retried no more: its text is not needed.
                    p.kept = Kept::default();
                }
                match self.turns.get(&parent).map(|p| p.conversation.clone()) {
                    // One model call, one turn: two requests that extend the same parent (a
                    // tool-result request and a resend with a note added) are two calls.
                    Some(c) => {
                        let step = self.next_step(&c);
                        (c, step)
                    }
                    None => (self.new_conversation(), 1),
                }
            }
            None => (self.new_conversation(), 1),
        };
        let tid = if step == 1 {
            conversation.clone()
        } else {
            format!("{conversation}#{step}")
        };
        self.emit(
            &tid,
            "turn_start",
            None,
            now_ms,
            Fields::TurnStart {
                provider: api.provider(),
                requested_model: model,
                session: &conversation,
                agent: self.client,
                wire_only: true,
            },
        );
        self.emit(
            &tid,
            "attempt_start",
            Some(0),
            now_ms,
            Fields::AttemptStart { model: None },
        );
        self.remember(
            tid.clone(),
            Turn {
                conversation,
                step,
                api,
                attempts: vec![AttemptState {
                    background: request.is_some_and(|r| r.background),
                    ..AttemptState::default()
                }],
                decoder: EnvelopeDecoder::new(),
                requests: full.into_iter().collect(),
                kept: Kept::default(),
                closed: false,
                seen: place::Seen::default(),
            },
        );
        if let Some(full) = full {
            self.by_request.insert(full, tid.clone());
        }
        AttemptRef {
            turn: tid,
            attempt: 0,
            api,
        }
    }

    fn new_conversation(&mut self) -> String {
        let id = format!("{}-{}", self.prefix, self.next_conversation);
        self.next_conversation += 1;
        self.steps.insert(id.clone(), 1);
        id
    }

    /// The next call number of `conversation` (its first call is 1).
    fn next_step(&mut self, conversation: &str) -> u32 {
        let n = self.steps.entry(conversation.to_owned()).or_insert(1);
        *n += 1;
        *n
    }

    /// Another attempt of an earlier call (`retry_match`): its `retry` (with the partial
    /// output a continuation carries) and `attempt_start`. The attempt's model is the one its
    /// response names (a fallback's new model, answered), as for every attempt: one model name
    /// per call, never the requested alias.
    fn retry(
        &mut self,
        of: RetryOf,
        api: Api,
        full: Option<u64>,
        background: bool,
        now_ms: i64,
    ) -> AttemptRef {
        let RetryOf {
            turn: tid,
            strategy,
        } = of;
        let Some(turn) = self.turns.get_mut(&tid) else {
            return AttemptRef {
                turn: tid,
                attempt: 0,
                api,
            };
        };
        let attempt = turn.attempts.len() as u32;
        let reason = turn
            .attempts
            .last()
            .and_then(|a| a.cause.clone())
            .unwrap_or_else(|| "client_retry".to_owned());
        turn.attempts.push(AttemptState {
            background,
            ..AttemptState::default()
        });
        let prefill = match strategy {
            Strategy::Resend => None,
            Strategy::Continuation { prefill } => Some(prefill),
        };
        turn.kept = Kept::starting_with(prefill.as_deref().unwrap_or(""));
        if let Some(full) = full
            && !turn.requests.contains(&full)
        {
            turn.requests.push(full);
            self.by_request.insert(full, tid.clone());
        }
        self.stats.retries += 1;
        self.emit(
            &tid,
            "retry",
            Some(attempt),
            now_ms,
            Fields::Retry {
                reason: &reason,
                prefill: prefill.as_deref(),
            },
        );
        self.emit(
            &tid,
            "attempt_start",
            Some(attempt),
            now_ms,
            Fields::AttemptStart { model: None },
        );
        AttemptRef {
            turn: tid,
            attempt,
            api,
        }
    }

    fn remember(&mut self, tid: String, turn: Turn) {
        self.turns.insert(tid.clone(), turn);
        self.order.push_back(tid);
        while self.turns.len() > self.max_turns {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(t) = self.turns.remove(&old) {
                self.stats.evicted += 1;
                for fp in &t.requests {
                    if self.by_request.get(fp) == Some(&old) {
                        self.by_request.remove(fp);
                    }
                }
                self.calls.retain(|_, c| c.turn != old);
                self.partial.retain(|_, c| c.turn != old);
                self.responses.retain(|_, (t, _)| *t != old);
                if t.step == 1
                    && !self
                        .turns
                        .values()
                        .any(|o| o.conversation == t.conversation)
                {
                    self.executed.remove(&t.conversation);
                    self.steps.remove(&t.conversation);
                }
            }
        }
    }

    /// `GET /responses/{id}?stream=true&starting_after=N`: the client resumes the stream of a
    /// background response this proxy saw begin. The same attempt goes on (its events carry
    /// its number); `None` for a response it never saw.
    pub fn resume(&mut self, response_id: &str) -> Option<AttemptRef> {
        let (turn, attempt) = self.responses.get(response_id).cloned()?;
        let t = self.turns.get_mut(&turn)?;
        let api = t.api;
        let st = t.attempts.get_mut(attempt as usize)?;
        st.ended = false;
        self.stats.resumed += 1;
        Some(AttemptRef { turn, attempt, api })
    }

    /// Whether the turn's attempt has decoded its finish.
    pub fn finished(&self, a: &AttemptRef) -> bool {
        self.turns
            .get(&a.turn)
            .and_then(|t| t.attempts.get(a.attempt as usize))
            .is_some_and(|s| s.finished)
    }

    /// The API a turn was for.
    pub fn api_of(&self, turn: &str) -> Option<Api> {
        self.turns.get(turn).map(|t| t.api)
    }
}

#[cfg(test)]
mod tests;
