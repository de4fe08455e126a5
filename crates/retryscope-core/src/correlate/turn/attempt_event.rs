//! Applying an attempt-scoped event (text, a tool call, an execution, usage, finish, error)
//! to one attempt of a turn: the execution findings known at once (early, abandoned,
//! duplicate effect) and the effect keys of calls and their executions.

use super::{Env, TurnState, first_exact, set_sym};
use crate::correlate::Output;
use crate::correlate::attempt::{CallState, ExecState};
use crate::effect::{canonical_args, effect_key, json_string};
use crate::event::{EffectClass, EventKind};
use crate::report::{MarkKind, Outcome};
use crate::rules;

/// Canonical arguments longer than this are not kept (their key still is).
const MAX_KEPT_ARGS_BYTES: usize = 1024;

impl TurnState {
    /// Apply an attempt-scoped event; `matched_call` is the id of the call an execution was
    /// matched to by content (its own id matched no call).
    pub(super) fn apply_to_attempt(
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
