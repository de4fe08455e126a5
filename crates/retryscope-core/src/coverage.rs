//! What an input can show: each input kind's sights (attempts, cuts, executions, the text
//! the user saw), what it is blind to, and what to add to see it.
//!
//! Owns: [`InputKind`] (a bounded label: one value per decoder, OTLP split by agent),
//! [`Sight`] and the [`Sights`] bit set, each kind's sights (what its decoder can turn into
//! events, as docs/clients/*.md record for the real clients), the advice for each blind spot,
//! and [`Coverage`], the kinds a run has read and what none of them can show. A finding that
//! needs a sight no input has cannot be raised: "no findings" then means "not seen", and the
//! summaries say so.

use std::fmt;

use crate::decode::Format;

/// One thing an input may or may not show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Sight {
    /// Each attempt of a model call (a retry is a new attempt).
    Attempts,
    /// That a stream was cut (broke off before it finished).
    Cuts,
    /// Which tool calls were executed.
    Executions,
    /// The text the user was shown (where a splice shows).
    DisplayedText,
}

impl Sight {
    /// Every sight, in label order.
    pub const ALL: [Sight; 4] = [
        Sight::Attempts,
        Sight::Cuts,
        Sight::Executions,
        Sight::DisplayedText,
    ];

    /// The label value (`cannot_show`).
    pub fn as_str(self) -> &'static str {
        match self {
            Sight::Attempts => "attempts",
            Sight::Cuts => "cuts",
            Sight::Executions => "executions",
            Sight::DisplayedText => "displayed_text",
        }
    }

    /// Words for a person.
    pub fn words(self) -> &'static str {
        match self {
            Sight::Attempts => "attempts",
            Sight::Cuts => "cuts",
            Sight::Executions => "executions",
            Sight::DisplayedText => "the displayed text",
        }
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// A set of [`Sight`]s.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Sights(u8);

impl Sights {
    /// Nothing.
    pub(crate) const NONE: Sights = Sights(0);
    /// Everything.
    pub(crate) const ALL: Sights = Sights(0b1111);

    /// The set of `sights`.
    pub(crate) fn of(sights: &[Sight]) -> Sights {
        Sights(sights.iter().fold(0, |acc, s| acc | s.bit()))
    }

    /// Whether `sight` is in the set.
    pub fn has(self, sight: Sight) -> bool {
        self.0 & sight.bit() != 0
    }

    /// Both sets.
    pub(crate) fn union(self, other: Sights) -> Sights {
        Sights(self.0 | other.0)
    }

    /// The sights not in the set, in order.
    pub fn missing(self) -> impl Iterator<Item = Sight> {
        Sight::ALL.into_iter().filter(move |s| !self.has(*s))
    }
}

/// The kind of an input, as far as what it can show goes: one per decoder, OTLP by agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum InputKind {
    /// retryscope's own lines (the proxy's recording, `run`'s demo).
    Native,
    /// A raw provider stream (OpenAI Chat/Responses, Anthropic, Gemini SSE or chunks).
    ProviderStream,
    /// gemini-cli recorded `.responses` files.
    GeminiCliResponses,
    /// An Agent Client Protocol transcript.
    Acp,
    /// gemini-cli's telemetry (outfile).
    GeminiCliTelemetry,
    /// gemini-cli's `-o stream-json` output.
    GeminiCliStreamJson,
    /// Claude Code's `--output-format stream-json`.
    ClaudeCode,
    /// Codex's `exec --json`.
    CodexExec,
    /// gemini-cli's OTLP export.
    OtlpGeminiCli,
    /// Claude Code's OTLP export.
    OtlpClaudeCode,
    /// Codex's OTLP export.
    OtlpCodex,
    /// OTLP from any other service (GenAI conventions), or of an agent not told by its name.
    OtlpOther,
}

impl InputKind {
    /// Every kind, in label order.
    pub const ALL: [InputKind; 12] = [
        InputKind::Native,
        InputKind::ProviderStream,
        InputKind::GeminiCliResponses,
        InputKind::Acp,
        InputKind::GeminiCliTelemetry,
        InputKind::GeminiCliStreamJson,
        InputKind::ClaudeCode,
        InputKind::CodexExec,
        InputKind::OtlpGeminiCli,
        InputKind::OtlpClaudeCode,
        InputKind::OtlpCodex,
        InputKind::OtlpOther,
    ];

    /// The kind of a stream read as `format`; OTLP streams are told apart by the service in
    /// the receiver's stream name (`otlp:<service>/<session>`) or a file name that names the
    /// agent. `None` while the format is not decided ([`Format::Auto`]).
    pub fn of(format: Format, stream_name: &str) -> Option<InputKind> {
        Some(match format {
            Format::Auto => return None,
            Format::Native => InputKind::Native,
            Format::OpenAiChat | Format::OpenAiResponses | Format::Anthropic | Format::Gemini => {
                InputKind::ProviderStream
            }
            Format::GeminiCliResponses => InputKind::GeminiCliResponses,
            Format::Acp => InputKind::Acp,
            Format::GeminiCliTelemetry => InputKind::GeminiCliTelemetry,
            Format::GeminiCliStreamJson => InputKind::GeminiCliStreamJson,
            Format::ClaudeCode => InputKind::ClaudeCode,
            Format::CodexExec => InputKind::CodexExec,
            Format::Otlp => {
                let name = stream_name.to_ascii_lowercase();
                let service = name
                    .strip_prefix("otlp:")
                    .and_then(|rest| rest.split('/').next())
                    .unwrap_or(&name);
                if service.contains("claude") {
                    InputKind::OtlpClaudeCode
                } else if service.contains("codex") {
                    InputKind::OtlpCodex
                } else if service.contains("gemini") {
                    InputKind::OtlpGeminiCli
                } else {
                    InputKind::OtlpOther
                }
            }
        })
    }

    /// The label value (`input_kind`).
    pub fn as_str(self) -> &'static str {
        match self {
            InputKind::Native => "native",
            InputKind::ProviderStream => "provider-stream",
            InputKind::GeminiCliResponses => "gemini-cli-responses",
            InputKind::Acp => "acp",
            InputKind::GeminiCliTelemetry => "gemini-cli-telemetry",
            InputKind::GeminiCliStreamJson => "gemini-cli-stream-json",
            InputKind::ClaudeCode => "claude-code-stream-json",
            InputKind::CodexExec => "codex-exec-json",
            InputKind::OtlpGeminiCli => "otlp-gemini-cli",
            InputKind::OtlpClaudeCode => "otlp-claude-code",
            InputKind::OtlpCodex => "otlp-codex",
            InputKind::OtlpOther => "otlp-other",
        }
    }

    /// What the kind's decoder can turn into events.
    pub fn sights(self) -> Sights {
        use Sight::*;
        match self {
            // The proxy sees every request and answer: all of it.
            InputKind::Native => Sights::ALL,
            // One model call's bytes: splices (attempts) and where it broke, nothing after.
            InputKind::ProviderStream => Sights::of(&[Attempts, Cuts]),
            // The recorder strips the ids that tell attempts apart.
            InputKind::GeminiCliResponses => Sights::of(&[Cuts]),
            InputKind::Acp => Sights::of(&[Executions, DisplayedText]),
            InputKind::GeminiCliTelemetry | InputKind::OtlpGeminiCli | InputKind::OtlpCodex => {
                Sights::of(&[Attempts, Cuts, Executions])
            }
            InputKind::GeminiCliStreamJson => Sights::of(&[Executions, DisplayedText]),
            InputKind::ClaudeCode | InputKind::CodexExec => Sights::ALL,
            // A cut message's api_request looks finished (docs/clients/claude-code.md).
            InputKind::OtlpClaudeCode | InputKind::OtlpOther => Sights::of(&[Attempts, Executions]),
        }
    }

    /// What to add to see `sight`, which this kind cannot show.
    pub(crate) fn advice(self, sight: Sight) -> &'static str {
        match (self, sight) {
            (InputKind::GeminiCliStreamJson, Sight::Attempts | Sight::Cuts) => {
                "add gemini-cli's telemetry file (or its OTLP export), or use the proxy"
            }
            (InputKind::GeminiCliTelemetry | InputKind::OtlpGeminiCli, Sight::DisplayedText) => {
                "add gemini-cli's -o stream-json output"
            }
            (InputKind::OtlpClaudeCode, _) => {
                "read Claude Code's --output-format stream-json --include-partial-messages \
                 output, or use the proxy"
            }
            (InputKind::OtlpCodex, _) => "add codex exec --json output, or use the proxy",
            _ => "use the proxy (retryscope proxy), which sees every request and answer",
        }
    }
}

impl fmt::Display for InputKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A blind spot of a run's inputs: a kind that cannot show `sight`, and no other input can.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlindSpot {
    /// The input kind.
    pub kind: InputKind,
    /// What it cannot show.
    pub sight: Sight,
    /// What to add.
    pub advice: &'static str,
}

/// The input kinds a run has read, with how many streams of each.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Coverage {
    streams: [u64; InputKind::ALL.len()],
}

impl Coverage {
    /// A stream of `kind` was read.
    pub fn add(&mut self, kind: InputKind) {
        self.streams[kind as usize] += 1;
    }

    /// How many streams of `kind` were read.
    pub fn streams(&self, kind: InputKind) -> u64 {
        self.streams[kind as usize]
    }

    /// The kinds read, in label order.
    pub fn kinds(&self) -> impl Iterator<Item = InputKind> + '_ {
        InputKind::ALL
            .into_iter()
            .filter(|k| self.streams[*k as usize] > 0)
    }

    /// What the inputs together can show. (gemini-cli's telemetry and stream-json of one
    /// session are joined into one turn, so their sights add up; for other mixes this is what
    /// some input shows, not every turn.)
    pub fn sights(&self) -> Sights {
        self.kinds()
            .fold(Sights::NONE, |acc, k| acc.union(k.sights()))
    }

    /// Each read kind's blind spots that no other read input covers.
    pub fn blind_spots(&self) -> Vec<BlindSpot> {
        let all = self.sights();
        self.kinds()
            .flat_map(|kind| {
                kind.sights()
                    .missing()
                    .filter(move |s| !all.has(*s))
                    .map(move |sight| BlindSpot {
                        kind,
                        sight,
                        advice: kind.advice(sight),
                    })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_json_alone_cannot_show_cuts_and_says_what_to_add() {
        let mut c = Coverage::default();
        c.add(InputKind::GeminiCliStreamJson);
        let spots = c.blind_spots();
        let cuts = spots.iter().find(|b| b.sight == Sight::Cuts).unwrap();
        assert_eq!(cuts.kind, InputKind::GeminiCliStreamJson);
        assert!(cuts.advice.contains("telemetry"), "{}", cuts.advice);
        assert!(!c.sights().has(Sight::Cuts));
    }

    #[test]
    fn telemetry_and_stream_json_together_see_everything() {
        let mut c = Coverage::default();
        c.add(InputKind::GeminiCliStreamJson);
        c.add(InputKind::GeminiCliTelemetry);
        assert_eq!(c.sights(), Sights::ALL);
        assert!(c.blind_spots().is_empty());
    }

    #[test]
    fn otlp_kind_follows_the_service_in_the_stream_name() {
        let k = |n| InputKind::of(Format::Otlp, n);
        assert_eq!(k("otlp:claude-code/abc"), Some(InputKind::OtlpClaudeCode));
        assert_eq!(k("otlp:codex_exec/abc"), Some(InputKind::OtlpCodex));
        assert_eq!(k("otlp:gemini-cli/abc"), Some(InputKind::OtlpGeminiCli));
        assert_eq!(k("otlp:my-app/s"), Some(InputKind::OtlpOther));
        assert_eq!(k("/x/claude-otlp.jsonl"), Some(InputKind::OtlpClaudeCode));
        assert_eq!(InputKind::of(Format::Auto, "x"), None);
        assert!(!InputKind::OtlpClaudeCode.sights().has(Sight::Cuts));
    }

    #[test]
    fn every_format_but_auto_has_a_kind() {
        for f in Format::ALL {
            assert_eq!(InputKind::of(f, "x").is_some(), f != Format::Auto, "{f}");
        }
    }
}
