//! The provider-format layer: [`Format`], the [`StreamDecoder`] trait and its factory, and the
//! pieces every provider decoder shares.
//!
//! A provider decoder is a [`ChunkDecoder`]: it sees one parsed payload at a time and writes
//! normalized events through a [`Ctx`], which knows the turn and attempt the events belong to.
//! The same chunk decoder serves a raw stream (turn ids seeded from the stream name, attempts
//! counted from the splices it detects) and the native `provider_chunk` envelope (turn and
//! attempt from the envelope). [`SseStream`] glues SSE framing to a chunk decoder.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use serde::Deserialize;

use super::sse::SseFramer;
use super::{BadLineReason, DecodeError, SkipCounts};
use crate::event::{Event, EventKind, TimestampMs};

/// An input format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Sniff it ([`super::detect()`]).
    Auto,
    /// retryscope's own JSON lines (with `provider_chunk` envelopes).
    Native,
    /// OpenAI Chat Completions chunks.
    OpenAiChat,
    /// OpenAI Responses API events.
    OpenAiResponses,
    /// Anthropic Messages events.
    Anthropic,
    /// Gemini `streamGenerateContent` chunks.
    Gemini,
    /// gemini-cli recorded `.responses` files.
    GeminiCliResponses,
    /// Agent Client Protocol JSON-RPC transcripts.
    Acp,
    /// gemini-cli telemetry log records (JSON lines or its pretty-printed outfile).
    GeminiCliTelemetry,
    /// Claude Code's `--output-format stream-json` (and the Claude Agent SDK's stream).
    ClaudeCode,
    /// Codex's `codex exec --json` events.
    CodexExec,
    /// gemini-cli's `-o stream-json` output (joined with its telemetry outfile in `check`).
    GeminiCliStreamJson,
    /// OpenTelemetry log records and spans, one JSON object per line as the OTLP receiver
    /// writes them (`decode::otlp`): gemini-cli, Claude Code, Codex and GenAI conventions.
    Otlp,
}

impl Format {
    /// Every format, `Auto` first.
    pub const ALL: [Format; 13] = [
        Format::Auto,
        Format::Native,
        Format::OpenAiChat,
        Format::OpenAiResponses,
        Format::Anthropic,
        Format::Gemini,
        Format::GeminiCliResponses,
        Format::Acp,
        Format::GeminiCliTelemetry,
        Format::ClaudeCode,
        Format::CodexExec,
        Format::GeminiCliStreamJson,
        Format::Otlp,
    ];

    /// The name used on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Auto => "auto",
            Format::Native => "native",
            Format::OpenAiChat => "openai-chat",
            Format::OpenAiResponses => "openai-responses",
            Format::Anthropic => "anthropic",
            Format::Gemini => "gemini",
            Format::GeminiCliResponses => "gemini-cli-responses",
            Format::Acp => "acp",
            Format::GeminiCliTelemetry => "gemini-cli-telemetry",
            Format::ClaudeCode => "claude-code",
            Format::CodexExec => "codex-exec",
            Format::GeminiCliStreamJson => "gemini-cli-stream-json",
            Format::Otlp => "otlp",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A format name that is not one of [`Format::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown format `{0}` (expected one of: auto, native, openai-chat, openai-responses, anthropic, gemini, gemini-cli-responses, acp, gemini-cli-telemetry, claude-code, codex-exec, gemini-cli-stream-json, otlp)"
)]
pub struct UnknownFormat(pub String);

impl serde::Serialize for Format {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Format {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = Cow::<str>::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

impl FromStr for Format {
    type Err = UnknownFormat;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Format::ALL
            .into_iter()
            .find(|f| f.as_str() == s)
            .ok_or_else(|| UnknownFormat(s.to_owned()))
    }
}

/// A stateful decoder for one stream (one file or stdin) of a non-native format.
pub(crate) trait StreamDecoder: Send {
    /// Feed one line (without its newline; may end in `\r`). Emits zero or more events.
    fn push_line(&mut self, line: &[u8], out: &mut Vec<Event<'static>>) -> Result<(), DecodeError>;
    /// End of stream: flush what is pending (e.g. an unterminated SSE event; a stream cut
    /// without terminator stays unfinished).
    fn finish(&mut self, out: &mut Vec<Event<'static>>);
    /// Forward-compatible skips so far.
    fn skips(&self) -> SkipCounts;
    /// Whether its input, as far as it has been read, records every tool execution of its
    /// turns: an agent's own output or telemetry, where the agent writes a call, runs it, and
    /// writes its result. Then a turn of it that asked for tools and shows no execution yet is
    /// waiting on them, from the input's first call
    /// ([`crate::correlate::Correlator::input_records_executions`]). A provider stream never
    /// does.
    fn records_executions(&self) -> bool {
        false
    }
    /// What it keeps between lines, for a checkpoint (`None`: this decoder's state is not
    /// kept, and a stream resumed from a checkpoint starts it afresh).
    fn state(&self) -> Option<serde_json::Value> {
        None
    }
    /// Resume from what [`StreamDecoder::state`] gave; `false` (and unchanged) when it does
    /// not fit this decoder.
    fn resume(&mut self, _state: serde_json::Value) -> bool {
        false
    }
}

/// A decoder for one stream of `format`; `stream_name` seeds turn ids for formats that carry
/// none: `<stream_name>` for the first model call, `<stream_name>#2`, `#3`... for later
/// back-to-back calls. `None` for [`Format::Native`] and [`Format::Auto`].
pub(crate) fn stream_decoder(format: Format, stream_name: &str) -> Option<Box<dyn StreamDecoder>> {
    let ctx = |provider| Ctx::stream(stream_name, provider);
    Some(match format {
        Format::Auto | Format::Native => return None,
        Format::OpenAiChat => Box::new(SseStream::new(
            ctx("openai"),
            super::openai_chat::Decoder::default(),
        )),
        Format::OpenAiResponses => Box::new(SseStream::new(
            ctx("openai"),
            super::openai_responses::Decoder::default(),
        )),
        Format::Anthropic => Box::new(SseStream::new(
            ctx("anthropic"),
            super::anthropic::Decoder::default(),
        )),
        Format::Gemini => Box::new(SseStream::new(
            ctx("gemini"),
            super::gemini::Decoder::default(),
        )),
        Format::GeminiCliResponses => Box::new(super::gemini_cli::Decoder::new(
            ctx("gemini").with_agent("gemini-cli"),
        )),
        Format::Acp => Box::new(super::acp::Decoder::default()),
        Format::GeminiCliTelemetry => Box::new(super::gemini_telemetry::Decoder::default()),
        Format::ClaudeCode => Box::new(super::claude_code::Decoder::default()),
        Format::CodexExec => Box::new(super::codex_exec::Decoder::default()),
        Format::GeminiCliStreamJson => Box::new(super::gemini_stream_json::Decoder::default()),
        Format::Otlp => Box::new(super::otlp::Decoder::default()),
    })
}

/// How a [`Ctx`] names turns.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
enum TurnNaming {
    /// Raw stream: `<name>`, then `<name>#2`, `#3`... per model call.
    Stream(String),
    /// Envelope: the client's turn id for every call.
    Fixed,
}

/// Where a chunk decoder's events go: turn, attempt, time and provider. A checkpoint keeps
/// what changes as a stream goes ([`Ctx::resume`]); the provider and agent are the format's.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct Ctx {
    naming: TurnNaming,
    turn: String,
    attempt: u32,
    calls: u32,
    ts_ms: Option<TimestampMs>,
    default_ts: Option<TimestampMs>,
    #[serde(skip)]
    provider: &'static str,
    /// The client kind, when the format is one client's own (the turns' `agent`).
    #[serde(skip)]
    agent: Option<&'static str>,
}

impl Ctx {
    /// Take on what `read` (a checkpoint's) says of the stream so far, keeping this
    /// context's provider and agent (the format's, not written).
    pub(crate) fn resume(&mut self, read: Ctx) {
        let (provider, agent) = (self.provider, self.agent);
        *self = read;
        self.provider = provider;
        self.agent = agent;
    }

    /// A context for a raw stream named `name`.
    pub(crate) fn stream(name: &str, provider: &'static str) -> Self {
        Ctx {
            naming: TurnNaming::Stream(name.to_owned()),
            turn: name.to_owned(),
            attempt: 0,
            calls: 0,
            ts_ms: None,
            default_ts: None,
            provider,
            agent: None,
        }
    }

    /// A context for envelope chunks of `turn`, starting at `attempt`.
    pub(crate) fn fixed(turn: &str, attempt: u32, provider: &'static str) -> Self {
        Ctx {
            naming: TurnNaming::Fixed,
            turn: turn.to_owned(),
            attempt,
            calls: 0,
            ts_ms: None,
            default_ts: None,
            provider,
            agent: None,
        }
    }

    /// Name the client whose recording this is: every turn's `agent`.
    pub(crate) fn with_agent(mut self, agent: &'static str) -> Self {
        self.agent = Some(agent);
        self
    }

    /// The current attempt number.
    pub(crate) fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The current turn id.
    #[cfg(test)]
    pub(crate) fn turn(&self) -> &str {
        &self.turn
    }

    /// Time to use when a chunk carries none (the envelope's `ts`).
    pub(crate) fn set_default_ts(&mut self, ts: Option<TimestampMs>) {
        self.default_ts = ts;
        self.ts_ms = ts;
    }

    /// The current chunk's own time, if it has one (else the default).
    pub(crate) fn set_chunk_ts(&mut self, ts: Option<TimestampMs>) {
        self.ts_ms = ts.or(self.default_ts);
    }

    /// A new model call begins: in a raw stream every call after the first is its own turn.
    pub(crate) fn begin_call(&mut self, model: Option<&str>, out: &mut Vec<Event<'static>>) {
        if let TurnNaming::Stream(name) = &self.naming
            && self.calls > 0
        {
            self.turn = format!("{name}#{}", self.calls + 1);
            self.attempt = 0;
        }
        self.calls += 1;
        self.emit(
            out,
            EventKind::TurnStart {
                model: model.filter(|m| !m.is_empty()).map(owned),
                provider: Some(Cow::Borrowed(self.provider)),
                session: None,
                agent: self.agent.map(Cow::Borrowed),
                traceparent: None,
                wire_only: false,
                requested_model: None,
            },
        );
    }

    /// A retried generation was spliced into the stream: the events that follow belong to a
    /// new attempt, and the earlier one is abandoned.
    pub(crate) fn splice(&mut self, signal: &str, out: &mut Vec<Event<'static>>) {
        self.attempt += 1;
        self.emit(
            out,
            EventKind::StreamSplice {
                signal: owned(signal),
            },
        );
    }

    /// Emit one event of the current turn and attempt.
    pub(crate) fn emit(&self, out: &mut Vec<Event<'static>>, kind: EventKind<'static>) {
        out.push(Event {
            turn: Cow::Owned(self.turn.clone()),
            attempt: Some(self.attempt),
            ts_ms: self.ts_ms,
            kind,
        });
    }
}

/// A provider decoder: one parsed payload at a time.
pub(crate) trait ChunkDecoder: Send {
    /// One payload (`event` is the SSE event name, when the framing had one).
    fn chunk(
        &mut self,
        ctx: &mut Ctx,
        event: Option<&str>,
        data: &str,
        out: &mut Vec<Event<'static>>,
    ) -> Result<(), DecodeError>;
    /// The `[DONE]` sentinel.
    fn done(&mut self, _ctx: &mut Ctx, _out: &mut Vec<Event<'static>>) {}
    /// End of input: whatever is unfinished stays unfinished (incomplete calls are counted).
    fn end(&mut self, ctx: &mut Ctx, out: &mut Vec<Event<'static>>);
    /// Skips so far.
    fn skips(&self) -> SkipCounts;
}

/// SSE (or JSON-per-line) framing in front of a chunk decoder.
pub(crate) struct SseStream<D> {
    ctx: Ctx,
    framer: SseFramer,
    decoder: D,
}

impl<D: ChunkDecoder> SseStream<D> {
    /// Wrap `decoder`.
    pub(crate) fn new(ctx: Ctx, decoder: D) -> Self {
        SseStream {
            ctx,
            framer: SseFramer::new(),
            decoder,
        }
    }

    fn frame(
        &mut self,
        frame: super::sse::Frame,
        out: &mut Vec<Event<'static>>,
    ) -> Result<(), DecodeError> {
        if frame.is_done() {
            self.decoder.done(&mut self.ctx, out);
            return Ok(());
        }
        self.decoder
            .chunk(&mut self.ctx, frame.event.as_deref(), &frame.data, out)
    }
}

/// An [`SseStream`]'s state as a checkpoint keeps it (serialised by reference).
#[derive(serde::Serialize)]
struct SseStateRef<'a, D> {
    ctx: &'a Ctx,
    framer: &'a super::sse::SseFramer,
    decoder: &'a D,
}

/// An [`SseStream`]'s state read back.
#[derive(serde::Deserialize)]
struct SseState<D> {
    ctx: Ctx,
    framer: super::sse::SseFramer,
    decoder: D,
}

impl<D> StreamDecoder for SseStream<D>
where
    D: ChunkDecoder + serde::Serialize + serde::de::DeserializeOwned,
{
    fn push_line(&mut self, line: &[u8], out: &mut Vec<Event<'static>>) -> Result<(), DecodeError> {
        let line = utf8(line)?;
        let mut result = Ok(());
        for frame in self.framer.push_line(line) {
            if let Err(e) = self.frame(frame, out) {
                result = Err(e);
            }
        }
        result
    }

    fn finish(&mut self, out: &mut Vec<Event<'static>>) {
        if let Some(frame) = self.framer.finish() {
            // A malformed last event is dropped: there is no line left to blame it on.
            let _ = self.frame(frame, out);
        }
        self.decoder.end(&mut self.ctx, out);
    }

    fn skips(&self) -> SkipCounts {
        self.decoder.skips()
    }

    fn state(&self) -> Option<serde_json::Value> {
        serde_json::to_value(SseStateRef {
            ctx: &self.ctx,
            framer: &self.framer,
            decoder: &self.decoder,
        })
        .ok()
    }

    fn resume(&mut self, state: serde_json::Value) -> bool {
        let Ok(s) = serde_json::from_value::<SseState<D>>(state) else {
            return false;
        };
        self.ctx.resume(s.ctx);
        self.framer = s.framer;
        self.decoder = s.decoder;
        true
    }
}

/// The line as UTF-8.
pub(crate) fn utf8(line: &[u8]) -> Result<&str, DecodeError> {
    std::str::from_utf8(line).map_err(|e| {
        DecodeError::new(
            BadLineReason::InvalidUtf8,
            format!("invalid UTF-8 at byte {}", e.valid_up_to()),
        )
    })
}

/// One line of a JSON-lines output (the coding agents' own formats): `None` for a blank line,
/// the object otherwise; anything that is not a JSON object is a bad line.
pub(crate) fn json_object_line(line: &[u8]) -> Result<Option<serde_json::Value>, DecodeError> {
    let line = utf8(line)?.trim();
    if line.is_empty() {
        return Ok(None);
    }
    if !line.starts_with('{') {
        return Err(DecodeError::new(
            BadLineReason::InvalidJson,
            "expected a JSON object",
        ));
    }
    parse(line).map(Some)
}

/// Parse a payload, mapping serde errors to bounded reasons (never echoing the input).
pub(crate) fn parse<'a, T: Deserialize<'a>>(data: &'a str) -> Result<T, DecodeError> {
    serde_json::from_str(data).map_err(|e| super::json_error(&e))
}

/// An owned `Cow`.
pub(crate) fn owned(s: &str) -> Cow<'static, str> {
    Cow::Owned(s.to_owned())
}

/// Seconds since the epoch to milliseconds (`0` and negatives mean "no time").
pub(crate) fn secs_to_ms(secs: Option<i64>) -> Option<TimestampMs> {
    secs.filter(|s| *s > 0).and_then(|s| s.checked_mul(1000))
}

/// Arguments text as the tool will receive it: an empty string means no arguments, `{}`.
pub(crate) fn args_or_empty_object(args: &str) -> Cow<'static, str> {
    if args.trim().is_empty() {
        Cow::Borrowed("{}")
    } else {
        owned(args)
    }
}

/// Test helper: decode `lines` as one stream of `format`, returning its events and skips.
#[cfg(test)]
pub(crate) fn decode_lines<'a>(
    format: Format,
    lines: impl IntoIterator<Item = &'a str>,
) -> (Vec<Event<'static>>, SkipCounts) {
    let mut d = stream_decoder(format, "test").expect("a stream decoder for this format");
    let mut out = Vec::new();
    for line in lines {
        d.push_line(line.as_bytes(), &mut out).expect("line");
    }
    d.finish(&mut out);
    (out, d.skips())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_names_round_trip() {
        for f in Format::ALL {
            assert_eq!(f.as_str().parse::<Format>(), Ok(f));
        }
        assert!("sse".parse::<Format>().is_err());
    }

    #[test]
    fn native_and_auto_have_no_stream_decoder() {
        assert!(stream_decoder(Format::Native, "x").is_none());
        assert!(stream_decoder(Format::Auto, "x").is_none());
        for f in &Format::ALL[2..] {
            assert!(stream_decoder(*f, "x").is_some(), "{f}");
        }
    }

    #[test]
    fn stream_ctx_names_later_calls() {
        let mut ctx = Ctx::stream("s.sse", "openai");
        let mut out = Vec::new();
        ctx.begin_call(Some("m"), &mut out);
        ctx.splice("x", &mut out);
        assert_eq!((ctx.turn(), ctx.attempt()), ("s.sse", 1));
        ctx.begin_call(None, &mut out);
        assert_eq!((ctx.turn(), ctx.attempt()), ("s.sse#2", 0));
        ctx.begin_call(None, &mut out);
        assert_eq!(ctx.turn(), "s.sse#3");
    }
}
