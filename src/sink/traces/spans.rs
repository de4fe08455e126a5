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
//! [`Scope`](retryscope_core::rules::Scope) names: a tool finding (`abandoned_tool_executed`,
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
//!
//! Modules: `attributes` (each span's attributes), `findings` (findings placed on spans, and
//! span status), `attr` (the attribute names).

use std::borrow::Cow;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{Link, SpanContext, SpanId, SpanKind, TraceFlags, TraceId, TraceState};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};

use super::calls::model_calls;
use super::ids::{Role, parse_traceparent, span_id, trace_id_for_turn};
use retryscope_core::finding::Finding;
use retryscope_core::report::{TurnReport, TurnStatus};

pub mod attr;
mod attributes;
mod findings;

use attributes::{attempt_attributes, call_attributes, exec_attributes, root_attributes};
use findings::{attempt_error, call_error, finding_event, place_findings, status};

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

/// Milliseconds since the Unix epoch as a `SystemTime`; times before 1970 clamp to the epoch.
fn time(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod call_tests;
