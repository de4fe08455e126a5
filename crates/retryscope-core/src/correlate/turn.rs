//! One open turn: applying events to its attempts, raising findings as soon as they are known,
//! and building the [`TurnReport`] when it closes (usage estimates, cost, close-time findings).

use serde::{Deserialize, Serialize};

use super::attempt::{AttemptState, CallState, Continuation, ExecState};
use super::attribute::attribute_exec;
use super::intern::{Interner, Sym};
use super::splice::{OutputState, spliced_attempt};
use super::{CorrelatorConfig, CorrelatorStats, Output, TurnLabels};

/// What applying an event may read or update besides the turn itself.
pub struct Env<'a> {
    pub cfg: &'a CorrelatorConfig,
    pub stats: &'a mut CorrelatorStats,
    pub interner: &'a mut Interner,
}
use crate::cost::{PriceTable, estimate_tokens};
use crate::effect::{canonical_args, effect_key, json_string};
use crate::event::{EffectClass, Event, EventKind, Usage};
use crate::finding::Finding;
use crate::report::{
    AttemptReport, CallReport, CloseReason, ExecReport, MarkKind, Outcome, TurnReport, TurnSource,
    TurnStatus, UsageReport, UsageSource,
};
use crate::rules;
use crate::turn_route::Route;

/// Canonical arguments longer than this are not kept (their key still is).
const MAX_KEPT_ARGS_BYTES: usize = 1024;

/// The input and line that opened a turn (a [`TurnSource`] once reported).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    pub input: std::sync::Arc<str>,
    pub line: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnState {
    id: Box<str>,
    opened_seq: u64,
    model: Option<Sym>,
    /// The model the request asked for, when told apart (`turn_start` `requested_model`).
    /// Boxed: rare (the proxy's turns), and open turns are the correlator's memory.
    #[serde(default)]
    requested_model: Option<Box<Sym>>,
    provider: Option<Sym>,
    session: Option<Box<str>>,
    /// Where the turn came from (see [`TurnSource`]); boxed, the name shared with its stream.
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
    pub fn new(
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

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn opened_seq(&self) -> u64 {
        self.opened_seq
    }

    /// The route of the feed that opened the turn (0: native lines).
    pub fn route(&self) -> Route {
        self.route
    }

    pub fn last_arrival_ms(&self) -> i64 {
        self.last_arrival_ms
    }

    /// A wire-only turn whose latest attempt has not ended: its response is still in flight
    /// (a proxy ends every attempt it begins), so silence does not mean the turn is over.
    pub fn in_flight(&self) -> bool {
        self.wire_only && self.attempts.last().is_some_and(|a| a.is_open())
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

    pub fn apply(
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

    /// Apply an attempt-scoped event; `matched_call` is the id of the call an execution was
    /// matched to by content (its own id matched no call).
    fn apply_to_attempt(
        &mut self,
        idx: usize,
        kind: &EventKind<'_>,
        matched_call: Option<String>,
        ts: i64,
        env: &mut Env<'_>,
        out: &mut Vec<Output>,
    ) {
        let replaced = !self.attempts[idx].is_open()
            && self
                .max_attempt()
                .is_some_and(|m| m > self.attempts[idx].number);
        match kind {
            EventKind::AttemptStart { model, .. } => {
                set_sym(&mut self.attempts[idx].model, model, env.interner);
            }
            EventKind::Text { text } => {
                if replaced {
                    env.stats.late_events += 1;
                }
                let seq = self.seq;
                let number = self.attempts[idx].number;
                // A continuation keeps the earlier text on screen by design.
                if self.attempts[idx].text.chars == 0
                    && self.attempts[idx].continues.is_none()
                    && self.no_reset_attempt.is_none()
                    && let Some(earlier) = self.attempts[..idx]
                        .iter()
                        .rev()
                        .find(|a| a.text.chars > 0 && a.last_text_seq > self.last_reset_seq)
                {
                    self.no_reset_attempt = Some((number, earlier.number));
                }
                let attempt = &mut self.attempts[idx];
                let chars = attempt.text.push(text, env.cfg.text_prefix_bytes);
                if let Some(c) = attempt.continues.as_mut() {
                    c.kept.push(text, env.cfg.text_prefix_bytes);
                }
                attempt.last_text_seq = seq;
                attempt.mark(env.cfg.timeline, MarkKind::Text, ts, chars, None);
            }
            EventKind::ToolCall { id, name, args } => {
                if replaced {
                    env.stats.late_events += 1;
                }
                let canonical = canonical_args(args.as_deref());
                let key = effect_key(&self.id, name, &canonical, None);
                let attempt = &mut self.attempts[idx];
                attempt.args_chars += args.as_deref().map_or(0, |a| a.chars().count() as u64);
                if attempt.call(id).is_none() {
                    attempt.mark(env.cfg.timeline, MarkKind::ToolCall, ts, 0, Some(id));
                    first_exact(&mut attempt.calls);
                    attempt.calls.push(CallState {
                        id: id.as_ref().into(),
                        name: env.interner.get(name),
                        effect_key: key.into(),
                        canonical_args: (canonical.len() <= MAX_KEPT_ARGS_BYTES)
                            .then(|| canonical.into()),
                    });
                }
                self.resolve_pending(idx, id, out);
            }
            EventKind::ToolExec {
                id,
                name,
                args,
                effect_key: client_key,
                step,
                effect,
                status,
                result,
            } => {
                let read = *effect == Some(EffectClass::Read)
                    || env.cfg.read_only_tools.contains(name.as_ref());
                let key = if let Some(k) = client_key {
                    Some(k.to_string())
                } else if args.is_some() {
                    Some(effect_key(
                        &self.id,
                        name,
                        &canonical_args(args.as_deref()),
                        *step,
                    ))
                } else {
                    self.attempts[idx]
                        .call(id)
                        .map(|call| stepped_key(&self.id, call, *step))
                };
                let exec = ExecState {
                    id: matched_call.unwrap_or_else(|| id.to_string()),
                    name: env.interner.get(name),
                    effect_key: key,
                    step: *step,
                    read,
                    status: status.as_deref().map(|s| env.interner.get(s)),
                    ts_ms: ts,
                    flagged_abandoned: false,
                    stopped: rules::abandoned_tool_executed::stopped(
                        status.as_deref(),
                        result.as_deref(),
                    ),
                    result: None,
                };
                // The result's words leave the process only with content capture.
                let exec = ExecState {
                    result: (exec.stopped.is_some() && env.cfg.capture_content)
                        .then(|| result.as_deref().map(crate::event::result_excerpt))
                        .flatten(),
                    ..exec
                };
                self.record_exec(idx, exec, ts, out);
            }
            EventKind::Usage { usage, model } => {
                let attempt = &mut self.attempts[idx];
                attempt.mark(env.cfg.timeline, MarkKind::Usage, ts, 0, None);
                attempt.usage = Some(Box::new(*usage));
                set_sym(&mut attempt.usage_model, model, env.interner);
            }
            EventKind::Finish { reason } => {
                let attempt = &mut self.attempts[idx];
                attempt.mark(env.cfg.timeline, MarkKind::Finish, ts, 0, None);
                attempt.finish_reason = Some(env.interner.get(reason));
                match attempt.outcome {
                    Outcome::Open => {
                        attempt.outcome = Outcome::Completed;
                        attempt.ended_ms = ts;
                    }
                    // A finish logged after the retry that replaced it: out of order.
                    Outcome::Abandoned => env.stats.late_events += 1,
                    Outcome::Completed | Outcome::Failed => {}
                }
            }
            EventKind::Error { message, code } => {
                let attempt = &mut self.attempts[idx];
                attempt.mark(env.cfg.timeline, MarkKind::Error, ts, 0, None);
                attempt.error = Some(
                    match code {
                        Some(code) if message.is_empty() => code.to_string(),
                        Some(code) => format!("{code}: {message}"),
                        None => message.to_string(),
                    }
                    .into(),
                );
                if attempt.outcome == Outcome::Open {
                    attempt.outcome = Outcome::Failed;
                    attempt.ended_ms = ts;
                }
            }
            // Turn-scoped kinds are handled by `apply`.
            _ => {}
        }
    }

    fn record_exec(&mut self, idx: usize, mut exec: ExecState, ts: i64, out: &mut Vec<Output>) {
        let number = self.attempts[idx].number;
        let outcome = self.attempts[idx].outcome;
        if !exec.read {
            if outcome == Outcome::Open {
                let f =
                    rules::early_execution::on_exec_while_open(&self.id, number, exec.call(), ts);
                self.emit(f, out);
            }
            if outcome == Outcome::Abandoned {
                exec.flagged_abandoned = true;
                let f = rules::abandoned_tool_executed::on_exec_after(
                    &self.id,
                    number,
                    exec.call(),
                    exec.stopped,
                    exec.result.as_deref(),
                    ts,
                );
                self.emit(f, out);
            }
        }
        if let Some(key) = exec.effect_key.clone()
            && !exec.read
        {
            self.check_duplicate(number, &exec, &key, ts, out);
        }
        first_exact(&mut self.attempts[idx].execs);
        self.attempts[idx].execs.push(exec);
    }

    fn check_duplicate(
        &mut self,
        number: u32,
        exec: &ExecState,
        key: &str,
        ts: i64,
        out: &mut Vec<Output>,
    ) {
        if let Some((_, first_attempt, first_call)) =
            self.effects.iter().find(|(k, _, _)| k == key).cloned()
        {
            let call = rules::Call {
                effect_key: Some(key),
                ..exec.call()
            };
            let f = rules::duplicate_effect::on_repeat(
                &self.id,
                number,
                call,
                first_attempt,
                &first_call,
                ts,
            );
            self.emit(f, out);
        } else {
            first_exact(&mut self.effects);
            self.effects.push((key.to_owned(), number, exec.id.clone()));
        }
    }

    /// A call arrived: executions of it logged earlier without arguments get their key now.
    fn resolve_pending(&mut self, idx: usize, call_id: &str, out: &mut Vec<Output>) {
        let Some(call) = self.attempts[idx].call(call_id).cloned() else {
            return;
        };
        let number = self.attempts[idx].number;
        let pending: Vec<usize> = self.attempts[idx]
            .execs
            .iter()
            .enumerate()
            .filter(|(_, e)| e.id == call_id && e.effect_key.is_none())
            .map(|(i, _)| i)
            .collect();
        for i in pending {
            let key = stepped_key(&self.id, &call, self.attempts[idx].execs[i].step);
            self.attempts[idx].execs[i].effect_key = Some(key.clone());
            let exec = self.attempts[idx].execs[i].clone();
            if !exec.read {
                self.check_duplicate(number, &exec, &key, exec.ts_ms, out);
            }
        }
    }

    pub fn close(
        mut self,
        closed_by: CloseReason,
        prices: &PriceTable,
        capture_content: bool,
        out: &mut Vec<Output>,
    ) -> TurnReport {
        let end_ts = self.last_ms.get().unwrap_or(self.last_arrival_ms);
        // Executions whose call never appeared: key them by call id so they stay apart.
        for a in 0..self.attempts.len() {
            for e in 0..self.attempts[a].execs.len() {
                if self.attempts[a].execs[e].effect_key.is_none() {
                    let exec = &self.attempts[a].execs[e];
                    let key = effect_key(
                        &self.id,
                        &exec.name,
                        &format!("{{\"unresolved_call_id\":{}}}", json_string(&exec.id)),
                        exec.step,
                    );
                    self.attempts[a].execs[e].effect_key = Some(key);
                }
            }
        }
        let unfinished: Vec<_> = self
            .attempts
            .iter()
            .flat_map(|a| {
                let id = &self.id;
                a.execs.iter().filter(|e| !e.read).filter_map(move |e| {
                    rules::unfinished_tool_executed::on_close(
                        id,
                        a.number,
                        a.outcome,
                        e.call(),
                        e.ts_ms,
                        closed_by,
                    )
                })
            })
            .collect();
        for f in unfinished {
            self.emit(f, out);
        }
        let final_idx = self
            .attempts
            .iter()
            .rposition(|a| a.outcome == Outcome::Completed)
            .or_else(|| self.attempts.len().checked_sub(1));
        // Spliced text: judged by the output when the client logged one, else by resets
        // (which a wire-only log cannot show, so there the output is the only proof).
        let spliced = match (&self.output, final_idx) {
            (Some(output), Some(fi)) => spliced_attempt(output, &self.attempts, &self.attempts[fi])
                .map(|s| {
                    let proof = match s.overlap {
                        Some(overlap) => rules::spliced_text::Proof::Restart { overlap },
                        None => rules::spliced_text::Proof::Output,
                    };
                    (s.attempt, proof)
                }),
            (Some(_), None) => None,
            (None, _) if self.wire_only => None,
            (None, _) => self
                .no_reset_attempt
                .map(|(_, earlier)| (earlier, rules::spliced_text::Proof::NoReset)),
        };
        if let Some((attempt, proof)) = spliced {
            let f = rules::spliced_text::on_close(&self.id, attempt, &proof, end_ts);
            self.emit(f, out);
        }
        let any_completed = self
            .attempts
            .iter()
            .any(|a| a.outcome == Outcome::Completed);
        if let Some(f) = rules::incomplete_turn::on_close(
            &self.id,
            any_completed,
            self.max_attempt(),
            closed_by,
            end_ts,
        ) {
            self.emit(f, out);
        }
        let status = if any_completed {
            TurnStatus::Completed
        } else if self
            .attempts
            .last()
            .is_some_and(|a| a.outcome == Outcome::Failed)
        {
            TurnStatus::Failed
        } else {
            TurnStatus::Incomplete
        };
        let labels = self.labels();
        let attempts = self.attempt_reports(prices, labels.model.as_deref(), capture_content);
        // Adding 0.0 turns the empty sum's -0.0 into 0.0 (no "-0.0" in JSON reports).
        let cost_usd = attempts.iter().filter_map(|a| a.cost_usd).sum::<f64>() + 0.0;
        let wasted_cost_usd = attempts
            .iter()
            .filter(|a| a.outcome.is_wasted())
            .filter_map(|a| a.cost_usd)
            .sum::<f64>()
            + 0.0;
        TurnReport {
            turn: self.id.into(),
            model: labels.model,
            requested_model: self.requested_model.map(|m| m.as_ref().to_string()),
            provider: self.provider.map(|p| p.to_string()),
            agent: self.agent.map(|a| a.to_string()),
            session: self.session.map(String::from),
            source: self.source.map(|o| TurnSource {
                input: o.input.to_string(),
                line: o.line,
            }),
            traceparent: self.traceparent.map(String::from),
            status,
            closed_by,
            retries: self.attempts.len().saturating_sub(1) as u32,
            cost_usd,
            wasted_cost_usd,
            output_prefix: self
                .output
                .as_ref()
                .filter(|_| capture_content)
                .map(|o| o.text.prefix.clone()),
            output_chars: self.output.as_ref().map(|o| o.text.chars),
            started_ms: self.first_ms.get(),
            ended_ms: self.last_ms.get(),
            attempts,
            findings: self.findings,
            opened_seq: self.opened_seq,
        }
    }

    fn attempt_reports(
        &self,
        prices: &PriceTable,
        turn_model: Option<&str>,
        capture_content: bool,
    ) -> Vec<AttemptReport> {
        self.attempts
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let usage = self.billed_usage(i);
                let model = a
                    .usage_model
                    .as_deref()
                    .or(a.model.as_deref())
                    .or(turn_model);
                let cost_usd = match (model, usage.source) {
                    (_, UsageSource::None) => Some(0.0),
                    (Some(m), _) => prices.lookup(m).map(|p| p.cost(&usage.tokens)),
                    (None, _) => None,
                };
                AttemptReport {
                    attempt: a.number,
                    outcome: a.outcome,
                    finish_reason: a.finish_reason.as_ref().map(|r| r.to_string()),
                    error: a
                        .error
                        .as_deref()
                        .filter(|_| capture_content)
                        .map(String::from),
                    error_chars: a.error.as_ref().map(|e| e.chars().count() as u64),
                    retry_reason: a.retry_reason.as_ref().map(|r| r.to_string()),
                    model: a
                        .model
                        .as_ref()
                        .or(a.usage_model.as_ref())
                        .map(|m| m.to_string()),
                    text_chars: a.text.chars,
                    text_prefix: capture_content.then(|| a.text.prefix.clone()),
                    tool_calls: a
                        .calls
                        .iter()
                        .map(|c| CallReport {
                            id: c.id.to_string(),
                            name: c.name.to_string(),
                            effect_key: c.effect_key.to_string(),
                        })
                        .collect(),
                    executed: a
                        .execs
                        .iter()
                        .map(|e| ExecReport {
                            id: e.id.clone(),
                            name: e.name.to_string(),
                            effect_key: e.effect_key.clone().unwrap_or_default(),
                            read: e.read,
                            status: e.status.as_ref().map(|s| s.to_string()),
                            ts_ms: Some(e.ts_ms),
                        })
                        .collect(),
                    usage,
                    cost_usd,
                    started_ms: Some(a.started_ms),
                    ended_ms: Some(a.ended_ms),
                    timeline: a.marks.as_ref().map(|m| m.list.clone()).unwrap_or_default(),
                    timeline_dropped: a.marks.as_ref().map_or(0, |m| m.dropped),
                }
            })
            .collect()
    }

    /// Reported usage, or an estimate for attempts cut before their usage arrived.
    fn billed_usage(&self, i: usize) -> UsageReport {
        let a = &self.attempts[i];
        if let Some(tokens) = a.usage.as_deref().copied() {
            return UsageReport {
                tokens,
                source: UsageSource::Reported,
            };
        }
        if a.outcome == Outcome::Completed {
            return UsageReport {
                tokens: Usage::default(),
                source: UsageSource::None,
            };
        }
        // Retries resend the same prompt: the nearest attempt that reported input is the basis.
        let input = self
            .attempts
            .iter()
            .enumerate()
            .filter(|(j, other)| *j != i && other.usage.is_some())
            .min_by_key(|(j, _)| (j.abs_diff(i), *j))
            .and_then(|(_, other)| other.usage.as_deref().copied())
            .map(|u| (u.input_tokens, u.cached_input_tokens));
        let output = estimate_tokens(a.text.chars + a.args_chars);
        if input.is_none() && output == 0 {
            return UsageReport {
                tokens: Usage::default(),
                source: UsageSource::None,
            };
        }
        let (input_tokens, cached_input_tokens) = input.unwrap_or((0, 0));
        UsageReport {
            tokens: Usage {
                input_tokens,
                output_tokens: output,
                cached_input_tokens,
                cache_write_tokens: 0,
                reasoning_tokens: 0,
            },
            source: UsageSource::Estimated,
        }
    }
}

fn stepped_key(turn: &str, call: &CallState, step: Option<i64>) -> String {
    match (step, &call.canonical_args) {
        (None, _) => call.effect_key.to_string(),
        (Some(step), Some(args)) => effect_key(turn, &call.name, args, Some(step)),
        // Arguments too large to keep: derive the stepped key from the call's key.
        (Some(step), None) => effect_key(
            turn,
            &call.name,
            &format!("{{\"call_effect_key\":{}}}", json_string(&call.effect_key)),
            Some(step),
        ),
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

    pub fn serialize<S: Serializer>(v: &OptMs, s: S) -> Result<S::Ok, S::Error> {
        v.get().serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<OptMs, D::Error> {
        Ok(Option::<i64>::deserialize(d)?.map_or(OptMs::NONE, OptMs::some))
    }
}
