//! The closed-turn report: what the correlator hands to every sink when a turn closes.
//!
//! These types are also the per-turn objects of `retryscope check --json`, so their field
//! names are a public contract (see `docs/event-format.md`).

use serde::{Deserialize, Serialize};

use crate::event::Usage;
use crate::finding::Finding;

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// It finished (a `finish` event).
    Completed,
    /// A retry replaced it before it finished.
    Abandoned,
    /// It failed in transport and was not retried.
    Failed,
    /// It never finished, failed or was abandoned.
    Open,
}

impl Outcome {
    /// Every outcome, for pre-registering metric series.
    pub const ALL: [Outcome; 4] = [
        Outcome::Completed,
        Outcome::Abandoned,
        Outcome::Failed,
        Outcome::Open,
    ];

    /// The wire and label name.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Abandoned => "abandoned",
            Outcome::Failed => "failed",
            Outcome::Open => "open",
        }
    }

    /// Whether the attempt's output was thrown away (its cost is wasted spend).
    pub fn is_wasted(self) -> bool {
        matches!(self, Outcome::Abandoned | Outcome::Failed)
    }
}

/// How a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TurnStatus {
    /// Its last attempt finished.
    Completed,
    /// No attempt finished and the last did not fail.
    Incomplete,
    /// Its last attempt failed.
    Failed,
}

impl TurnStatus {
    /// Every status, for pre-registering metric series.
    pub const ALL: [TurnStatus; 3] = [
        TurnStatus::Completed,
        TurnStatus::Incomplete,
        TurnStatus::Failed,
    ];

    /// The wire and label name.
    pub fn as_str(self) -> &'static str {
        match self {
            TurnStatus::Completed => "completed",
            TurnStatus::Incomplete => "incomplete",
            TurnStatus::Failed => "failed",
        }
    }
}

/// Why the correlator closed a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CloseReason {
    /// A `turn_end` event.
    TurnEnd,
    /// No event for the idle timeout.
    IdleTimeout,
    /// The input ended.
    EndOfInput,
    /// Too many open turns: the oldest was evicted.
    Evicted,
}

/// Where an attempt's usage figures come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UsageSource {
    /// The provider or client reported it.
    Reported,
    /// Estimated: input from the turn's other attempts, output from the text length.
    Estimated,
    /// Nothing reported and nothing to estimate from.
    None,
}

impl UsageSource {
    /// Every source, for pre-registering metric series.
    pub const ALL: [UsageSource; 3] = [
        UsageSource::Reported,
        UsageSource::Estimated,
        UsageSource::None,
    ];

    /// The wire and label name.
    pub fn as_str(self) -> &'static str {
        match self {
            UsageSource::Reported => "reported",
            UsageSource::Estimated => "estimated",
            UsageSource::None => "none",
        }
    }
}

/// Billed usage of one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct UsageReport {
    /// Token counts (see [`Usage`] for what includes what).
    #[serde(flatten)]
    pub tokens: Usage,
    /// Where the numbers come from.
    pub source: UsageSource,
}

/// A tool call reference in a report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallReport {
    /// Provider call id.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Effect key (see [`crate::effect`]).
    pub effect_key: String,
}

/// One execution of a tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecReport {
    /// Provider call id.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Effect key.
    pub effect_key: String,
    /// True for reads (not effects).
    pub read: bool,
    /// Client-reported status.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Event time of the execution.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ts_ms: Option<i64>,
}

/// What happened at one point of an attempt's timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MarkKind {
    /// A run of consecutive text events (`ts_ms` to `end_ms`, `chars` in all).
    Text,
    /// A complete tool call (`call_id`).
    ToolCall,
    /// The client reset its renderer for this attempt.
    RenderReset,
    /// Usage was reported.
    Usage,
    /// The attempt finished.
    Finish,
    /// The attempt failed in transport.
    Error,
}

/// One event (or run of text events) on an attempt's timeline. Kept only when asked for
/// (`check --html`), at most 64 (`MAX_TIMELINE_MARKS`) per attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimelineMark {
    /// What.
    pub kind: MarkKind,
    /// Event time (of the first event of a text run).
    pub ts_ms: i64,
    /// Event time of the last event of a text run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_ms: Option<i64>,
    /// Characters of a text run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chars: Option<u64>,
    /// The call of a `tool_call` mark.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
}

/// Timeline marks kept per attempt; later ones are counted in `timeline_dropped`.
pub(crate) const MAX_TIMELINE_MARKS: usize = 64;

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One attempt of a turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptReport {
    /// Attempt number, from 0.
    pub attempt: u32,
    /// How it ended.
    pub outcome: Outcome,
    /// Provider finish reason.
    pub finish_reason: Option<String>,
    /// Transport error (code and message from the log), when it failed; only when content
    /// capture is opted into (it can carry prompts, paths or keys echoed by a server).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Characters of the transport error, whether or not its text is captured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_chars: Option<u64>,
    /// Why the client retried into this attempt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_reason: Option<String>,
    /// Model of this attempt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Characters of text streamed.
    pub text_chars: u64,
    /// The first bytes of the attempt's text; only when content capture is opted into.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_prefix: Option<String>,
    /// Complete tool calls.
    pub tool_calls: Vec<CallReport>,
    /// Executions of this attempt's calls.
    pub executed: Vec<ExecReport>,
    /// Billed usage.
    pub usage: UsageReport,
    /// USD cost; `None` when the model has no price.
    pub cost_usd: Option<f64>,
    /// First event time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_ms: Option<i64>,
    /// Last event time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_ms: Option<i64>,
    /// Events on this attempt's timeline, in arrival order (only with `check --html`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timeline: Vec<TimelineMark>,
    /// Timeline marks not kept (beyond 64 per attempt).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub timeline_dropped: u32,
}

/// Where a turn came from: the input (a file's path, `<stdin>`, an OTLP stream
/// `otlp:<service>/<session>`, the proxy's feed, or a joined gemini-cli session) and the line
/// of that input that opened it, when it has lines of its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnSource {
    /// The input's name.
    pub input: String,
    /// The 1-based line that opened the turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
}

impl std::fmt::Display for TurnSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}", self.input),
            None => f.write_str(&self.input),
        }
    }
}

/// One closed turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnReport {
    /// Turn id.
    pub turn: String,
    /// Model (the turn's, else the last attempt's).
    pub model: Option<String>,
    /// The model the request asked for, when the log tells it apart from `model` (the proxy:
    /// `model` is the answered one, this the request's, often an alias).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_model: Option<String>,
    /// Provider.
    pub provider: Option<String>,
    /// Agent name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Client session id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// Where the turn came from (its input and first line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<TurnSource>,
    /// W3C traceparent the turn joins.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// How the turn ended.
    pub status: TurnStatus,
    /// Why it was closed.
    pub closed_by: CloseReason,
    /// Number of retries (attempts after the first).
    pub retries: u32,
    /// Total billed USD over all attempts.
    pub cost_usd: f64,
    /// USD of abandoned and failed attempts.
    pub wasted_cost_usd: f64,
    /// Characters of the `output` event, when the client logged one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_chars: Option<u64>,
    /// The first bytes of the `output` event's text; only when content capture is opted into.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_prefix: Option<String>,
    /// First event time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_ms: Option<i64>,
    /// Last event time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_ms: Option<i64>,
    /// The attempts, by number.
    pub attempts: Vec<AttemptReport>,
    /// Every finding about this turn, in the order they became known.
    pub findings: Vec<Finding>,
    /// The correlator's sequence number of the turn's first event (ordering only).
    #[serde(skip)]
    pub opened_seq: u64,
}
