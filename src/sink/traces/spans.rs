//! The span builder: one closed [`TurnReport`] to the [`SpanData`] of one trace. Pure: no
//! clock, no randomness, no I/O; the same report always gives the same spans.
//!
//! ```text
//! invoke_agent {agent}            INTERNAL  root; turn attributes; turn findings
//! ├── chat {model}                CLIENT    attempt 0; usage, cost, outcome
//! │   └── execute_tool {tool}     INTERNAL  one per execution of this attempt's calls
//! └── chat {model}                CLIENT    attempt 1 (http.request.resend_count = 1)
//!     └── execute_tool {tool}     INTERNAL
//! ```
//!
//! The root is named after the GenAI semantic conventions' agent span (`invoke_agent`),
//! because a turn is exactly what that span models: one agent invocation whose children are
//! model calls and tool executions. Backends that understand GenAI spans then show it as such.
//! It is INTERNAL because retryscope reconstructs it from logs; it never made a remote call.
//!
//! When the turn carries a valid W3C `traceparent`, its root joins that trace as a child of
//! the agent's span (remote parent); otherwise the trace id is derived from the turn id
//! (see [`super::ids`]).
//!
//! Usage and cost live on attempt spans only; the root carries the turn totals of cost under
//! `retryscope.*` names but no token counts, so nothing is summed twice by a backend.
//!
//! Each [`Finding`] becomes a `retryscope.finding` event on the span it concerns: a tool
//! finding (`abandoned_tool_executed`, `unfinished_tool_executed`, `duplicate_effect`,
//! `early_execution`) on that call's `execute_tool` span, an attempt finding (`spliced_text`,
//! `spliced_stream`) on the attempt's span, a turn finding (`retry_cap_exceeded`,
//! `incomplete_turn`) on the root. High and critical findings set that span's status to Error,
//! naming the finding kind; abandoned and failed attempts are Errors too, with the reason.
//! Every other span keeps status Unset, as instrumentation should.

use std::borrow::Cow;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{
    Event, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{Array, InstrumentationScope, KeyValue, StringValue, Value};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};

use super::ids::{Role, parse_traceparent, span_id, trace_id_for_turn};
use crate::finding::{Finding, FindingKind, Severity};
use crate::report::{AttemptReport, ExecReport, Outcome, TurnReport, TurnStatus, UsageSource};

/// The instrumentation scope name of exported turn spans.
pub const SCOPE_NAME: &str = "retryscope";

/// The name of the span event that carries a finding.
pub const FINDING_EVENT: &str = "retryscope.finding";

/// Attribute names used on exported spans and events.
pub mod attr {
    /// `chat`, `invoke_agent` or `execute_tool` (semconv).
    pub const OPERATION_NAME: &str = "gen_ai.operation.name";
    /// Provider (semconv).
    pub const PROVIDER_NAME: &str = "gen_ai.provider.name";
    /// Requested model (semconv).
    pub const REQUEST_MODEL: &str = "gen_ai.request.model";
    /// Agent name (semconv).
    pub const AGENT_NAME: &str = "gen_ai.agent.name";
    /// Client session id (semconv).
    pub const CONVERSATION_ID: &str = "gen_ai.conversation.id";
    /// Finish reasons, a string array (semconv).
    pub const FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
    /// Input tokens (semconv).
    pub const INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
    /// Output tokens (semconv).
    pub const OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
    /// Input tokens read from a prompt cache (semconv).
    pub const CACHE_READ_TOKENS: &str = "gen_ai.usage.cache_read.input_tokens";
    /// Input tokens written to a prompt cache (semconv).
    pub const CACHE_CREATION_TOKENS: &str = "gen_ai.usage.cache_creation.input_tokens";
    /// Reasoning tokens, part of the output tokens (semconv, experimental).
    pub const REASONING_TOKENS: &str = "gen_ai.usage.reasoning.output_tokens";
    /// Tool name (semconv).
    pub const TOOL_NAME: &str = "gen_ai.tool.name";
    /// Tool call id (semconv).
    pub const TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
    /// Which resend this attempt is; only on attempts after the first (semconv).
    pub const RESEND_COUNT: &str = "http.request.resend_count";
    /// Low-cardinality error class of a failed operation (semconv).
    pub const ERROR_TYPE: &str = "error.type";

    /// Turn id.
    pub const TURN_ID: &str = "retryscope.turn.id";
    /// Turn status: `completed`, `incomplete` or `failed`.
    pub const TURN_STATUS: &str = "retryscope.turn.status";
    /// Why the turn closed.
    pub const TURN_CLOSED_BY: &str = "retryscope.turn.closed_by";
    /// Number of attempts in the turn.
    pub const TURN_ATTEMPTS: &str = "retryscope.turn.attempts";
    /// Number of retries (attempts after the first).
    pub const TURN_RETRIES: &str = "retryscope.turn.retries";
    /// Characters of the turn's logged output.
    pub const TURN_OUTPUT_CHARS: &str = "retryscope.turn.output_chars";
    /// USD: the attempt's cost on attempt spans, the turn's total on the root.
    pub const COST_USD: &str = "retryscope.cost_usd";
    /// USD of abandoned and failed attempts (root only).
    pub const WASTED_COST_USD: &str = "retryscope.wasted_cost_usd";
    /// Number of findings about the turn (root only).
    pub const FINDINGS_COUNT: &str = "retryscope.findings.count";
    /// Highest finding severity of the turn (root only, when there are findings).
    pub const FINDINGS_MAX_SEVERITY: &str = "retryscope.findings.max_severity";
    /// Attempt number, from 0.
    pub const ATTEMPT_NUMBER: &str = "retryscope.attempt.number";
    /// `completed`, `abandoned`, `failed` or `open`.
    pub const ATTEMPT_OUTCOME: &str = "retryscope.attempt.outcome";
    /// The client's reason for retrying into this attempt.
    pub const ATTEMPT_RETRY_REASON: &str = "retryscope.attempt.retry_reason";
    /// The transport error that ended this attempt.
    pub const ATTEMPT_ERROR: &str = "retryscope.attempt.error";
    /// Characters of text the attempt streamed.
    pub const ATTEMPT_TEXT_CHARS: &str = "retryscope.attempt.text_chars";
    /// The first bytes of the attempt's text; only with content capture.
    pub const ATTEMPT_TEXT_PREFIX: &str = "retryscope.attempt.text_prefix";
    /// Number of complete tool calls in the attempt.
    pub const ATTEMPT_TOOL_CALLS: &str = "retryscope.attempt.tool_calls";
    /// `reported`, `estimated` or `none`.
    pub const USAGE_SOURCE: &str = "retryscope.usage.source";
    /// Effect key of a tool execution.
    pub const EFFECT_KEY: &str = "retryscope.effect_key";
    /// Whether the tool is a read (not an effect).
    pub const TOOL_READ: &str = "retryscope.tool.read";
    /// Client-reported execution status.
    pub const TOOL_STATUS: &str = "retryscope.tool.status";
    /// Finding kind (event attribute).
    pub const FINDING_KIND: &str = "retryscope.finding.kind";
    /// Finding severity (event attribute).
    pub const FINDING_SEVERITY: &str = "retryscope.finding.severity";
    /// Finding evidence (event attribute).
    pub const FINDING_EVIDENCE: &str = "retryscope.finding.evidence";
}

/// What the span builder may put in spans.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpanOptions {
    /// Export attempt text (`retryscope.attempt.text_prefix`). Off by default; it only has
    /// an effect when the correlator also captured content.
    pub capture_content: bool,
}

/// How many spans [`turn_spans`] makes for `report`, without building them.
pub fn span_count(report: &TurnReport) -> usize {
    1 + report
        .attempts
        .iter()
        .map(|a| 1 + a.executed.len())
        .sum::<usize>()
}

/// The spans of one turn: the root first, then each attempt followed by its executions.
pub fn turn_spans(report: &TurnReport, opts: &SpanOptions) -> Vec<SpanData> {
    let turn = report.turn.as_str();
    let (trace_id, root_parent, remote) =
        match report.traceparent.as_deref().and_then(parse_traceparent) {
            Some((trace, parent)) => (trace, parent, true),
            None => (trace_id_for_turn(turn), SpanId::INVALID, false),
        };
    let builder = Builder {
        trace_id,
        scope: InstrumentationScope::builder(SCOPE_NAME)
            .with_version(env!("CARGO_PKG_VERSION"))
            .build(),
    };
    let placed = place_findings(report);
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
        attributes: root_attributes(report),
        findings: &placed.root,
        base_error: (report.status == TurnStatus::Failed).then(|| "failed".to_owned()),
    }));

    for (i, attempt) in report.attempts.iter().enumerate() {
        let attempt_id = span_id(turn, Role::Attempt, attempt.attempt, 0);
        let start = attempt.started_ms.unwrap_or(root_start);
        let end = attempt.ended_ms.unwrap_or(start);
        let model = attempt.model.as_deref().or(report.model.as_deref());
        spans.push(builder.build(Draft {
            id: attempt_id,
            parent: root_id,
            parent_remote: false,
            kind: SpanKind::Client,
            name: match model {
                Some(model) => format!("chat {model}"),
                None => "chat".to_owned(),
            },
            start_ms: start,
            end_ms: end,
            attributes: attempt_attributes(report, attempt, model, opts),
            findings: &placed.attempts[i],
            base_error: attempt_error(report, i),
        }));
        for (j, exec) in attempt.executed.iter().enumerate() {
            let at = exec.ts_ms.unwrap_or(end);
            spans.push(builder.build(Draft {
                id: span_id(turn, Role::Exec, attempt.attempt, j),
                parent: attempt_id,
                parent_remote: false,
                kind: SpanKind::Internal,
                name: format!("execute_tool {}", exec.name),
                start_ms: at,
                end_ms: at,
                attributes: exec_attributes(exec),
                findings: &placed.execs[i][j],
                base_error: None,
            }));
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
}

struct Builder {
    trace_id: TraceId,
    scope: InstrumentationScope,
}

impl Builder {
    fn build(&self, d: Draft<'_>) -> SpanData {
        let end_ms = d.end_ms.max(d.start_ms);
        let mut events = SpanEvents::default();
        events.events = d
            .findings
            .iter()
            .map(|f| finding_event(f, f.ts_ms.unwrap_or(end_ms)))
            .collect();
        SpanData {
            span_context: SpanContext::new(
                self.trace_id,
                d.id,
                TraceFlags::SAMPLED,
                false,
                TraceState::NONE,
            ),
            parent_span_id: d.parent,
            parent_span_is_remote: d.parent_remote,
            span_kind: d.kind,
            name: Cow::Owned(d.name),
            start_time: time(d.start_ms),
            end_time: time(end_ms),
            attributes: d.attributes,
            dropped_attributes_count: 0,
            events,
            links: SpanLinks::default(),
            status: status(d.base_error, d.findings),
            instrumentation_scope: self.scope.clone(),
        }
    }
}

/// Findings sorted onto the spans they concern, by position in the report.
struct Placed<'a> {
    root: Vec<&'a Finding>,
    attempts: Vec<Vec<&'a Finding>>,
    execs: Vec<Vec<Vec<&'a Finding>>>,
}

fn place_findings(report: &TurnReport) -> Placed<'_> {
    let mut placed = Placed {
        root: Vec::new(),
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
        let exec = match (scope, f.call_id.as_deref()) {
            (Scope::Tool, Some(call)) => find_exec(report, attempt, call, f.ts_ms),
            _ => None,
        };
        if let Some((i, j)) = exec {
            placed.execs[i][j].push(f);
        } else if let Some(i) = attempt {
            placed.attempts[i].push(f);
        } else {
            placed.root.push(f);
        }
    }
    placed
}

use crate::rules::Scope;

fn scope(kind: FindingKind) -> Scope {
    crate::rules::rule(kind).scope
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

fn root_attributes(r: &TurnReport) -> Vec<KeyValue> {
    let mut a = vec![KeyValue::new(attr::OPERATION_NAME, "invoke_agent")];
    push_opt(&mut a, attr::AGENT_NAME, r.agent.as_deref());
    push_opt(&mut a, attr::PROVIDER_NAME, r.provider.as_deref());
    push_opt(&mut a, attr::REQUEST_MODEL, r.model.as_deref());
    push_opt(&mut a, attr::CONVERSATION_ID, r.session.as_deref());
    a.extend([
        KeyValue::new(attr::TURN_ID, r.turn.clone()),
        KeyValue::new(attr::TURN_STATUS, r.status.as_str()),
        KeyValue::new(attr::TURN_CLOSED_BY, close_reason(r)),
        KeyValue::new(attr::TURN_ATTEMPTS, int(r.attempts.len() as u64)),
        KeyValue::new(attr::TURN_RETRIES, i64::from(r.retries)),
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
    a
}

fn close_reason(r: &TurnReport) -> &'static str {
    use crate::report::CloseReason;
    match r.closed_by {
        CloseReason::TurnEnd => "turn_end",
        CloseReason::IdleTimeout => "idle_timeout",
        CloseReason::EndOfInput => "end_of_input",
        CloseReason::Evicted => "evicted",
    }
}

fn attempt_attributes(
    r: &TurnReport,
    a: &AttemptReport,
    model: Option<&str>,
    opts: &SpanOptions,
) -> Vec<KeyValue> {
    let mut kv = vec![KeyValue::new(attr::OPERATION_NAME, "chat")];
    push_opt(&mut kv, attr::PROVIDER_NAME, r.provider.as_deref());
    push_opt(&mut kv, attr::REQUEST_MODEL, model);
    if let Some(reason) = &a.finish_reason {
        kv.push(KeyValue::new(
            attr::FINISH_REASONS,
            Value::Array(Array::String(vec![StringValue::from(reason.clone())])),
        ));
    }
    if a.usage.source != UsageSource::None {
        let t = &a.usage.tokens;
        kv.push(KeyValue::new(attr::INPUT_TOKENS, int(t.input_tokens)));
        kv.push(KeyValue::new(attr::OUTPUT_TOKENS, int(t.output_tokens)));
        for (key, value) in [
            (attr::CACHE_READ_TOKENS, t.cached_input_tokens),
            (attr::CACHE_CREATION_TOKENS, t.cache_write_tokens),
            (attr::REASONING_TOKENS, t.reasoning_tokens),
        ] {
            if value > 0 {
                kv.push(KeyValue::new(key, int(value)));
            }
        }
    }
    if a.attempt > 0 {
        kv.push(KeyValue::new(attr::RESEND_COUNT, i64::from(a.attempt)));
    }
    kv.extend([
        KeyValue::new(attr::ATTEMPT_NUMBER, i64::from(a.attempt)),
        KeyValue::new(attr::ATTEMPT_OUTCOME, a.outcome.as_str()),
        KeyValue::new(attr::USAGE_SOURCE, a.usage.source.as_str()),
    ]);
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

fn exec_attributes(e: &ExecReport) -> Vec<KeyValue> {
    let mut kv = vec![
        KeyValue::new(attr::OPERATION_NAME, "execute_tool"),
        KeyValue::new(attr::TOOL_NAME, e.name.clone()),
        KeyValue::new(attr::TOOL_CALL_ID, e.id.clone()),
        KeyValue::new(attr::EFFECT_KEY, e.effect_key.clone()),
        KeyValue::new(attr::TOOL_READ, e.read),
    ];
    push_opt(&mut kv, attr::TOOL_STATUS, e.status.as_deref());
    kv
}

fn finding_event(f: &Finding, ts_ms: i64) -> Event {
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
