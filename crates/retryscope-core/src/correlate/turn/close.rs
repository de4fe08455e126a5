//! Closing a turn: the findings known only at close (unfinished executions, spliced text,
//! an incomplete turn), its status, and the [`TurnReport`] with each attempt's billed usage
//! (reported, or estimated for an attempt cut before its usage arrived) and cost.

use super::TurnState;
use crate::correlate::Output;
use crate::correlate::splice::spliced_attempt;
use crate::cost::{PriceTable, estimate_tokens};
use crate::effect::{effect_key, json_string};
use crate::event::Usage;
use crate::report::{
    AttemptReport, CallReport, CloseReason, ExecReport, Outcome, TurnReport, TurnSource,
    TurnStatus, UsageReport, UsageSource,
};
use crate::rules;

impl TurnState {
    pub(crate) fn close(
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
