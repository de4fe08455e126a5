//! Each span's attributes: the root's (the turn), a model call's (usage summed over its billed
//! attempts, cost, finish reasons), an attempt's (its own usage and cost, `resend_count`) and
//! a tool execution's.

use opentelemetry::{Array, KeyValue, StringValue, Value};

use retryscope_core::report::{AttemptReport, ExecReport, Outcome, TurnReport, UsageSource};

use super::super::calls::{CallUsage, call_cost, call_usage, call_wasted_cost};
use super::{SpanOptions, attr};

pub(super) fn root_attributes(r: &TurnReport, calls: usize) -> Vec<KeyValue> {
    let mut a = vec![KeyValue::new(attr::OPERATION_NAME, "invoke_agent")];
    push_opt(&mut a, attr::AGENT_NAME, r.agent.as_deref());
    push_opt(&mut a, attr::PROVIDER_NAME, r.provider.as_deref());
    push_opt(
        &mut a,
        attr::REQUEST_MODEL,
        r.requested_model.as_deref().or(r.model.as_deref()),
    );
    if r.requested_model.is_some() {
        push_opt(&mut a, attr::RESPONSE_MODEL, r.model.as_deref());
    }
    push_opt(&mut a, attr::CONVERSATION_ID, r.session.as_deref());
    a.extend([
        KeyValue::new(attr::TURN_ID, r.turn.clone()),
        KeyValue::new(attr::TURN_STATUS, r.status.as_str()),
        KeyValue::new(attr::TURN_CLOSED_BY, close_reason(r)),
        KeyValue::new(attr::TURN_ATTEMPTS, int(r.attempts.len() as u64)),
        KeyValue::new(attr::TURN_RETRIES, i64::from(r.retries)),
        KeyValue::new(attr::TURN_CALLS, int(calls as u64)),
        KeyValue::new(attr::COST_USD, r.cost_usd),
        KeyValue::new(attr::WASTED_COST_USD, r.wasted_cost_usd),
        KeyValue::new(attr::FINDINGS_COUNT, int(r.findings.len() as u64)),
    ]);
    if let Some(max) = r.findings.iter().map(|f| f.severity).max() {
        a.push(KeyValue::new(attr::FINDINGS_MAX_SEVERITY, max.as_str()));
    }
    if let Some(chars) = r.output_chars {
        a.push(KeyValue::new(attr::TURN_OUTPUT_CHARS, int(chars)));
    }
    if let Some(source) = &r.source {
        a.push(KeyValue::new(attr::TURN_SOURCE, source.input.clone()));
        if let Some(line) = source.line {
            a.push(KeyValue::new(attr::TURN_SOURCE_LINE, int(line)));
        }
    }
    a
}

fn close_reason(r: &TurnReport) -> &'static str {
    use retryscope_core::report::CloseReason;
    match r.closed_by {
        CloseReason::TurnEnd => "turn_end",
        CloseReason::IdleTimeout => "idle_timeout",
        CloseReason::EndOfInput => "end_of_input",
        CloseReason::Evicted => "evicted",
    }
}

pub(super) fn call_attributes(
    r: &TurnReport,
    index: usize,
    attempts: &[AttemptReport],
    model: Option<&str>,
) -> Vec<KeyValue> {
    let mut kv = vec![KeyValue::new(attr::OPERATION_NAME, "chat")];
    push_opt(&mut kv, attr::PROVIDER_NAME, r.provider.as_deref());
    match r.requested_model.as_deref() {
        Some(requested) => {
            kv.push(KeyValue::new(attr::REQUEST_MODEL, requested.to_owned()));
            push_opt(&mut kv, attr::RESPONSE_MODEL, model);
        }
        None => push_opt(&mut kv, attr::REQUEST_MODEL, model),
    }
    let last = attempts.last();
    if let Some(reason) = last.and_then(|a| a.finish_reason.clone()) {
        kv.push(KeyValue::new(
            attr::FINISH_REASONS,
            Value::Array(Array::String(vec![StringValue::from(reason)])),
        ));
    }
    let usage = call_usage(attempts);
    if usage.source != UsageSource::None {
        push_usage(&mut kv, &usage, USAGE_KEYS);
    }
    kv.extend([
        KeyValue::new(attr::CALL_INDEX, int(index as u64)),
        KeyValue::new(attr::CALL_ATTEMPTS, int(attempts.len() as u64)),
        KeyValue::new(attr::CALL_BILLED_ATTEMPTS, i64::from(usage.billed_attempts)),
        KeyValue::new(attr::USAGE_SOURCE, usage.source.as_str()),
    ]);
    if let Some(cost) = call_cost(attempts) {
        kv.push(KeyValue::new(attr::COST_USD, cost));
        kv.push(KeyValue::new(
            attr::WASTED_COST_USD,
            call_wasted_cost(attempts),
        ));
    }
    if last.is_some_and(|a| a.outcome == Outcome::Failed) {
        kv.push(KeyValue::new(attr::ERROR_TYPE, Outcome::Failed.as_str()));
    }
    kv
}

/// Token attribute names: input, output, cache read, cache creation, reasoning.
type UsageKeys = [&'static str; 5];

const USAGE_KEYS: UsageKeys = [
    attr::INPUT_TOKENS,
    attr::OUTPUT_TOKENS,
    attr::CACHE_READ_TOKENS,
    attr::CACHE_CREATION_TOKENS,
    attr::REASONING_TOKENS,
];

const ATTEMPT_USAGE_KEYS: UsageKeys = [
    attr::ATTEMPT_INPUT_TOKENS,
    attr::ATTEMPT_OUTPUT_TOKENS,
    attr::ATTEMPT_CACHE_READ_TOKENS,
    attr::ATTEMPT_CACHE_CREATION_TOKENS,
    attr::ATTEMPT_REASONING_TOKENS,
];

/// Input and output always; the cache and reasoning figures when not zero.
fn push_usage(kv: &mut Vec<KeyValue>, u: &CallUsage, keys: UsageKeys) {
    kv.push(KeyValue::new(keys[0], int(u.input)));
    kv.push(KeyValue::new(keys[1], int(u.output)));
    for (key, value) in [
        (keys[2], u.cache_read),
        (keys[3], u.cache_creation),
        (keys[4], u.reasoning),
    ] {
        if value > 0 {
            kv.push(KeyValue::new(key, int(value)));
        }
    }
}

/// `resend` is the attempt's position in its model call (0 for the call's first try).
pub(super) fn attempt_attributes(
    a: &AttemptReport,
    resend: usize,
    opts: &SpanOptions,
) -> Vec<KeyValue> {
    let mut kv = Vec::with_capacity(16);
    if resend > 0 {
        kv.push(KeyValue::new(attr::RESEND_COUNT, int(resend as u64)));
    }
    kv.extend([
        KeyValue::new(attr::ATTEMPT_NUMBER, i64::from(a.attempt)),
        KeyValue::new(attr::ATTEMPT_OUTCOME, a.outcome.as_str()),
    ]);
    push_opt(&mut kv, attr::ATTEMPT_MODEL, a.model.as_deref());
    push_opt(
        &mut kv,
        attr::ATTEMPT_FINISH_REASON,
        a.finish_reason.as_deref(),
    );
    if a.usage.source != UsageSource::None {
        let own = call_usage(std::slice::from_ref(a));
        push_usage(&mut kv, &own, ATTEMPT_USAGE_KEYS);
    }
    kv.push(KeyValue::new(attr::USAGE_SOURCE, a.usage.source.as_str()));
    if let Some(cost) = a.cost_usd {
        kv.push(KeyValue::new(attr::COST_USD, cost));
    }
    kv.push(KeyValue::new(attr::ATTEMPT_TEXT_CHARS, int(a.text_chars)));
    kv.push(KeyValue::new(
        attr::ATTEMPT_TOOL_CALLS,
        int(a.tool_calls.len() as u64),
    ));
    push_opt(
        &mut kv,
        attr::ATTEMPT_RETRY_REASON,
        a.retry_reason.as_deref(),
    );
    if opts.capture_content {
        push_opt(&mut kv, attr::ATTEMPT_ERROR, a.error.as_deref());
    }
    if a.outcome.is_wasted() {
        kv.push(KeyValue::new(attr::ERROR_TYPE, a.outcome.as_str()));
    }
    if opts.capture_content
        && let Some(text) = &a.text_prefix
    {
        kv.push(KeyValue::new(attr::ATTEMPT_TEXT_PREFIX, text.clone()));
    }
    kv
}

pub(super) fn exec_attributes(e: &ExecReport, attempt: u32) -> Vec<KeyValue> {
    let mut kv = vec![
        KeyValue::new(attr::OPERATION_NAME, "execute_tool"),
        KeyValue::new(attr::TOOL_NAME, e.name.clone()),
        KeyValue::new(attr::TOOL_CALL_ID, e.id.clone()),
        KeyValue::new(attr::ATTEMPT_NUMBER, i64::from(attempt)),
        KeyValue::new(attr::EFFECT_KEY, e.effect_key.clone()),
        KeyValue::new(attr::TOOL_READ, e.read),
    ];
    push_opt(&mut kv, attr::TOOL_STATUS, e.status.as_deref());
    kv
}

pub(super) fn push_opt(kv: &mut Vec<KeyValue>, key: &'static str, value: Option<&str>) {
    if let Some(v) = value {
        kv.push(KeyValue::new(key, v.to_owned()));
    }
}

fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}
