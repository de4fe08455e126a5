//! Model calls: a turn's attempts grouped into the logical operations the GenAI semantic
//! conventions trace as one `chat` span each ("a GenAI span covers the operation as the
//! caller observed it, including its retries", semantic-conventions-genai PR 216).
//!
//! A retryscope turn is one model call: the event format defines attempt 0 as the first try
//! and every later attempt of the turn as a retry of it, and the correlator counts and judges
//! them so (a second attempt after a finished one is a retry whose tool calls can duplicate the
//! first's effects). An agent loop's next call to the model is the next turn: the coding
//! agents' decoders and the proxy open one turn per model request (`<session>`,
//! `<session>#2`, …). So the trace says what the findings say: one `chat` span per turn,
//! covering all its attempts. [`model_calls`] is where a finer grouping would go if the format
//! ever gains a step boundary between model calls of one turn.
//!
//! Pure and deterministic, like the span builder.

use std::ops::Range;

use retryscope_core::report::{AttemptReport, UsageSource};

/// The model calls of a turn's attempts, as index ranges into `attempts`, in order: one call
/// holding every attempt (see the module doc), none when there are no attempts.
pub fn model_calls(attempts: &[AttemptReport]) -> Vec<Range<usize>> {
    let mut calls = Vec::with_capacity(1);
    if !attempts.is_empty() {
        calls.push(0..attempts.len());
    }
    calls
}

/// Usage summed over the attempts of one call that were billed (reported or estimated).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallUsage {
    /// Input tokens, cached and cache-write included.
    pub input: u64,
    /// Output tokens, reasoning included.
    pub output: u64,
    /// Input tokens read from a prompt cache.
    pub cache_read: u64,
    /// Input tokens written to a prompt cache.
    pub cache_creation: u64,
    /// Reasoning tokens.
    pub reasoning: u64,
    /// Attempts that were billed.
    pub billed_attempts: u32,
    /// `reported` when every billed attempt reported its usage, `estimated` when any was
    /// estimated, `none` when no attempt was billed.
    pub source: UsageSource,
}

impl Default for CallUsage {
    fn default() -> Self {
        CallUsage {
            input: 0,
            output: 0,
            cache_read: 0,
            cache_creation: 0,
            reasoning: 0,
            billed_attempts: 0,
            source: UsageSource::None,
        }
    }
}

/// The billed usage of `attempts` (one call's).
pub fn call_usage(attempts: &[AttemptReport]) -> CallUsage {
    let mut u = CallUsage::default();
    for a in attempts
        .iter()
        .filter(|a| a.usage.source != UsageSource::None)
    {
        let t = &a.usage.tokens;
        u.input = u.input.saturating_add(t.input_tokens);
        u.output = u.output.saturating_add(t.output_tokens);
        u.cache_read = u.cache_read.saturating_add(t.cached_input_tokens);
        u.cache_creation = u.cache_creation.saturating_add(t.cache_write_tokens);
        u.reasoning = u.reasoning.saturating_add(t.reasoning_tokens);
        u.billed_attempts += 1;
        u.source = match (u.source, a.usage.source) {
            (UsageSource::Estimated, _) | (_, UsageSource::Estimated) => UsageSource::Estimated,
            _ => UsageSource::Reported,
        };
    }
    u
}

/// The summed cost of `attempts`; `None` when no attempt has a price.
pub fn call_cost(attempts: &[AttemptReport]) -> Option<f64> {
    attempts
        .iter()
        .filter_map(|a| a.cost_usd)
        .reduce(|sum, c| sum + c)
}

/// The cost of the attempts of `attempts` whose output was thrown away.
pub fn call_wasted_cost(attempts: &[AttemptReport]) -> f64 {
    attempts
        .iter()
        .filter(|a| a.outcome.is_wasted())
        .filter_map(|a| a.cost_usd)
        .sum()
}
