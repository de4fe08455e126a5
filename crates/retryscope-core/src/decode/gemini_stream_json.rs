//! gemini-cli's `-o stream-json` output: what the user saw, one JSON event per line.
//!
//! Owns: `init` (the session), assistant `message` deltas (text, attempt left to the
//! correlator), `tool_use` (a call, with gemini-cli's `tool_id`), `tool_result` (its
//! execution), `result` (the end). The output has no attempt, request or retry marker: each
//! model call (a step of the agent loop, `<session_id>`, `<session_id>#2`, ...) is one attempt
//! unless the telemetry outfile of the same session is joined in
//! ([`super::gemini_join`]), which supplies the attempts. A step's stream is over when its
//! first `tool_result` arrives (gemini-cli runs calls after the stream) or the next step or
//! the `result` begins: a `Finish` then (unknown reason, `stream_ended`; an `Error` when the
//! `result` says the run failed), and an `Output` with everything the step displayed, for the
//! spliced-text check.

use std::borrow::Cow;
use std::collections::HashMap;

use serde_json::Value;

use super::provider::{StreamDecoder, json_object_line, owned};
use super::{DecodeError, SkipCounts};
use crate::event::{Event, EventKind, TimestampMs};

/// One step (model call) as displayed.
#[derive(serde::Serialize, serde::Deserialize)]
struct Step {
    turn: String,
    shown: String,
    finished: bool,
    /// A tool result was seen: the next assistant output starts a new step.
    results: bool,
}

/// Decoder for one stream-json output.
#[derive(Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Decoder {
    session: String,
    steps: u32,
    step: Option<Step>,
    tools: HashMap<String, String>,
    last_ts: Option<TimestampMs>,
    skips: SkipCounts,
}

fn s<'v>(v: &'v Value, k: &str) -> Option<&'v str> {
    v.get(k).and_then(Value::as_str)
}

impl Decoder {
    fn emit(
        &self,
        out: &mut Vec<Event<'static>>,
        ts: Option<TimestampMs>,
        kind: EventKind<'static>,
    ) {
        if let Some(step) = &self.step {
            out.push(Event {
                turn: Cow::Owned(step.turn.clone()),
                attempt: None,
                ts_ms: ts,
                kind,
            });
        }
    }

    fn finish_stream(&mut self, out: &mut Vec<Event<'static>>, ts: Option<TimestampMs>) {
        if self.step.as_ref().is_some_and(|s| !s.finished) {
            self.emit(
                out,
                ts,
                EventKind::Finish {
                    reason: Cow::Borrowed("stream_ended"),
                },
            );
            if let Some(step) = &mut self.step {
                step.finished = true;
            }
        }
    }

    fn end_step(&mut self, out: &mut Vec<Event<'static>>, ts: Option<TimestampMs>) {
        self.finish_stream(out, ts);
        if let Some(step) = self.step.take() {
            out.push(Event {
                turn: Cow::Owned(step.turn),
                attempt: None,
                ts_ms: ts,
                kind: EventKind::Output {
                    text: Cow::Owned(step.shown),
                },
            });
        }
    }

    /// Model output arrives: the current step, or a new one after tool results.
    fn model_output(&mut self, out: &mut Vec<Event<'static>>, ts: Option<TimestampMs>) {
        if self.step.as_ref().is_some_and(|s| s.results) {
            self.end_step(out, ts);
        }
        if self.step.is_some() {
            return;
        }
        self.steps += 1;
        let base = if self.session.is_empty() {
            "gemini-cli"
        } else {
            &self.session
        };
        let turn = if self.steps == 1 {
            base.to_owned()
        } else {
            format!("{base}#{}", self.steps)
        };
        self.step = Some(Step {
            turn,
            shown: String::new(),
            finished: false,
            results: false,
        });
        self.emit(
            out,
            ts,
            EventKind::TurnStart {
                model: None,
                provider: Some(Cow::Borrowed("gemini")),
                session: Some(owned(&self.session)),
                agent: Some(Cow::Borrowed("gemini-cli")),
                traceparent: None,
                wire_only: false,
                requested_model: None,
            },
        );
    }

    fn record(&mut self, v: &Value, out: &mut Vec<Event<'static>>) {
        let ts = s(v, "timestamp")
            .and_then(crate::rfc3339::parse_ms)
            .or(self.last_ts);
        self.last_ts = ts;
        match s(v, "type") {
            Some("init") => self.session = s(v, "session_id").unwrap_or("").to_owned(),
            Some("message") if s(v, "role") == Some("assistant") => {
                self.model_output(out, ts);
                let text = s(v, "content").unwrap_or("");
                if let Some(step) = &mut self.step {
                    step.shown.push_str(text);
                }
                if !text.is_empty() {
                    self.emit(out, ts, EventKind::Text { text: owned(text) });
                }
            }
            Some("message") => {}
            Some("tool_use") => {
                self.model_output(out, ts);
                let id = s(v, "tool_id").unwrap_or("").to_owned();
                let name = s(v, "tool_name").unwrap_or("tool").to_owned();
                self.tools.insert(id.clone(), name.clone());
                let args = v
                    .get("parameters")
                    .map_or_else(|| "{}".to_owned(), Value::to_string);
                self.emit(
                    out,
                    ts,
                    EventKind::ToolCall {
                        id: Cow::Owned(id),
                        name: Cow::Owned(name),
                        args: Some(Cow::Owned(args)),
                    },
                );
            }
            Some("tool_result") => {
                self.finish_stream(out, ts);
                let id = s(v, "tool_id").unwrap_or("").to_owned();
                let name = self
                    .tools
                    .get(&id)
                    .cloned()
                    .unwrap_or_else(|| "tool".to_owned());
                let status = s(v, "status").unwrap_or("success").to_owned();
                if let Some(step) = &mut self.step {
                    step.results = true;
                }
                self.emit(
                    out,
                    ts,
                    EventKind::ToolExec {
                        id: Cow::Owned(id),
                        name: Cow::Owned(name),
                        args: None,
                        effect_key: None,
                        step: None,
                        effect: None,
                        status: Some(Cow::Owned(status)),
                        // what the tool said (`output`; a failure's `error.message`)
                        result: v
                            .pointer("/error/message")
                            .and_then(Value::as_str)
                            .or_else(|| s(v, "output"))
                            .filter(|t| !t.trim().is_empty())
                            .map(|t| Cow::Owned(crate::event::result_excerpt(t))),
                    },
                );
            }
            Some("result") => {
                // gemini-cli ends a failed run with `status: "error"` and the error (its
                // `handleError`, 0.61.0): the step still streaming failed. A tool's fatal
                // failure comes after its step's stream was over.
                let code = v.pointer("/error/type").and_then(Value::as_str);
                if s(v, "status") == Some("error")
                    && self.step.as_ref().is_some_and(|s| !s.finished)
                    && !code.is_some_and(|c| c.contains("ToolExecution"))
                {
                    let message = v.pointer("/error/message").and_then(Value::as_str);
                    self.emit(
                        out,
                        ts,
                        EventKind::Error {
                            message: Cow::Owned(message.unwrap_or("the run failed").to_owned()),
                            code: code.map(|c| Cow::Owned(c.to_owned())),
                        },
                    );
                    if let Some(step) = &mut self.step {
                        step.finished = true;
                    }
                }
                self.end_step(out, ts);
            }
            _ => self.skips.unknown_types += 1,
        }
    }
}

impl StreamDecoder for Decoder {
    fn push_line(&mut self, line: &[u8], out: &mut Vec<Event<'static>>) -> Result<(), DecodeError> {
        if let Some(v) = json_object_line(line)? {
            self.record(&v, out);
        }
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<Event<'static>>) {
        // Output cut before `result`: what was shown is still the output.
        if let Some(step) = self.step.take() {
            out.push(Event {
                turn: Cow::Owned(step.turn),
                attempt: None,
                ts_ms: self.last_ts,
                kind: EventKind::Output {
                    text: Cow::Owned(step.shown),
                },
            });
        }
    }

    fn skips(&self) -> SkipCounts {
        self.skips
    }

    /// Always: gemini-cli writes a `tool_result` for every tool it ran.
    fn records_executions(&self) -> bool {
        true
    }

    fn state(&self) -> Option<serde_json::Value> {
        super::state::state_of(self)
    }

    fn resume(&mut self, state: serde_json::Value) -> bool {
        super::state::resume_into(self, state)
    }
}

#[cfg(test)]
mod tests {
    use super::super::Format;
    use super::super::provider::decode_lines;
    use crate::event::EventKind;

    #[test]
    fn steps_finish_at_their_first_result_and_show_their_output() {
        let lines = [
            r#"{"type":"init","timestamp":"2026-12-02T15:53:54.007Z","session_id":"s","model":"auto"}"#,
            r#"{"type":"message","timestamp":"2026-12-02T15:53:54.019Z","role":"user","content":"go"}"#,
            r#"{"type":"message","timestamp":"2026-12-02T15:53:54.471Z","role":"assistant","content":"[A1] crea","delta":true}"#,
            r#"{"type":"tool_use","timestamp":"2026-12-02T15:53:54.945Z","tool_name":"run_shell_command","tool_id":"run_shell_command__a1","parameters":{"command":"touch a1"}}"#,
            r#"{"type":"message","timestamp":"2026-12-02T15:53:56.248Z","role":"assistant","content":"[A2] create","delta":true}"#,
            r#"{"type":"tool_result","timestamp":"2026-12-02T15:53:57.000Z","tool_id":"run_shell_command__a1","status":"success","output":""}"#,
            r#"{"type":"message","timestamp":"2026-12-02T15:53:57.150Z","role":"assistant","content":"[F] done","delta":true}"#,
            r#"{"type":"result","timestamp":"2026-12-02T15:53:57.274Z","status":"success","stats":{}}"#,
        ];
        let (evs, skips) = decode_lines(Format::GeminiCliStreamJson, lines);
        assert_eq!(skips.unknown_types, 0);
        let got: Vec<(&str, &str)> = evs
            .iter()
            .map(|e| (e.turn.as_ref(), e.kind.type_name()))
            .collect();
        assert_eq!(
            got,
            [
                ("s", "turn_start"),
                ("s", "text"),
                ("s", "tool_call"),
                ("s", "text"),
                ("s", "finish"),
                ("s", "tool_exec"),
                ("s", "output"),
                ("s#2", "turn_start"),
                ("s#2", "text"),
                ("s#2", "finish"),
                ("s#2", "output"),
            ]
        );
        assert!(
            matches!(&evs[6].kind, EventKind::Output { text } if text == "[A1] crea[A2] create")
        );
    }

    /// A run that failed while its step streamed (gemini-cli's `result` with `status:
    /// "error"`, as its 0.61.0 bundle writes it): that step failed, it did not finish. A
    /// tool's fatal failure comes after the stream and leaves the step finished.
    #[test]
    fn an_error_result_fails_the_step_still_streaming() {
        let kinds = |result: &str| {
            let lines = [
                r#"{"type":"init","timestamp":"2026-12-02T15:53:54.007Z","session_id":"s"}"#,
                r#"{"type":"message","timestamp":"2026-12-02T15:53:54.471Z","role":"assistant","content":"[A1] crea","delta":true}"#,
                result,
            ];
            let (evs, _) = decode_lines(Format::GeminiCliStreamJson, lines);
            evs.iter()
                .map(|e| match &e.kind {
                    EventKind::Error { code, .. } => {
                        format!("error {}", code.as_deref().unwrap_or("-"))
                    }
                    k => k.type_name().to_owned(),
                })
                .collect::<Vec<String>>()
        };
        assert_eq!(
            kinds(
                r#"{"type":"result","timestamp":"2026-12-02T15:53:57.274Z","status":"error","error":{"type":"ApiError","message":"quota"},"stats":{}}"#
            ),
            ["turn_start", "text", "error ApiError", "output"]
        );
        for ok in [
            r#"{"type":"result","timestamp":"2026-12-02T15:53:57.274Z","status":"success","stats":{}}"#,
            r#"{"type":"result","timestamp":"2026-12-02T15:53:57.274Z","status":"error","error":{"type":"FatalToolExecutionError","message":"x"},"stats":{}}"#,
        ] {
            assert_eq!(kinds(ok), ["turn_start", "text", "finish", "output"]);
        }
    }
}
