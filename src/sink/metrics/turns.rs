//! The turn-level series: what a correlator [`Output`] moves (a retry and a finding at once,
//! a closed turn its turns, attempts, tokens, cost, tool executions and histograms), through
//! the label guards, with the zero series of each agent, model and provider first seen.

use retryscope_core::correlate::{Output, TurnLabels};
use retryscope_core::finding::{Finding, FindingKind};
use retryscope_core::report::{Outcome, TurnReport, TurnStatus};

use super::family::FamilyId as F;
use super::state::lock;
use super::{G, Inner, Metrics};

/// The retry reason label when the client gave none.
pub const UNSPECIFIED: &str = "unspecified";

/// The `token_type` label values of `retryscope_billed_tokens_total`.
pub const TOKEN_TYPES: [&str; 5] = [
    "input",
    "cached_input",
    "cache_write",
    "output",
    "reasoning",
];

impl Inner {
    /// Zero finding series (every kind with `tool=""`) for an agent, the first time it is
    /// seen: a later finding of another kind then moves a series that already exists.
    pub(super) fn touch_agent(&mut self, a: &str) {
        if self.agents_touched.contains(a) {
            return;
        }
        self.agents_touched.insert(a.to_owned());
        for k in FindingKind::ALL {
            self.table.touch(
                F::Findings as usize,
                &[a, k.as_str(), k.severity().as_str(), ""],
            );
        }
    }

    /// Zero series for an agent/model/provider's status and outcome breakdowns of turns,
    /// attempts and cost, so that a `rate()` over one status (say, wasted spend of failed
    /// attempts) exists before the first turn with that status.
    fn touch_pair(&mut self, a: &str, m: &str, p: &str) {
        if self
            .touched
            .get(a)
            .and_then(|ms| ms.get(m))
            .is_some_and(|ps| ps.contains(p))
        {
            return;
        }
        self.touched
            .entry(a.to_owned())
            .or_default()
            .entry(m.to_owned())
            .or_default()
            .insert(p.to_owned());
        self.touch_agent(a);
        for s in TurnStatus::ALL {
            self.table.touch(F::Turns as usize, &[a, m, p, s.as_str()]);
        }
        for o in Outcome::ALL {
            self.table.touch(F::Attempts as usize, &[m, p, o.as_str()]);
            self.table
                .touch(F::BilledCost as usize, &[a, m, p, o.as_str()]);
        }
    }

    fn retry(&mut self, labels: &TurnLabels, reason: Option<&str>) {
        let a = self.label(G::Agent, labels.agent.as_deref());
        let m = self.label(G::Model, labels.model.as_deref());
        let p = self.label(G::Provider, labels.provider.as_deref());
        let r = self.label(G::Reason, reason);
        self.touch_pair(&a, &m, &p);
        self.add(F::Retries, &[&a, &m, &p, &r], 1.0);
    }

    fn finding(&mut self, f: &Finding, labels: &TurnLabels) {
        let a = self.label(G::Agent, labels.agent.as_deref());
        self.touch_agent(&a);
        let tool = match f.tool.as_deref() {
            None => String::new(),
            Some(t) => self.label(G::Tool, Some(t)),
        };
        self.add(
            F::Findings,
            &[&a, f.kind.as_str(), f.kind.severity().as_str(), &tool],
            1.0,
        );
    }

    fn turn_closed(&mut self, r: &TurnReport) {
        let ag = self.label(G::Agent, r.agent.as_deref());
        let m = self.label(G::Model, r.model.as_deref());
        let p = self.label(G::Provider, r.provider.as_deref());
        self.touch_pair(&ag, &m, &p);
        self.add(F::Turns, &[&ag, &m, &p, r.status.as_str()], 1.0);
        self.table.observe(
            F::AttemptsPerTurn as usize,
            &[&m, &p],
            r.attempts.len() as f64,
        );
        if let Some(secs) = seconds(r.started_ms, r.ended_ms) {
            self.table
                .observe(F::TurnDuration as usize, &[&m, &p], secs);
        }
        for a in &r.attempts {
            let am = match a.model.as_deref() {
                Some(own) if own.trim() != r.model.as_deref().unwrap_or("").trim() => {
                    self.label(G::Model, Some(own))
                }
                _ => m.clone(),
            };
            if am != m {
                self.touch_pair(&ag, &am, &p);
            }
            let o = a.outcome.as_str();
            self.add(F::Attempts, &[&am, &p, o], 1.0);
            let u = &a.usage.tokens;
            let input = u
                .input_tokens
                .saturating_sub(u.cached_input_tokens)
                .saturating_sub(u.cache_write_tokens);
            let counts = [
                input,
                u.cached_input_tokens,
                u.cache_write_tokens,
                u.output_tokens,
                u.reasoning_tokens,
            ];
            let us = a.usage.source.as_str();
            for (tt, n) in TOKEN_TYPES.iter().zip(counts) {
                self.add(F::BilledTokens, &[&am, &p, tt, o, us], n as f64);
            }
            if let Some(cost) = a.cost_usd
                && cost.is_finite()
                && cost >= 0.0
            {
                self.add(F::BilledCost, &[&ag, &am, &p, o], cost);
            }
            if let Some(secs) = seconds(a.started_ms, a.ended_ms) {
                self.table
                    .observe(F::AttemptDuration as usize, &[&am, &p, o], secs);
            }
            for e in &a.executed {
                let tool = self.label(G::Tool, Some(&e.name));
                self.add(F::ToolExecutions, &[&tool, o], 1.0);
            }
        }
    }
}

/// Seconds between two event times; `None` when either is missing or time went backwards.
fn seconds(start_ms: Option<i64>, end_ms: Option<i64>) -> Option<f64> {
    let d = end_ms?.checked_sub(start_ms?)?;
    (d >= 0).then(|| d as f64 / 1000.0)
}

impl Metrics {
    /// Move the turn-level series for one correlator output: a retry and a finding move their
    /// counters at once; a closed turn moves turns, attempts, tokens, cost, tool executions
    /// and the histograms.
    pub fn observe(&self, out: &Output) {
        let mut inner = lock(&self.inner);
        match out {
            Output::Retry { labels, reason } => inner.retry(labels, reason.as_deref()),
            Output::Finding(f, labels) => inner.finding(f, labels),
            Output::TurnClosed(r) => inner.turn_closed(r),
        }
    }
}
