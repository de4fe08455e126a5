//! What an attempt's stream says, as it goes: each payload written as a `provider_chunk`
//! envelope and decoded once more for the tracker (call ids, the text a continuation would
//! carry, the finish, an error event), an HTTP error, a whole answer's finish, and how the
//! response ended ([`End`]): one that ended without its finish failed, with the cause the
//! next retry gives as its reason.

use std::borrow::Cow;

use serde_json::value::RawValue;

use retryscope_core::decode::native::ProviderChunk;
use retryscope_core::event::EventKind;

use super::calls::{call_marker, stream_call_ids};
use super::line::Fields;
use super::{Api, AttemptRef, AttemptState, CallInfo, Tracker};

/// How an attempt's response ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// The upstream body ended.
    Complete,
    /// The upstream connection failed before or during the body.
    Upstream(String),
    /// The client went away before the body ended.
    ClientGone,
    /// The proxy cut it on purpose.
    Injected {
        /// `after-tool-call`, `mid-word`, `before-finish`.
        point: &'static str,
        /// `reset`, `eof`, `error`.
        how: &'static str,
    },
}

impl Tracker {
    /// One payload of the attempt's stream (an SSE `data`, a JSON array element).
    pub fn chunk(&mut self, a: &AttemptRef, data: &str, now_ms: i64) {
        let Ok(raw) = RawValue::from_string(data.trim().to_owned()) else {
            self.stats.not_json += 1;
            return;
        };
        self.emit(
            &a.turn,
            "provider_chunk",
            Some(a.attempt),
            now_ms,
            Fields::Chunk {
                provider: a.api.envelope(),
                data: &raw,
            },
        );
        if a.api == Api::OpenAiResponses
            && memchr::memmem::find(data.as_bytes(), b"response.created").is_some()
            && let Ok(v) = serde_json::from_str::<serde_json::Value>(data)
            && let Some(id) = v
                .pointer("/response/id")
                .and_then(serde_json::Value::as_str)
        {
            self.responses
                .insert(id.to_owned(), (a.turn.clone(), a.attempt));
        }
        if let Some(marker) = call_marker(a.api)
            && memchr::memmem::find(data.as_bytes(), marker.as_bytes()).is_some()
            && let Ok(v) = serde_json::from_str::<serde_json::Value>(data)
        {
            for (id, name) in stream_call_ids(a.api, &v) {
                self.partial.entry(id).or_insert(CallInfo {
                    turn: a.turn.clone(),
                    attempt: a.attempt,
                    name,
                });
            }
        }
        let Some(turn) = self.turns.get_mut(&a.turn) else {
            return;
        };
        let chunk = ProviderChunk {
            turn: Cow::Borrowed(&a.turn),
            attempt: Some(a.attempt),
            ts_ms: Some(now_ms),
            provider: Cow::Borrowed(a.api.envelope()),
            data: &raw,
        };
        let mut events = std::mem::take(&mut self.scratch);
        let _ = turn.decoder.push(&chunk, &mut events);
        for ev in events.drain(..) {
            match ev.kind {
                EventKind::ToolCall { id, name, args } => {
                    let attempt = ev.attempt.unwrap_or(a.attempt);
                    turn.seen
                        .record(&a.turn, attempt, &id, &name, args.as_deref());
                    self.calls.insert(
                        id.into_owned(),
                        CallInfo {
                            turn: a.turn.clone(),
                            attempt,
                            name: name.into_owned(),
                        },
                    );
                }
                EventKind::Text { text } if turn.attempts.len() == a.attempt as usize + 1 => {
                    turn.kept.push(&text);
                }
                EventKind::Finish { .. } => {
                    if let Some(st) = turn.attempts.get_mut(a.attempt as usize) {
                        st.finished = true;
                    }
                }
                EventKind::Error { .. } => {
                    if let Some(st) = turn.attempts.get_mut(a.attempt as usize) {
                        st.cause.get_or_insert_with(|| "stream_error".to_owned());
                    }
                }
                _ => {}
            }
        }
        self.scratch = events;
    }

    /// The upstream answered with a status that is not a success: the attempt failed.
    pub fn http_error(&mut self, a: &AttemptRef, status: u16, now_ms: i64) {
        let code = format!("http_{status}");
        self.fail(
            a,
            &code,
            &format!("upstream answered HTTP {status}"),
            now_ms,
        );
    }

    /// A non-streaming answer that completed (its body is not made of stream chunks).
    pub fn complete_whole(&mut self, a: &AttemptRef, reason: &str, now_ms: i64) {
        if let Some(st) = self.attempt_mut(a) {
            st.finished = true;
        }
        let line = serde_json::json!({
            "turn": a.turn, "type": "finish", "attempt": a.attempt, "ts": now_ms, "reason": reason
        });
        if let Ok(bytes) = serde_json::to_vec(&line) {
            self.out.line(bytes);
        }
    }

    fn attempt_mut(&mut self, a: &AttemptRef) -> Option<&mut AttemptState> {
        self.turns
            .get_mut(&a.turn)?
            .attempts
            .get_mut(a.attempt as usize)
    }

    fn fail(&mut self, a: &AttemptRef, code: &str, message: &str, now_ms: i64) {
        let Some(st) = self.attempt_mut(a) else {
            return;
        };
        if st.cause.is_some() {
            return;
        }
        st.cause = Some(code.to_owned());
        self.emit(
            &a.turn,
            "error",
            Some(a.attempt),
            now_ms,
            Fields::Error { message, code },
        );
    }

    /// The attempt's response ended: one without its finish event failed.
    pub fn end(&mut self, a: &AttemptRef, how: &End, now_ms: i64) {
        let Some(st) = self.attempt_mut(a) else {
            return;
        };
        if st.ended {
            return;
        }
        st.ended = true;
        let finished = st.finished;
        if st.background && !finished {
            // Only the stream ended: the response goes on on the server, and the client may
            // resume it (`resume`). Unresumed, the attempt stays open, then idle.
            return;
        }
        match how {
            End::Injected { point, how } => {
                // Reported as injected even when the stream carried an error event of its
                // own (`--inject-how error` writes one).
                let code = format!("injected_{how}");
                let message =
                    format!("retryscope proxy cut the stream on purpose ({point}, {how})");
                if let Some(st) = self.attempt_mut(a) {
                    st.cause = None;
                }
                self.fail(a, &code, &message, now_ms);
            }
            _ if finished => {}
            End::Complete => {
                self.fail(a, "eof", "the stream ended before its finish event", now_ms)
            }
            End::Upstream(why) => {
                let message = format!("upstream stream failed: {why}");
                self.fail(a, "upstream_error", &message, now_ms);
            }
            End::ClientGone => self.fail(
                a,
                "client_closed",
                "the client closed the stream before its finish event",
                now_ms,
            ),
        }
    }
}
