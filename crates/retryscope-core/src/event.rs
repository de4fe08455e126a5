//! The normalized stream event: what every decoder produces and the correlator consumes.
//!
//! One `Event` is one thing that happened in one turn: a text fragment, a complete tool call,
//! an execution, usage, a finish, a retry. Strings borrow from the input line where they can
//! (`Cow<'a, str>`), so the native decoder does not allocate on the hot path; provider decoders,
//! which assemble fragments, hand out owned strings.

use std::borrow::Cow;

/// Milliseconds since the Unix epoch. Event time, never the collector's clock.
pub(crate) type TimestampMs = i64;

/// One normalized event of one turn. Serializable (always deserialized owned) so events held
/// between decode and correlation can be checkpointed.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Event<'a> {
    /// The turn this event belongs to (the client's turn id).
    pub turn: Cow<'a, str>,
    /// The attempt number (from 0) for attempt-scoped events.
    pub attempt: Option<u32>,
    /// Event time in Unix milliseconds; `None` means "use arrival time".
    pub ts_ms: Option<TimestampMs>,
    /// What happened.
    pub kind: EventKind<'a>,
}

/// Whether a tool execution changes state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EffectClass {
    /// A pure read: never a duplicate effect, never dangerous when abandoned.
    Read,
    /// Changes state somewhere (the default when unspecified).
    Write,
}

/// Token usage one attempt reported (or a decoder assembled from a provider stream).
///
/// `input_tokens` counts every input token, including `cached_input_tokens` and
/// `cache_write_tokens`; `output_tokens` includes `reasoning_tokens`. Decoders convert
/// provider conventions (Anthropic reports cache tokens apart, Gemini reports thoughts apart).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Usage {
    /// All input (prompt) tokens.
    pub input_tokens: u64,
    /// All output (completion) tokens, reasoning included.
    pub output_tokens: u64,
    /// Input tokens served from a prompt cache (subset of `input_tokens`).
    pub cached_input_tokens: u64,
    /// Input tokens written to a prompt cache (subset of `input_tokens`).
    pub cache_write_tokens: u64,
    /// Reasoning/thinking tokens (subset of `output_tokens`).
    pub reasoning_tokens: u64,
}

/// The payload of an [`Event`].
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind<'a> {
    /// A turn begins; carries turn-level metadata.
    TurnStart {
        /// The model, as the log names it (for a provider stream: the answered one).
        model: Option<Cow<'a, str>>,
        /// The model the request asked for, when the log tells it apart from the answered
        /// one (`retryscope proxy`: an alias such as `claude-sonnet-4-5`).
        requested_model: Option<Cow<'a, str>>,
        /// Provider name (`openai`, `anthropic`, `gemini`, ...).
        provider: Option<Cow<'a, str>>,
        /// Client session id (never used as a metric label).
        session: Option<Cow<'a, str>>,
        /// Agent name.
        agent: Option<Cow<'a, str>>,
        /// W3C traceparent of the agent's own span for this turn.
        traceparent: Option<Cow<'a, str>>,
        /// The log sees the provider traffic only, never what the client displayed (a
        /// proxy): a render reset cannot show in it, so text of two attempts with no reset
        /// between proves no splice; only the turn's `output` can.
        wire_only: bool,
    },
    /// An attempt begins explicitly (the first event of an attempt also opens it).
    AttemptStart {
        /// Model used by this attempt (may differ from the turn's, e.g. a fallback).
        model: Option<Cow<'a, str>>,
        /// Provider request id.
        request_id: Option<Cow<'a, str>>,
    },
    /// The client retries; `attempt` is the NEW attempt's number.
    Retry {
        /// Why (`connection_reset`, `overloaded`, ...).
        reason: Option<Cow<'a, str>>,
        /// A continuation: the earlier attempt's partial output the retry request carries
        /// (an assistant prefill). The turn's kept text is then this, followed by what the
        /// new attempt streams.
        prefill: Option<Cow<'a, str>>,
    },
    /// A lower layer spliced a retried generation into one recorded stream
    /// (detected by a provider decoder); `attempt` is the new attempt's number.
    StreamSplice {
        /// The signal that revealed the splice (`message_start id changed`, ...).
        signal: Cow<'a, str>,
    },
    /// A text fragment the model streamed.
    Text {
        /// The fragment.
        text: Cow<'a, str>,
    },
    /// A complete tool call as the client assembled it.
    ToolCall {
        /// Provider call id (differs per attempt).
        id: Cow<'a, str>,
        /// Tool name.
        name: Cow<'a, str>,
        /// Raw JSON text of the arguments.
        args: Option<Cow<'a, str>>,
    },
    /// The client executed a tool call; `attempt` is the attempt that produced the call.
    ToolExec {
        /// Provider call id.
        id: Cow<'a, str>,
        /// Tool name.
        name: Cow<'a, str>,
        /// Raw JSON text of the arguments, when the client logged them.
        args: Option<Cow<'a, str>>,
        /// An idempotency key the client chose; wins over the derived one.
        effect_key: Option<Cow<'a, str>>,
        /// Orchestrator step number, to tell apart genuinely repeated effects.
        step: Option<i64>,
        /// Read or write; `None` means write unless configured read-only.
        effect: Option<EffectClass>,
        /// Execution status as the client reported it.
        status: Option<Cow<'a, str>>,
        /// The start of the result the client sent back to the model, when it says how the
        /// execution ended (evidence for a person: "User aborted the command"); at most
        /// 240 bytes (`MAX_RESULT_BYTES`), see [`result_excerpt`].
        result: Option<Cow<'a, str>>,
    },
    /// The client told its renderers to discard partial output.
    RenderReset,
    /// Usage of one attempt.
    Usage {
        /// The token counts.
        usage: Usage,
        /// Model the usage was billed for, when it differs.
        model: Option<Cow<'a, str>>,
    },
    /// The attempt finished.
    Finish {
        /// Provider finish/stop reason.
        reason: Cow<'a, str>,
    },
    /// The attempt failed in transport.
    Error {
        /// Error message.
        message: Cow<'a, str>,
        /// Error code or type.
        code: Option<Cow<'a, str>>,
    },
    /// The final text the client committed or showed for the turn.
    Output {
        /// The text.
        text: Cow<'a, str>,
    },
    /// The turn ended.
    TurnEnd {
        /// Client-reported status.
        status: Option<Cow<'a, str>>,
    },
}

impl EventKind<'_> {
    /// The wire name of this event type in the native format.
    pub fn type_name(&self) -> &'static str {
        match self {
            EventKind::TurnStart { .. } => "turn_start",
            EventKind::AttemptStart { .. } => "attempt_start",
            EventKind::Retry { .. } => "retry",
            EventKind::StreamSplice { .. } => "stream_splice",
            EventKind::Text { .. } => "text",
            EventKind::ToolCall { .. } => "tool_call",
            EventKind::ToolExec { .. } => "tool_exec",
            EventKind::RenderReset => "render_reset",
            EventKind::Usage { .. } => "usage",
            EventKind::Finish { .. } => "finish",
            EventKind::Error { .. } => "error",
            EventKind::Output { .. } => "output",
            EventKind::TurnEnd { .. } => "turn_end",
        }
    }
}

fn own(c: Cow<'_, str>) -> Cow<'static, str> {
    Cow::Owned(c.into_owned())
}

fn own_opt(c: Option<Cow<'_, str>>) -> Option<Cow<'static, str>> {
    c.map(own)
}

impl Event<'static> {
    /// An owned event of `turn` (decoders that build events from parsed JSON).
    pub fn owned(
        turn: &str,
        attempt: Option<u32>,
        ts_ms: Option<TimestampMs>,
        kind: EventKind<'static>,
    ) -> Self {
        Event {
            turn: Cow::Owned(turn.to_owned()),
            attempt,
            ts_ms,
            kind,
        }
    }
}

impl Event<'_> {
    /// Detach the event from the buffer it borrows from.
    pub(crate) fn into_owned(self) -> Event<'static> {
        let kind = match self.kind {
            EventKind::TurnStart {
                model,
                requested_model,
                provider,
                session,
                agent,
                traceparent,
                wire_only,
            } => EventKind::TurnStart {
                model: own_opt(model),
                requested_model: own_opt(requested_model),
                provider: own_opt(provider),
                session: own_opt(session),
                agent: own_opt(agent),
                traceparent: own_opt(traceparent),
                wire_only,
            },
            EventKind::AttemptStart { model, request_id } => EventKind::AttemptStart {
                model: own_opt(model),
                request_id: own_opt(request_id),
            },
            EventKind::Retry { reason, prefill } => EventKind::Retry {
                reason: own_opt(reason),
                prefill: own_opt(prefill),
            },
            EventKind::StreamSplice { signal } => EventKind::StreamSplice {
                signal: own(signal),
            },
            EventKind::Text { text } => EventKind::Text { text: own(text) },
            EventKind::ToolCall { id, name, args } => EventKind::ToolCall {
                id: own(id),
                name: own(name),
                args: own_opt(args),
            },
            EventKind::ToolExec {
                id,
                name,
                args,
                effect_key,
                step,
                effect,
                status,
                result,
            } => EventKind::ToolExec {
                id: own(id),
                name: own(name),
                args: own_opt(args),
                effect_key: own_opt(effect_key),
                step,
                effect,
                status: own_opt(status),
                result: own_opt(result),
            },
            EventKind::RenderReset => EventKind::RenderReset,
            EventKind::Usage { usage, model } => EventKind::Usage {
                usage,
                model: own_opt(model),
            },
            EventKind::Finish { reason } => EventKind::Finish {
                reason: own(reason),
            },
            EventKind::Error { message, code } => EventKind::Error {
                message: own(message),
                code: own_opt(code),
            },
            EventKind::Output { text } => EventKind::Output { text: own(text) },
            EventKind::TurnEnd { status } => EventKind::TurnEnd {
                status: own_opt(status),
            },
        };
        Event {
            turn: own(self.turn),
            attempt: self.attempt,
            ts_ms: self.ts_ms,
            kind,
        }
    }
}

/// Bytes of a tool result kept as evidence.
pub(crate) const MAX_RESULT_BYTES: usize = 240;

/// The start of a tool result's text, cut on a character boundary at 240 bytes
/// (a `…` marks the cut), with surrounding whitespace trimmed.
pub fn result_excerpt(text: &str) -> String {
    let text = text.trim();
    if text.len() <= MAX_RESULT_BYTES {
        return text.to_owned();
    }
    let mut cut = MAX_RESULT_BYTES;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &text[..cut])
}
