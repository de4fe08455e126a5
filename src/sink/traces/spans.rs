//! The span builder: one closed [`TurnReport`] to the [`SpanData`] of one trace. Pure: no
//! clock, no randomness, no I/O; the same report always gives the same spans.
//!
//! ```text
//! invoke_agent {agent}          INTERNAL  root: the turn; turn attributes; turn findings
//! ├── chat {model}              CLIENT    the turn's model call, covering its retries: usage
//! │   │                                   summed over its billed attempts, cost, finish reasons
//! │   ├── attempt 0             CLIENT    retryscope.attempt.*, its own usage and cost
//! │   └── attempt 1             CLIENT    … and http.request.resend_count = 1
//! └── execute_tool {tool}       INTERNAL  one per execution; linked to the attempt whose
//!                                         call it ran (retryscope.attempt.number)
//! ```
//!
//! The shape follows the GenAI semantic conventions: a GenAI client span is the logical
//! operation as the caller observed it, covering every retry (semantic-conventions-genai
//! PR 216, "Clarify GenAI span duration"), so each model call is one `chat {model}` span,
//! and the tries retryscope reconstructs are its children, as HTTP conventions model resends
//! (one span per physical request, `http.request.resend_count`). A turn is one model call
//! (the format makes every later attempt a retry of the first; see [`super::calls`]). Tools are executed by the agent, not by the model
//! call, so `execute_tool` spans are the agent span's children, siblings of the `chat` spans
//! as in the conventions' agent spans; which attempt's call an execution ran (the heart of
//! retryscope: an abandoned attempt's call executed) is its `retryscope.attempt.number` and a
//! span link to that attempt's span.
//!
//! The root is named after the agent span (`invoke_agent`): a turn is one agent invocation
//! whose children are model calls and tool executions. It is INTERNAL because retryscope
//! reconstructs it from logs; it never made a remote call. When the turn carries a valid W3C
//! `traceparent`, its root joins that trace as a child of the agent's span (remote parent);
//! otherwise the trace id is derived from the turn id (see [`super::ids`]).
//!
//! Usage: `gen_ai.usage.*` appears on `chat` spans only, summed over the attempts that were
//! billed (reported or estimated usage; an abandoned attempt is billed too). Attempts carry
//! their own share under `retryscope.attempt.usage.*`, and the root no token counts, so a
//! backend that sums `gen_ai.usage.*` over spans counts each billed token once. Attempts carry
//! no `gen_ai.operation.name` either: a GenAI backend sees one operation per model call.
//!
//! Each [`Finding`] becomes a `retryscope.finding` event on the span its rule's
//! [`Scope`] names: a tool finding (`abandoned_tool_executed`,
//! `unfinished_tool_executed`, `duplicate_effect`, `early_execution`) on that call's
//! `execute_tool` span, an attempt finding (`spliced_text`, `spliced_stream`) on the attempt's
//! span, a call finding (`retry_cap_exceeded`) on the model call that retried too often, a
//! turn finding (`incomplete_turn`) on the root. High and critical findings set that span's
//! status to Error, naming the finding kind; abandoned and failed attempts are Errors too, with
//! the reason, and so is a model call whose last attempt failed. Every other span keeps status
//! Unset, as instrumentation should.
//!
//! Deviations from the conventions, on purpose:
//! - Attempt spans are named `attempt {n}` and carry `http.request.resend_count` but no
//!   `http.request.method` or `url.full`: the logs say which try it was, not the request line.
//!   `n` is the logged attempt number, bounded by the correlator's attempt bounds.
//! - `gen_ai.request.model` is the model the log names; logs rarely tell the requested and
//!   the responding model apart, so `gen_ai.response.model` is never set.
//! - `gen_ai.operation.name` is `chat` for every provider (the registry's `generate_content`
//!   would fit Gemini, but logs do not say which API a client called).
//! - `gen_ai.response.finish_reasons` holds the last attempt's one finish reason (logs carry
//!   one per response, not one per choice).
//! - Findings are span events named `retryscope.finding`, not log-based events: they belong
//!   to the span they concern, and the conventions define no event for them.

use std::borrow::Cow;
use std::ops::Range;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{
    Event, Link, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{Array, InstrumentationScope, KeyValue, StringValue, Value};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};

use super::calls::{CallUsage, call_cost, call_usage, call_wasted_cost, model_calls};
use super::ids::{Role, parse_traceparent, span_id, trace_id_for_turn};
use retryscope_core::finding::{Finding, FindingKind, Severity};
use retryscope_core::report::{
    AttemptReport, ExecReport, Outcome, TurnReport, TurnStatus, UsageSource,
};
use retryscope_core::rules::Scope;

pub mod attr;

/// The instrumentation scope name of exported turn spans.
pub const SCOPE_NAME: &str = "retryscope";

/// The name of the span event that carries a finding.
pub const FINDING_EVENT: &str = "retryscope.finding";

/// What the span builder may put in spans.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpanOptions {
    /// Export attempt text (`retryscope.attempt.text_prefix`). Off by default; it only has
    /// an effect when the correlator also captured content.
    pub capture_content: bool,
}

/// How many spans [`turn_spans`] makes for `report`, without building them.
pub fn span_count(report: &TurnReport) -> usize {
    1 + model_calls(&report.attempts).len()
        + report
            .attempts
            .iter()
            .map(|a| 1 + a.executed.len())
            .sum::<usize>()
}

/// The spans of one turn: the root first, then each model call followed by its attempts,
/// each attempt followed by the executions of its calls.
pub fn turn_spans(report: &TurnReport, opts: &SpanOptions) -> Vec<SpanData> {
    let turn = report.turn.as_str();
    let (trace_id, root_parent, remote) =
        match report.traceparent.as_deref().and_then(parse_traceparent) {
            Some((trace, parent)) => (trace, parent, true),
            None => (trace_id_for_turn(turn), SpanId::INVALID, false),
        };
    let builder = Builder {
        trace_id,
        quotes: opts.capture_content,
        scope: InstrumentationScope::builder(SCOPE_NAME)
            .with_version(env!("CARGO_PKG_VERSION"))
            .build(),
    };
    let calls = model_calls(&report.attempts);
    let placed = place_findings(report, &calls);
    let root_id = span_id(turn, Role::Turn, 0, 0);
    let (root_start, root_end) = root_times(report);

    let mut spans = Vec::with_capacity(span_count(report));
    spans.push(builder.build(Draft {
        id: root_id,
        parent: root_parent,
        parent_remote: remote,
        kind: SpanKind::Internal,
        name: match &report.agent {
            Some(agent) => format!("invoke_agent {agent}"),
            None => "invoke_agent".to_owned(),
        },
        start_ms: root_start,
        end_ms: root_end,
        attributes: root_attributes(report, calls.len()),
        findings: &placed.root,
        base_error: (report.status == TurnStatus::Failed).then(|| "failed".to_owned()),
        links: Vec::new(),
    }));

    for (k, range) in calls.iter().enumerate() {
        let attempts = &report.attempts[range.clone()];
        let call_id = span_id(turn, Role::Call, 0, k);
        let model = attempts
            .iter()
            .find_map(|a| a.model.as_deref())
            .or(report.model.as_deref());
        let starts = attempts.iter().filter_map(|a| a.started_ms);
        let start = starts.min().unwrap_or(root_start);
        let end = attempts
            .iter()
            .filter_map(|a| a.ended_ms.or(a.started_ms))
            .max()
            .unwrap_or(start);
        let last = range.end - 1;
        spans.push(builder.build(Draft {
            id: call_id,
            parent: root_id,
            parent_remote: false,
            kind: SpanKind::Client,
            name: match model {
                Some(model) => format!("chat {model}"),
                None => "chat".to_owned(),
            },
            start_ms: start,
            end_ms: end,
            attributes: call_attributes(report, k, attempts, model),
            findings: &placed.calls[k],
            base_error: call_error(report, last),
            links: Vec::new(),
        }));
        for i in range.clone() {
            let attempt = &report.attempts[i];
            let attempt_id = span_id(turn, Role::Attempt, attempt.attempt, 0);
            let start = attempt.started_ms.unwrap_or(root_start);
            let end = attempt.ended_ms.unwrap_or(start);
            spans.push(builder.build(Draft {
                id: attempt_id,
                parent: call_id,
                parent_remote: false,
                kind: SpanKind::Client,
                name: format!("attempt {}", attempt.attempt),
                start_ms: start,
                end_ms: end,
                attributes: attempt_attributes(attempt, i - range.start, opts),
                findings: &placed.attempts[i],
                base_error: attempt_error(report, i),
                links: Vec::new(),
            }));
            let link = builder.context(attempt_id);
            for (j, exec) in attempt.executed.iter().enumerate() {
                let at = exec.ts_ms.unwrap_or(end);
                spans.push(builder.build(Draft {
                    id: span_id(turn, Role::Exec, attempt.attempt, j),
                    parent: root_id,
                    parent_remote: false,
                    kind: SpanKind::Internal,
                    name: format!("execute_tool {}", exec.name),
                    start_ms: at,
                    end_ms: at,
                    attributes: exec_attributes(exec, attempt.attempt),
                    findings: &placed.execs[i][j],
                    base_error: None,
                    links: vec![Link::new(link.clone(), Vec::new(), 0)],
                }));
            }
        }
    }
    // Every span names the agent, not only the root: a backend filters attempts and tool
    // executions by agent without joining them to their root.
    if let Some(agent) = report.agent.as_deref() {
        for span in spans.iter_mut().skip(1) {
            span.attributes
                .push(KeyValue::new(attr::AGENT_NAME, agent.to_owned()));
        }
    }
    spans
}

/// A span before it becomes [`SpanData`].
struct Draft<'a> {
    id: SpanId,
    parent: SpanId,
    parent_remote: bool,
    kind: SpanKind,
    name: String,
    start_ms: i64,
    end_ms: i64,
    attributes: Vec<KeyValue>,
    findings: &'a [&'a Finding],
    base_error: Option<String>,
    links: Vec<Link>,
}

struct Builder {
    trace_id: TraceId,
    scope: InstrumentationScope,
    /// Findings carry their quotes (content capture).
    quotes: bool,
}

impl Builder {
    fn context(&self, id: SpanId) -> SpanContext {
        SpanContext::new(
            self.trace_id,
            id,
            TraceFlags::SAMPLED,
            false,
            TraceState::NONE,
        )
    }

    fn build(&self, d: Draft<'_>) -> SpanData {
        let end_ms = d.end_ms.max(d.start_ms);
        let mut events = SpanEvents::default();
        events.events = d
            .findings
            .iter()
            .map(|f| finding_event(f, f.ts_ms.unwrap_or(end_ms), self.quotes))
            .collect();
        let mut links = SpanLinks::default();
        links.links = d.links;
        SpanData {
            span_context: self.context(d.id),
            parent_span_id: d.parent,
            parent_span_is_remote: d.parent_remote,
            span_kind: d.kind,
            name: Cow::Owned(d.name),
            start_time: time(d.start_ms),
            end_time: time(end_ms),
            attributes: d.attributes,
            dropped_attributes_count: 0,
            events,
            links,
            status: status(d.base_error, d.findings),
            instrumentation_scope: self.scope.clone(),
        }
    }
}

/// Findings sorted onto the spans they concern, by position in the report.
struct Placed<'a> {
    root: Vec<&'a Finding>,
    calls: Vec<Vec<&'a Finding>>,
    attempts: Vec<Vec<&'a Finding>>,
    execs: Vec<Vec<Vec<&'a Finding>>>,
}

fn place_findings<'a>(report: &'a TurnReport, calls: &[Range<usize>]) -> Placed<'a> {
    let mut placed = Placed {
        root: Vec::new(),
        calls: vec![Vec::new(); calls.len()],
        attempts: vec![Vec::new(); report.attempts.len()],
        execs: report
            .attempts
            .iter()
            .map(|a| vec![Vec::new(); a.executed.len()])
            .collect(),
    };
    for f in &report.findings {
        let scope = scope(f.kind);
        let attempt = f
            .attempt
            .filter(|_| scope != Scope::Turn)
            .and_then(|n| report.attempts.iter().position(|a| a.attempt == n));
        let call = attempt.and_then(|i| calls.iter().position(|c| c.contains(&i)));
        let exec = match (scope, f.call_id.as_deref()) {
            (Scope::Tool, Some(call)) => find_exec(report, attempt, call, f.ts_ms),
            _ => None,
        };
        match (scope, exec, attempt, call) {
            (Scope::Tool, Some((i, j)), _, _) => placed.execs[i][j].push(f),
            (Scope::Call, _, _, Some(k)) => placed.calls[k].push(f),
            (Scope::Tool | Scope::Attempt, None, Some(i), _) => placed.attempts[i].push(f),
            _ => placed.root.push(f),
        }
    }
    placed
}

fn scope(kind: FindingKind) -> Scope {
    retryscope_core::rules::rule(kind).scope
}

/// The execution a tool finding is about: in its attempt first (the one at the finding's
/// time when the call ran more than once), then anywhere in the turn.
fn find_exec(
    report: &TurnReport,
    attempt: Option<usize>,
    call: &str,
    ts_ms: Option<i64>,
) -> Option<(usize, usize)> {
    let in_attempt = |i: usize| -> Option<(usize, usize)> {
        let execs = &report.attempts[i].executed;
        let mut matching = execs.iter().enumerate().filter(|(_, e)| e.id == call);
        let first = matching.clone().next()?.0;
        let at_time = matching.find(|(_, e)| ts_ms.is_some() && e.ts_ms == ts_ms);
        Some((i, at_time.map_or(first, |(j, _)| j)))
    };
    attempt
        .and_then(in_attempt)
        .or_else(|| (0..report.attempts.len()).find_map(in_attempt))
}

fn root_times(report: &TurnReport) -> (i64, i64) {
    let attempt_starts = report.attempts.iter().filter_map(|a| a.started_ms);
    let attempt_ends = report.attempts.iter().filter_map(|a| a.ended_ms);
    let start = report
        .started_ms
        .or_else(|| attempt_starts.clone().min())
        .unwrap_or(0);
    let end = report
        .ended_ms
        .or_else(|| attempt_ends.max())
        .unwrap_or(start);
    (start, end.max(start))
}

fn root_attributes(r: &TurnReport, calls: usize) -> Vec<KeyValue> {
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

fn call_attributes(
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
fn attempt_attributes(a: &AttemptReport, resend: usize, opts: &SpanOptions) -> Vec<KeyValue> {
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

/// Why the model call whose last attempt is `last` is an error: that attempt failed.
fn call_error(r: &TurnReport, last: usize) -> Option<String> {
    (r.attempts[last].outcome == Outcome::Failed)
        .then(|| attempt_error(r, last))
        .flatten()
}

/// Why attempt `i` is an error, when it is one.
fn attempt_error(r: &TurnReport, i: usize) -> Option<String> {
    let a = &r.attempts[i];
    let reason = a.error.clone().or_else(|| match a.outcome {
        Outcome::Abandoned => r
            .attempts
            .get(i + 1)
            .and_then(|next| next.retry_reason.clone()),
        _ => None,
    });
    match (a.outcome, reason) {
        (Outcome::Abandoned | Outcome::Failed, Some(reason)) => {
            Some(format!("{}: {reason}", a.outcome.as_str()))
        }
        (Outcome::Abandoned | Outcome::Failed, None) => Some(a.outcome.as_str().to_owned()),
        _ => None,
    }
}

fn exec_attributes(e: &ExecReport, attempt: u32) -> Vec<KeyValue> {
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

fn finding_event(f: &Finding, ts_ms: i64, quotes: bool) -> Event {
    let mut kv = vec![
        KeyValue::new(attr::FINDING_KIND, f.kind.as_str()),
        KeyValue::new(attr::FINDING_SEVERITY, f.severity.as_str()),
        KeyValue::new(attr::FINDING_EVIDENCE, f.evidence.clone()),
    ];
    if let Some(n) = f.attempt {
        kv.push(KeyValue::new(attr::ATTEMPT_NUMBER, i64::from(n)));
    }
    push_opt(&mut kv, attr::TOOL_NAME, f.tool.as_deref());
    push_opt(&mut kv, attr::TOOL_CALL_ID, f.call_id.as_deref());
    push_opt(&mut kv, attr::EFFECT_KEY, f.effect_key.as_deref());
    if quotes {
        push_opt(&mut kv, attr::FINDING_QUOTE, f.quote.as_deref());
    }
    Event::new(FINDING_EVENT, time(ts_ms), kv, 0)
}

/// Error when the span has its own error (`base`) or a high or critical finding; the message
/// names the error first, then each such finding kind once, most severe first.
fn status(base: Option<String>, findings: &[&Finding]) -> Status {
    let mut serious: Vec<&Finding> = findings
        .iter()
        .copied()
        .filter(|f| f.severity >= Severity::High)
        .collect();
    serious.sort_by_key(|f| std::cmp::Reverse(f.severity));
    let mut parts: Vec<String> = base.into_iter().collect();
    for f in serious {
        let kind = f.kind.as_str();
        if !parts.iter().any(|p| p == kind) {
            parts.push(kind.to_owned());
        }
    }
    if parts.is_empty() {
        Status::Unset
    } else {
        Status::error(parts.join("; "))
    }
}

fn push_opt(kv: &mut Vec<KeyValue>, key: &'static str, value: Option<&str>) {
    if let Some(v) = value {
        kv.push(KeyValue::new(key, v.to_owned()));
    }
}

fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Milliseconds since the Unix epoch as a `SystemTime`; times before 1970 clamp to the epoch.
fn time(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod call_tests;
