//! One open turn: its state, and applying events to it, raising findings as soon as they
//! are known. [`attempt_event`] applies the events of one attempt (text, calls, executions,
//! usage, finish, error); [`close`] builds the [`TurnReport`] when the turn closes.
//!
//! [`TurnReport`]: crate::report::TurnReport

mod attempt_event;
mod close;

use serde::{Deserialize, Serialize};

use super::attempt::{AttemptState, Continuation};
use super::attribute::attribute_exec;
use super::intern::{Interner, Sym};
use super::splice::OutputState;
use super::{CorrelatorConfig, CorrelatorStats, Output, TurnLabels};

/// What applying an event may read or update besides the turn itself.
pub(crate) struct Env<'a> {
    pub cfg: &'a CorrelatorConfig,
    pub stats: &'a mut CorrelatorStats,
    pub interner: &'a mut Interner,
}
use crate::event::{Event, EventKind};
use crate::finding::Finding;
use crate::report::{MarkKind, Outcome};
use crate::rules;
use crate::turn_route::Route;

/// The input and line that opened a turn (a [`TurnSource`] once reported).
///
/// [`TurnSource`]: crate::report::TurnSource
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Origin {
    pub input: std::sync::Arc<str>,
    pub line: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TurnState {
    id: Box<str>,
    opened_seq: u64,
    model: Option<Sym>,
    /// The model the request asked for, when told apart (`turn_start` `requested_model`).
    /// Boxed: rare (the proxy's turns), and open turns are the correlator's memory.
    #[serde(default)]
    requested_model: Option<Box<Sym>>,
    provider: Option<Sym>,
    session: Option<Box<str>>,
    /// Where the turn came from (see [`crate::report::TurnSource`]); boxed, the name shared
    /// with its stream.
    #[serde(default)]
    source: Option<Box<Origin>>,
    agent: Option<Sym>,
    traceparent: Option<Box<str>>,
    /// Earliest and latest event time (8 bytes each: open turns are the correlator's memory;
    /// with these, the state fits a 256-byte allocation).
    #[serde(default, with = "opt_ms")]
    first_ms: OptMs,
    #[serde(default, with = "opt_ms")]
    last_ms: OptMs,
    last_arrival_ms: i64,
    /// Turn-local event counter (orders texts against render resets).
    seq: u64,
    last_reset_seq: u64,
    attempts: Vec<AttemptState>,
    /// Non-read executions by effect key: (key, attempt, call id).
    effects: Vec<(String, u32, String)>,
    /// Boxed: most open turns have no output yet (one pointer instead of ~100 bytes each).
    output: Option<Box<OutputState>>,
    /// An attempt whose text followed an earlier attempt's text with no render reset between.
    no_reset_attempt: Option<(u32, u32)>,
    /// The log sees provider traffic, not the display (`turn_start` `wire_only`): no render
    /// reset can show in it, so only the output proves a splice.
    #[serde(default)]
    wire_only: bool,
    cap_flagged: bool,
    /// The route of the feed that opened the turn (0: native lines, routed by the id; see
    /// [`crate::turn_route::shard_of_turn`]), so a sharded engine restores it where its next
    /// events will go.
    #[serde(default, skip_serializing_if = "is_zero")]
    route: Route,
    findings: Vec<Finding>,
}

fn is_zero(v: &Route) -> bool {
    *v == 0
}

impl TurnState {
    pub(crate) fn new(
        id: String,
        opened_seq: u64,
        now_ms: i64,
        source: Option<Box<Origin>>,
        route: Route,
    ) -> Self {
        TurnState {
            id: id.into(),
            opened_seq,
            model: None,
            requested_model: None,
            provider: None,
            session: None,
            source,
            agent: None,
            traceparent: None,
            first_ms: OptMs::NONE,
            last_ms: OptMs::NONE,
            last_arrival_ms: now_ms,
            seq: 0,
            last_reset_seq: 0,
            attempts: Vec::new(),
            effects: Vec::new(),
            output: None,
            no_reset_attempt: None,
            wire_only: false,
            cap_flagged: false,
            route,
            findings: Vec::new(),
        }
    }

    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    pub(crate) fn opened_seq(&self) -> u64 {
        self.opened_seq
    }

    /// The route of the feed that opened the turn (0: native lines).
    pub(crate) fn route(&self) -> Route {
        self.route
    }

    pub(crate) fn last_arrival_ms(&self) -> i64 {
        self.last_arrival_ms
    }

    /// The input that opened it, when it was told ([`Correlator::set_origin`]).
    ///
    /// [`Correlator::set_origin`]: super::Correlator::set_origin
    pub(crate) fn source_input(&self) -> Option<&std::sync::Arc<str>> {
        self.source.as_ref().map(|o| &o.input)
    }

    /// A wire-only turn whose latest attempt has not ended: its response is still in flight
    /// (a proxy ends every attempt it begins), so silence does not mean the turn is over.
    pub(crate) fn in_flight(&self) -> bool {
        self.wire_only && self.attempts.last().is_some_and(|a| a.is_open())
    }

    /// A turn whose latest attempt asked for tool calls that have not run yet (no execution
    /// of them, no output), from a source that records executions: the client is running
    /// its tools, and a build or a test suite may run for longer than the idle timeout.
    /// Closing the turn then would drop the execution that follows (counted as an event after
    /// close), and with it any finding it raises.
    ///
    /// The attempt has finished, or, in an agent's own log or telemetry, is still open: an
    /// agent writes a call, runs it, and writes the response's end after (Claude Code, Codex,
    /// gemini-cli and Qwen Code all do). On the wire an open attempt is a response still in
    /// flight ([`TurnState::in_flight`]).
    ///
    /// A source records executions when it is the wire (a proxy sees the next request, which
    /// shows them), when this turn has shown one already (an earlier step's tool ran), or
    /// when its input does (`input_records_execs`, asked last, only of such a turn: an input
    /// that has shown one, or whose decoder says it always does). A provider stream never
    /// shows an execution: its turns are idle-closed as before.
    pub(crate) fn awaiting_tools(
        &self,
        input_records_execs: impl FnOnce(&std::sync::Arc<str>) -> bool,
    ) -> bool {
        use crate::report::Outcome;
        self.output.is_none()
            && self.attempts.last().is_some_and(|a| {
                let asked = match a.outcome {
                    Outcome::Completed => true,
                    Outcome::Open => !self.wire_only,
                    Outcome::Abandoned | Outcome::Failed => false,
                };
                asked
                    && a.calls
                        .iter()
                        .any(|c| !a.execs.iter().any(|e| *e.id == *c.id))
            })
            && (self.wire_only
                || self.attempts.iter().any(|a| !a.execs.is_empty())
                || self.source_input().is_some_and(input_records_execs))
    }

    fn labels(&self) -> TurnLabels {
        TurnLabels {
            model: self
                .model
                .clone()
                .or_else(|| {
                    self.attempts
                        .iter()
                        .rev()
                        .find_map(|a| a.model.clone().or_else(|| a.usage_model.clone()))
                })
                .map(|m| m.to_string()),
            provider: self.provider.as_ref().map(|p| p.to_string()),
            agent: self.agent.as_ref().map(|a| a.to_string()),
        }
    }

    fn emit(&mut self, finding: Finding, out: &mut Vec<Output>) {
        out.push(Output::Finding(finding.clone(), self.labels()));
        first_exact(&mut self.findings);
        self.findings.push(finding);
    }

    fn max_attempt(&self) -> Option<u32> {
        self.attempts.last().map(|a| a.number)
    }

    fn index_of(&self, n: u32) -> Option<usize> {
        self.attempts.binary_search_by_key(&n, |a| a.number).ok()
    }

    pub(crate) fn apply(
        &mut self,
        ev: &Event<'_>,
        ts: i64,
        now_ms: i64,
        env: &mut Env<'_>,
        out: &mut Vec<Output>,
    ) {
        self.seq += 1;
        self.last_arrival_ms = self.last_arrival_ms.max(now_ms);
        self.first_ms = OptMs::some(self.first_ms.get().map_or(ts, |f| f.min(ts)));
        self.last_ms = OptMs::some(self.last_ms.get().map_or(ts, |l| l.max(ts)));
        match &ev.kind {
            EventKind::TurnStart {
                model,
                requested_model,
                provider,
                session,
                agent,
                traceparent,
                wire_only,
            } => {
                self.wire_only |= *wire_only;
                set_sym(&mut self.model, model, env.interner);
                if let Some(m) = requested_model
                    && !m.is_empty()
                {
                    self.requested_model = Some(Box::new(env.interner.get(m)));
                }
                set_sym(&mut self.provider, provider, env.interner);
                set_if(&mut self.session, session);
                set_sym(&mut self.agent, agent, env.interner);
                set_if(&mut self.traceparent, traceparent);
            }
            EventKind::TurnEnd { .. } => {}
            EventKind::RenderReset => {
                self.last_reset_seq = self.seq;
                if let Some(i) = ev.attempt.and_then(|n| self.index_of(n)) {
                    self.attempts[i].mark(env.cfg.timeline, MarkKind::RenderReset, ts, 0, None);
                }
            }
            EventKind::Output { text } => {
                self.output = Some(Box::new(OutputState::new(
                    text,
                    &self.attempts,
                    env.cfg.text_prefix_bytes,
                )));
            }
            EventKind::Retry { reason, prefill } => {
                let n = ev
                    .attempt
                    .unwrap_or_else(|| self.max_attempt().map_or(0, |m| m + 1));
                if self.index_of(n).is_some() && self.max_attempt().is_some_and(|m| n < m) {
                    // A retry into an attempt older than the newest: out of order.
                    env.stats.late_events += 1;
                }
                let idx = self.ensure_attempt(n, ts, reason.as_deref(), env, out);
                if let Some(reason) = reason
                    && self.attempts[idx].retry_reason.is_none()
                {
                    self.attempts[idx].retry_reason = Some(env.interner.get(reason));
                }
                if let Some(prefill) = prefill
                    && self.attempts[idx].continues.is_none()
                    && self.attempts[idx].text.chars == 0
                {
                    self.attempts[idx].continues = Some(Box::new(Continuation::of(
                        prefill,
                        env.cfg.text_prefix_bytes,
                    )));
                }
            }
            EventKind::StreamSplice { signal } => {
                let n = ev
                    .attempt
                    .unwrap_or_else(|| self.max_attempt().map_or(0, |m| m + 1));
                if let Some(prev) = n.checked_sub(1)
                    && self.index_of(prev).is_none()
                    && self.max_attempt().is_none_or(|m| m < prev)
                {
                    // The replaced generation streamed nothing kept here (only reasoning, or a
                    // call cut mid-arguments); it still existed and is billed.
                    let start = self.first_ms.get().unwrap_or(ts);
                    let i = self.ensure_attempt(prev, start, None, env, out);
                    self.attempts[i].touch(ts);
                }
                self.ensure_attempt(n, ts, Some("spliced_stream"), env, out);
                let finding = rules::spliced_stream::on_splice(&self.id, n, signal, ts);
                self.emit(finding, out);
            }
            kind => {
                let (n, matched_call) = match (ev.attempt, kind) {
                    (Some(n), _) => (n, None),
                    (None, EventKind::ToolExec { id, name, args, .. }) => {
                        let a = attribute_exec(&self.id, &self.attempts, id, name, args.as_deref());
                        (a.attempt, a.call_id)
                    }
                    (None, _) => (self.max_attempt().unwrap_or(0), None),
                };
                let idx = self.ensure_attempt(n, ts, None, env, out);
                self.apply_to_attempt(idx, kind, matched_call, ts, env, out);
            }
        }
    }

    /// The index of attempt `n`, creating it (and treating its appearance as a retry that
    /// abandons every lower unfinished attempt) when new.
    fn ensure_attempt(
        &mut self,
        n: u32,
        ts: i64,
        reason: Option<&str>,
        env: &mut Env<'_>,
        out: &mut Vec<Output>,
    ) -> usize {
        if let Some(i) = self.index_of(n) {
            self.attempts[i].touch(ts);
            return i;
        }
        let newest = self.max_attempt().is_none_or(|m| n > m);
        let pos = self.attempts.partition_point(|a| a.number < n);
        let mut attempt = AttemptState::new(n, ts);
        if !newest {
            // An attempt older than one already seen: it was replaced before we saw it.
            env.stats.late_events += 1;
            attempt.outcome = Outcome::Abandoned;
        }
        first_exact(&mut self.attempts);
        self.attempts.insert(pos, attempt);
        if n > 0 {
            out.push(Output::Retry {
                labels: self.labels(),
                reason: reason.map(str::to_owned),
            });
        }
        if !self.cap_flagged
            && let Some(finding) =
                rules::retry_cap_exceeded::on_new_attempt(&self.id, n, env.cfg.retry_cap, ts)
        {
            self.cap_flagged = true;
            self.emit(finding, out);
        }
        if newest {
            for i in 0..pos {
                if matches!(self.attempts[i].outcome, Outcome::Open | Outcome::Failed) {
                    self.abandon(i, ts, out);
                }
            }
        }
        pos
    }

    fn abandon(&mut self, idx: usize, ts: i64, out: &mut Vec<Output>) {
        let attempt = &mut self.attempts[idx];
        attempt.outcome = Outcome::Abandoned;
        attempt.ended_ms = attempt.ended_ms.max(ts);
        let number = attempt.number;
        let mut findings = Vec::new();
        for exec in attempt.execs.iter_mut() {
            if !exec.read && !exec.flagged_abandoned {
                exec.flagged_abandoned = true;
                findings.push(rules::abandoned_tool_executed::on_abandon(
                    &self.id,
                    number,
                    exec.call(),
                    exec.stopped,
                    exec.result.as_deref(),
                    ts,
                ));
            }
        }
        for f in findings {
            self.emit(f, out);
        }
    }
}

/// Most turns have one attempt, one call, one execution: the first element gets an exact
/// allocation (a plain push would reserve room for four), later ones grow as usual.
fn first_exact<T>(v: &mut Vec<T>) {
    if v.capacity() == 0 {
        v.reserve_exact(1);
    }
}

fn set_sym(
    slot: &mut Option<Sym>,
    value: &Option<std::borrow::Cow<'_, str>>,
    interner: &mut Interner,
) {
    if let Some(v) = value
        && !v.is_empty()
    {
        *slot = Some(interner.get(v));
    }
}

fn set_if(slot: &mut Option<Box<str>>, value: &Option<std::borrow::Cow<'_, str>>) {
    if let Some(v) = value
        && !v.is_empty()
    {
        *slot = Some(v.as_ref().into());
    }
}

/// A time in milliseconds, or none, in 8 bytes (`Option<i64>` takes 16): `i64::MIN` is none
/// (a time that far out means nothing anyway).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct OptMs(i64);

impl OptMs {
    const NONE: OptMs = OptMs(i64::MIN);

    fn some(ms: i64) -> Self {
        OptMs(ms)
    }

    fn get(self) -> Option<i64> {
        (self != Self::NONE).then_some(self.0)
    }
}

impl Default for OptMs {
    fn default() -> Self {
        Self::NONE
    }
}

/// [`OptMs`] serialised as `Option<i64>`, as checkpoints have always written these times.
mod opt_ms {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::OptMs;

    pub(crate) fn serialize<S: Serializer>(v: &OptMs, s: S) -> Result<S::Ok, S::Error> {
        v.get().serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<OptMs, D::Error> {
        Ok(Option::<i64>::deserialize(d)?.map_or(OptMs::NONE, OptMs::some))
    }
}
