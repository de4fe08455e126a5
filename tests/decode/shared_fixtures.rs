//! Every real recorded stream under the shared fixtures folder: auto-detect, decode, correlate,
//! and compare with an expectation table written by reading each file.
//!
//! The folder lives outside the repository (`../shared/fixtures` from the manifest directory,
//! or `$RETRYSCOPE_SHARED_FIXTURES`). When it is absent the test prints a note and passes, so
//! the repository builds and tests on its own. Any file the table does not list fails the
//! test, so a new recording cannot be skipped silently.

use crate::common;

use std::path::{Path, PathBuf};

use common::{correlate, decode, findings, summary};
use retryscope_core::decode::Format;
use retryscope_core::finding::FindingKind;
use retryscope_core::report::TurnStatus;

/// Token figures: (input, output, cached, cache write, reasoning).
type Tokens = (u64, u64, u64, u64, u64);

struct Turn {
    /// Suffix of the turn id after the file name (`""`, `"#2"`...).
    suffix: &'static str,
    status: TurnStatus,
    attempts: usize,
    finish: Option<&'static str>,
    /// (name, id) of the complete tool calls, in order.
    calls: &'static [(&'static str, &'static str)],
    /// Reported usage of the last attempt; `None` when nothing was reported.
    usage: Option<Tokens>,
    findings: &'static [FindingKind],
}

struct Expect {
    path: &'static str,
    format: Format,
    incomplete_calls: u64,
    turns: &'static [Turn],
}

const fn clean(
    suffix: &'static str,
    finish: &'static str,
    calls: &'static [(&'static str, &'static str)],
    usage: Option<Tokens>,
) -> Turn {
    Turn {
        suffix,
        status: TurnStatus::Completed,
        attempts: 1,
        finish: Some(finish),
        calls,
        usage,
        findings: &[],
    }
}

const EXPECT: &[Expect] = &[
    // ---- OpenAI Chat Completions
    Expect {
        path: "openai-chat/openai-python__parallel-tool-calls.sse",
        format: Format::OpenAiChat,
        incomplete_calls: 0,
        turns: &[clean(
            "",
            "tool_calls",
            &[
                ("GetWeatherArgs", "call_JMW1whyEaYG438VE1OIflxA2"),
                ("get_stock_price", "call_DNYTawLBoN8fj3KN6qU9N1Ou"),
            ],
            Some((149, 60, 0, 0, 0)),
        )],
    },
    Expect {
        path: "openai-chat/openai-python__strict-tool-call.sse",
        format: Format::OpenAiChat,
        incomplete_calls: 0,
        turns: &[clean(
            "",
            "tool_calls",
            &[("get_weather", "call_CTf1nWJLqSeRgDqaCG27xZ74")],
            Some((48, 19, 0, 0, 0)),
        )],
    },
    Expect {
        path: "openai-chat/openai-python__max-tokens-length.sse",
        format: Format::OpenAiChat,
        incomplete_calls: 0,
        turns: &[clean("", "length", &[], Some((79, 1, 0, 0, 0)))],
    },
    Expect {
        path: "openai-chat/openai-python__text.sse",
        format: Format::OpenAiChat,
        incomplete_calls: 0,
        turns: &[clean("", "stop", &[], Some((14, 30, 0, 0, 0)))],
    },
    Expect {
        path: "openai-chat/openai-python__refusal.sse",
        format: Format::OpenAiChat,
        incomplete_calls: 0,
        turns: &[clean("", "stop", &[], Some((79, 11, 0, 0, 0)))],
    },
    Expect {
        path: "openai-chat/openai-text.chunks.txt",
        format: Format::OpenAiChat,
        incomplete_calls: 0,
        turns: &[clean("", "stop", &[], Some((16, 300, 0, 0, 0)))],
    },
    Expect {
        // Azure's metadata-only first chunk (empty id, choices: []) is not the usage chunk.
        path: "openai-chat/azure-model-router.1.chunks.txt",
        format: Format::OpenAiChat,
        incomplete_calls: 0,
        turns: &[clean("", "stop", &[], Some((15, 78, 0, 0, 64)))],
    },
    Expect {
        // Usage rides on the finish chunk; cached 320 of 339.
        path: "openai-chat/deepseek-tool-call.chunks.txt",
        format: Format::OpenAiChat,
        incomplete_calls: 0,
        turns: &[clean(
            "",
            "tool_calls",
            &[("weather", "call_00_ioIn7yN9p1ZOMNpDLwd4MgAF")],
            Some((339, 83, 320, 0, 39)),
        )],
    },
    Expect {
        // The whole call in one delta; usage on the finish chunk.
        path: "openai-chat/groq-tool-call.chunks.txt",
        format: Format::OpenAiChat,
        incomplete_calls: 0,
        turns: &[clean(
            "",
            "tool_calls",
            &[("weather", "tk85n1k4m")],
            Some((210, 15, 0, 0, 0)),
        )],
    },
    // ---- OpenAI Responses
    Expect {
        path: "openai-responses/openai-error.1.chunks.txt",
        format: Format::OpenAiResponses,
        incomplete_calls: 0,
        turns: &[Turn {
            suffix: "",
            status: TurnStatus::Failed,
            attempts: 1,
            finish: None,
            calls: &[],
            usage: None,
            findings: &[FindingKind::IncompleteTurn],
        }],
    },
    Expect {
        path: "openai-responses/azure-tool-call.1.chunks.txt",
        format: Format::OpenAiResponses,
        incomplete_calls: 0,
        turns: &[clean(
            "",
            "completed",
            &[("weather", "call_H5DxLSFnsGhiROnUiDHmgyc8")],
            Some((45, 24, 0, 0, 0)),
        )],
    },
    Expect {
        // Two completed responses back to back: two model calls, two turns.
        path: "openai-responses/openai-shell-tool.1.chunks.txt",
        format: Format::OpenAiResponses,
        incomplete_calls: 0,
        turns: &[
            clean(
                "",
                "completed",
                &[("shell", "call_pbxjNs1tMJUahLZKAS9qLtvw")],
                Some((145, 41, 0, 0, 0)),
            ),
            clean("#2", "completed", &[], Some((331, 166, 0, 0, 0))),
        ],
    },
    // ---- Anthropic
    Expect {
        path: "anthropic/anthropic-sdk-python__tool_use_response.sse",
        format: Format::Anthropic,
        incomplete_calls: 0,
        turns: &[clean(
            "",
            "tool_use",
            &[("get_weather", "toolu_01NRLabsLyVHZPKxbKvkfSMn")],
            Some((377, 65, 0, 0, 0)),
        )],
    },
    Expect {
        // tool_use cut mid-JSON with no content_block_stop: not a complete call, counted.
        path: "anthropic/anthropic-sdk-python__incomplete_partial_json_response.sse",
        format: Format::Anthropic,
        incomplete_calls: 1,
        turns: &[clean("", "max_tokens", &[], Some((450, 124, 0, 0, 0)))],
    },
    Expect {
        path: "anthropic/anthropic-sdk-python__basic_response.sse",
        format: Format::Anthropic,
        incomplete_calls: 0,
        turns: &[clean("", "end_turn", &[], Some((11, 6, 0, 0, 0)))],
    },
    Expect {
        path: "anthropic/anthropic-text.chunks.txt",
        format: Format::Anthropic,
        incomplete_calls: 0,
        turns: &[clean("", "end_turn", &[], Some((12, 30, 0, 0, 0)))],
    },
    Expect {
        path: "anthropic/anthropic-tool-no-args.chunks.txt",
        format: Format::Anthropic,
        incomplete_calls: 0,
        turns: &[clean(
            "",
            "tool_use",
            &[("updateIssueList", "toolu_01QE1WLsSVp5hy5Q3GmGTmjP")],
            Some((565, 48, 0, 0, 0)),
        )],
    },
    Expect {
        // message_delta's cache figures win: 6 + 6289 read + 3337 written. The
        // server_tool_use blocks run server-side: not client tool calls.
        path: "anthropic/anthropic-code-execution-20260120-prompt-cache.1.chunks.txt",
        format: Format::Anthropic,
        incomplete_calls: 0,
        turns: &[clean("", "end_turn", &[], Some((9632, 198, 6289, 3337, 0)))],
    },
    Expect {
        // message_delta input_tokens (61) supersedes message_start (43).
        path: "anthropic/anthropic-message-delta-input-tokens.chunks.txt",
        format: Format::Anthropic,
        incomplete_calls: 0,
        turns: &[clean("", "end_turn", &[], Some((61, 2, 0, 0, 0)))],
    },
    Expect {
        // Same id twice: benign, not a splice.
        path: "anthropic/duplicate-message-start.chunks.txt",
        format: Format::Anthropic,
        incomplete_calls: 0,
        turns: &[clean("", "end_turn", &[], Some((17, 227, 0, 0, 0)))],
    },
    Expect {
        // Server-side fallback inside one message: top-level usage is the billed total.
        path: "anthropic/anthropic-fallback.chunks.txt",
        format: Format::Anthropic,
        incomplete_calls: 0,
        turns: &[clean("", "end_turn", &[], Some((412, 264, 0, 0, 0)))],
    },
    // ---- Gemini
    Expect {
        path: "gemini/google-text.chunks.txt",
        format: Format::Gemini,
        incomplete_calls: 0,
        turns: &[clean("", "STOP", &[], Some((9, 208, 0, 0, 185)))],
    },
    Expect {
        path: "gemini/google-tool-call-gemini3.chunks.txt",
        format: Format::Gemini,
        incomplete_calls: 0,
        turns: &[clean(
            "",
            "STOP",
            &[("weather", "fc-0")],
            Some((29, 819, 0, 0, 804)),
        )],
    },
    Expect {
        // Vertex partialArgs, two calls each closed by a terminal functionCall{}.
        path: "gemini/google-stream-tool-call-arguments.chunks.txt",
        format: Format::Gemini,
        incomplete_calls: 0,
        turns: &[clean(
            "",
            "STOP",
            &[("getWeather", "fc-0"), ("getWeather", "fc-1")],
            Some((26, 155, 0, 0, 132)),
        )],
    },
    Expect {
        // A usageMetadata-only chunk between two text chunks.
        path: "gemini/gemini-cli__api-resilience.responses",
        format: Format::GeminiCliResponses,
        incomplete_calls: 0,
        turns: &[clean("", "STOP", &[], Some((100, 10, 0, 0, 0)))],
    },
    Expect {
        path: "gemini/gemini-cli__json-output.error.responses",
        format: Format::GeminiCliResponses,
        incomplete_calls: 0,
        turns: &[
            clean(
                "",
                "STOP",
                &[("read_file", "fc-0")],
                Some((12303, 222, 0, 0, 164)),
            ),
            clean("#2", "STOP", &[], Some((12588, 3, 0, 0, 0))),
        ],
    },
    Expect {
        // Router generateContent, the parallel call, the final generateContent: 3 model calls.
        path: "gemini/gemini-cli__parallel-tools.responses",
        format: Format::GeminiCliResponses,
        incomplete_calls: 0,
        turns: &[
            clean("", "STOP", &[], None),
            clean(
                "#2",
                "STOP",
                &[
                    ("read_file", "fc-0"),
                    ("read_file", "fc-1"),
                    ("write_file", "fc-2"),
                    ("read_file", "fc-3"),
                    ("read_file", "fc-4"),
                ],
                None,
            ),
            clean("#3", "STOP", &[], None),
        ],
    },
];

fn fixtures_dir() -> Option<PathBuf> {
    let dir = match std::env::var_os("RETRYSCOPE_SHARED_FIXTURES") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures"),
    };
    dir.is_dir().then_some(dir)
}

fn walk(dir: &Path, root: &Path, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            walk(&path, root, out);
        } else if let Ok(rel) = path.strip_prefix(root) {
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
}

/// Not recorded streams: the manifest, and the ACP JSON Schemas.
fn is_not_a_stream(rel: &str) -> bool {
    rel == "MANIFEST.md" || rel.ends_with(".schema.json")
}

#[test]
fn every_shared_fixture_decodes_as_expected() {
    let Some(dir) = fixtures_dir() else {
        eprintln!("note: shared fixtures not found (set RETRYSCOPE_SHARED_FIXTURES); skipping");
        return;
    };
    let mut files = Vec::new();
    walk(&dir, &dir, &mut files);
    files.sort();
    let mut checked = 0;
    for rel in &files {
        if is_not_a_stream(rel) {
            continue;
        }
        let exp = EXPECT
            .iter()
            .find(|e| e.path == rel.as_str())
            .unwrap_or_else(|| panic!("{rel}: no expectation; read it and add one"));
        let bytes = std::fs::read(dir.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
        let name = rel.rsplit('/').next().unwrap_or(rel);
        let d = decode(name, &bytes, Format::Auto);
        assert_eq!(d.format, exp.format, "{rel}: detected format");
        assert_eq!(d.errors, 0, "{rel}: bad lines");
        assert_eq!(d.skips.unknown_types, 0, "{rel}: unknown types");
        assert_eq!(
            d.skips.incomplete_tool_calls, exp.incomplete_calls,
            "{rel}: incomplete tool calls"
        );
        let reports = correlate(&d.events);
        let got: Vec<String> = reports.iter().map(summary).collect();
        assert_eq!(reports.len(), exp.turns.len(), "{rel}: turns {got:#?}");
        for (r, t) in reports.iter().zip(exp.turns) {
            let ctx = format!("{rel} {}", summary(r));
            assert_eq!(r.turn, format!("{name}{}", t.suffix), "{ctx}");
            assert_eq!(r.status, t.status, "{ctx}");
            assert_eq!(r.attempts.len(), t.attempts, "{ctx}");
            assert!(r.provider.is_some(), "{ctx}: provider");
            let last = r.attempts.last().expect("an attempt");
            assert_eq!(last.finish_reason.as_deref(), t.finish, "{ctx}");
            let calls: Vec<(&str, &str)> = r
                .attempts
                .iter()
                .flat_map(|a| a.tool_calls.iter())
                .map(|c| (c.name.as_str(), c.id.as_str()))
                .collect();
            assert_eq!(calls, t.calls, "{ctx}");
            match t.usage {
                Some((i, o, c, w, re)) => {
                    let u = last.usage.tokens;
                    assert_eq!(
                        (
                            u.input_tokens,
                            u.output_tokens,
                            u.cached_input_tokens,
                            u.cache_write_tokens,
                            u.reasoning_tokens
                        ),
                        (i, o, c, w, re),
                        "{ctx}"
                    );
                    assert_eq!(last.usage.source.as_str(), "reported", "{ctx}");
                }
                None => assert_eq!(last.usage.source.as_str(), "none", "{ctx}"),
            }
            // No false findings: only what the table expects (none on clean streams).
            assert_eq!(findings(r), t.findings, "{ctx}");
            assert!(
                r.executed_none(),
                "{ctx}: raw provider streams contain no executions"
            );
        }
        checked += 1;
    }
    assert_eq!(checked, EXPECT.len(), "every expectation matched a file");
    eprintln!("checked {checked} shared fixtures in {}", dir.display());
}

trait NoExec {
    fn executed_none(&self) -> bool;
}

impl NoExec for retryscope_core::report::TurnReport {
    fn executed_none(&self) -> bool {
        self.attempts.iter().all(|a| a.executed.is_empty())
    }
}
