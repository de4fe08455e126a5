//! Attribute names used on exported spans and events.
//!
//! Every `gen_ai.*`, `http.*` and `error.*` name here was checked against the registry of
//! the OpenTelemetry semantic conventions (GenAI: `model/gen-ai/registry.yaml` of
//! open-telemetry/semantic-conventions-genai, where the GenAI conventions moved; HTTP and
//! `error.type`: open-telemetry/semantic-conventions, `model/http/registry.yaml`, stable).
//! All GenAI names are in "development" stability there. Everything retryscope adds is
//! under `retryscope.*`, never in a namespace the conventions own. See the span builder's
//! module doc for where each goes and for the deviations.

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
/// Input tokens, cached included (semconv).
pub const INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
/// Output tokens, reasoning included (semconv).
pub const OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
/// Input tokens read from a prompt cache (semconv).
pub const CACHE_READ_TOKENS: &str = "gen_ai.usage.cache_read.input_tokens";
/// Input tokens written to a prompt cache (semconv).
pub const CACHE_CREATION_TOKENS: &str = "gen_ai.usage.cache_creation.input_tokens";
/// Reasoning tokens, part of the output tokens (semconv).
pub const REASONING_TOKENS: &str = "gen_ai.usage.reasoning.output_tokens";
/// Tool name (semconv).
pub const TOOL_NAME: &str = "gen_ai.tool.name";
/// Tool call id (semconv).
pub const TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
/// Which resend of its model call an attempt is; only on attempts after the call's first
/// (semconv, HTTP, stable).
pub const RESEND_COUNT: &str = "http.request.resend_count";
/// Low-cardinality error class of a failed operation (semconv, stable).
pub const ERROR_TYPE: &str = "error.type";

/// Turn id.
pub const TURN_ID: &str = "retryscope.turn.id";
/// Turn status: `completed`, `incomplete` or `failed`.
pub const TURN_STATUS: &str = "retryscope.turn.status";
/// Why the turn closed.
pub const TURN_CLOSED_BY: &str = "retryscope.turn.closed_by";
/// Number of attempts in the turn.
pub const TURN_ATTEMPTS: &str = "retryscope.turn.attempts";
/// Number of retries (attempts after the first), as the correlator counts them.
pub const TURN_RETRIES: &str = "retryscope.turn.retries";
/// Number of model calls in the turn.
pub const TURN_CALLS: &str = "retryscope.turn.model_calls";
/// Characters of the turn's logged output.
pub const TURN_OUTPUT_CHARS: &str = "retryscope.turn.output_chars";
/// USD: the span's own cost, its children's included (attempt; model call: its attempts;
/// root: the turn's).
pub const COST_USD: &str = "retryscope.cost_usd";
/// USD of abandoned and failed attempts (root and model call).
pub const WASTED_COST_USD: &str = "retryscope.wasted_cost_usd";
/// Number of findings about the turn (root only).
pub const FINDINGS_COUNT: &str = "retryscope.findings.count";
/// Highest finding severity of the turn (root only, when there are findings).
pub const FINDINGS_MAX_SEVERITY: &str = "retryscope.findings.max_severity";
/// Index of the model call in its turn, from 0.
pub const CALL_INDEX: &str = "retryscope.model_call.index";
/// Attempts of the model call.
pub const CALL_ATTEMPTS: &str = "retryscope.model_call.attempts";
/// Attempts of the model call that were billed (their usage is in the call's
/// `gen_ai.usage.*`).
pub const CALL_BILLED_ATTEMPTS: &str = "retryscope.model_call.billed_attempts";
/// Attempt number, from 0, as logged (unique in the turn).
pub const ATTEMPT_NUMBER: &str = "retryscope.attempt.number";
/// `completed`, `abandoned`, `failed` or `open`.
pub const ATTEMPT_OUTCOME: &str = "retryscope.attempt.outcome";
/// The model the attempt asked for, when logged.
pub const ATTEMPT_MODEL: &str = "retryscope.attempt.model";
/// The attempt's finish reason.
pub const ATTEMPT_FINISH_REASON: &str = "retryscope.attempt.finish_reason";
/// The client's reason for retrying into this attempt.
pub const ATTEMPT_RETRY_REASON: &str = "retryscope.attempt.retry_reason";
/// The transport error that ended this attempt (content capture only).
pub const ATTEMPT_ERROR: &str = "retryscope.attempt.error";
/// Characters of text the attempt streamed.
pub const ATTEMPT_TEXT_CHARS: &str = "retryscope.attempt.text_chars";
/// The first bytes of the attempt's text; only with content capture.
pub const ATTEMPT_TEXT_PREFIX: &str = "retryscope.attempt.text_prefix";
/// Number of complete tool calls in the attempt.
pub const ATTEMPT_TOOL_CALLS: &str = "retryscope.attempt.tool_calls";
/// The attempt's input tokens (its share of the call's `gen_ai.usage.input_tokens`).
pub const ATTEMPT_INPUT_TOKENS: &str = "retryscope.attempt.usage.input_tokens";
/// The attempt's output tokens.
pub const ATTEMPT_OUTPUT_TOKENS: &str = "retryscope.attempt.usage.output_tokens";
/// The attempt's input tokens read from a prompt cache.
pub const ATTEMPT_CACHE_READ_TOKENS: &str = "retryscope.attempt.usage.cache_read.input_tokens";
/// The attempt's input tokens written to a prompt cache.
pub const ATTEMPT_CACHE_CREATION_TOKENS: &str =
    "retryscope.attempt.usage.cache_creation.input_tokens";
/// The attempt's reasoning tokens.
pub const ATTEMPT_REASONING_TOKENS: &str = "retryscope.attempt.usage.reasoning.output_tokens";
/// `reported`, `estimated` or `none`: where the span's usage comes from (on a model call:
/// `estimated` when any billed attempt was estimated).
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
/// Text from the input that shows a finding (a tool's result; content capture only).
pub const FINDING_QUOTE: &str = "retryscope.finding.quote";
