//! Whether a request is another attempt of an earlier model call, judged by what it asks for,
//! not by an identical body.
//!
//! Owns the retry strategies the wire can show (docs/proxy.md has the table):
//! - a resend: the same history (ids, idempotency and retry headers, sampling parameters,
//!   `stream`, the model and the provider are not part of it, so a fallback to another model
//!   or to a non-streamed call is a resend too), after the call's last attempt failed or was
//!   cut, or with the SDK's retry counter above 0;
//! - a continuation: the same history, then the cut attempt's partial output as a trailing
//!   assistant message (Anthropic prefill, a trailing assistant message in Chat Completions or
//!   Responses, a partial `model` turn in Gemini), optionally followed by one user message
//!   (asking the model to go on). The partial text must be what the cut attempt streamed (a
//!   prefix or a suffix of it), so a user who keeps a cut answer and asks something else with
//!   other words is still a new call only when the text differs;
//! - a server-side continuation (OpenAI Responses): `previous_response_id` names the cut
//!   response itself and the input adds no tool results, at most one user message.
//!
//! A continuation carries its `prefill`: the correlator then expects the turn's kept text to
//! be that partial text plus what the continuation streamed, and reports a continuation that
//! restarted its answer (the kept text holds both attempts' openings) as `spliced_text`.

use crate::proxy::history::{Message, Request, Role};

use super::Tracker;

/// Bytes of an attempt's streamed text kept to recognise a continuation of it.
pub(super) const MAX_KEPT: usize = 16 * 1024;

/// How a retry was recognised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Strategy {
    /// The same history again.
    Resend,
    /// The history plus the cut attempt's partial output (`prefill`).
    Continuation { prefill: String },
}

/// A request recognised as another attempt of `turn`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RetryOf {
    pub(super) turn: String,
    pub(super) strategy: Strategy,
}

/// What an attempt streamed as text, bounded (the turn's newest attempt only).
#[derive(Debug, Default)]
pub(super) struct Kept {
    /// Its prefill (a continuation's partial output), then its streamed text.
    pub(super) text: String,
    /// More text came than `MAX_KEPT`: `text` is only its start.
    pub(super) truncated: bool,
}

impl Kept {
    pub(super) fn starting_with(prefill: &str) -> Self {
        let mut k = Kept::default();
        k.push(prefill);
        k
    }

    pub(super) fn push(&mut self, text: &str) {
        if self.truncated {
            return;
        }
        let room = MAX_KEPT.saturating_sub(self.text.len());
        if text.len() <= room {
            self.text.push_str(text);
            return;
        }
        let mut cut = room;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        self.text.push_str(&text[..cut]);
        self.truncated = true;
    }

    /// Whether `partial` (a history's trailing assistant text) is what this attempt streamed,
    /// or a prefix or suffix of it (clients trim, or keep only what was rendered).
    pub(super) fn carries(&self, partial: &str) -> bool {
        retryscope_core::continuation::carries(&self.text, self.truncated, partial)
    }
}

/// The trailing messages of a continuation request: where the history before them ends, and
/// the partial text they carry. `None`: the request does not end like a continuation. The
/// judgement is core's ([`retryscope_core::continuation::tail`]), shared with the decoders.
pub(super) fn continuation_tail(messages: &[Message]) -> Option<(usize, &str)> {
    use retryscope_core::continuation as c;
    let view: Vec<c::Message<'_>> = messages
        .iter()
        .map(|m| c::Message {
            role: match m.role {
                Some(Role::System) => c::Role::System,
                Some(Role::User) => c::Role::User,
                Some(Role::Assistant) => c::Role::Assistant,
                Some(Role::Tool) | None => c::Role::Other,
            },
            text: &m.text,
            calls: !m.calls.is_empty(),
            results: !m.results.is_empty(),
        })
        .collect();
    c::tail(&view)
}

impl Tracker {
    /// The earlier call this request is another attempt of, if any.
    pub(super) fn match_retry(
        &self,
        request: Option<&Request>,
        fps: &[u64],
        retry_count: Option<u32>,
    ) -> Option<RetryOf> {
        let sdk_retry = retry_count.unwrap_or(0) > 0;
        // The same history again.
        if let Some(tid) = fps.last().and_then(|f| self.by_request.get(f))
            && let Some(turn) = self.turns.get(tid)
            && !turn.closed
            && (turn.last_failed() || sdk_retry)
        {
            return Some(RetryOf {
                turn: tid.clone(),
                strategy: Strategy::Resend,
            });
        }
        let request = request?;
        // The history, then the cut attempt's partial output.
        if let Some((base, partial)) = continuation_tail(&request.messages)
            && let Some(fp) = base.checked_sub(1).and_then(|i| fps.get(i))
            && let Some(tid) = self.by_request.get(fp)
            && let Some(turn) = self.turns.get(tid)
            && !turn.closed
            && (turn.last_failed() || sdk_retry)
            && turn.kept.carries(partial)
        {
            return Some(RetryOf {
                turn: tid.clone(),
                strategy: Strategy::Continuation {
                    prefill: partial.to_owned(),
                },
            });
        }
        // OpenAI Responses: continue the cut response kept on the server.
        if let Some(prev) = &request.previous_response_id
            && let Some((tid, _)) = self.responses.get(prev)
            && let Some(turn) = self.turns.get(tid)
            && !turn.closed
            && turn.last_failed()
            && request
                .messages
                .iter()
                .all(|m| m.results.is_empty() && m.calls.is_empty())
            && request
                .messages
                .iter()
                .filter(|m| m.role != Some(Role::System))
                .count()
                <= 1
        {
            return Some(RetryOf {
                turn: tid.clone(),
                strategy: Strategy::Continuation {
                    prefill: turn.kept.text.clone(),
                },
            });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(role: Role, text: &str) -> Message {
        Message {
            role: Some(role),
            text: text.to_owned(),
            ..Message::default()
        }
    }

    #[test]
    fn tails_that_continue_and_tails_that_do_not() {
        let u = msg(Role::User, "make the file");
        let a = msg(Role::Assistant, "[A1] I will now cr");
        let ask = msg(
            Role::User,
            "output only text that comes after this suffix: …",
        );
        assert_eq!(
            continuation_tail(&[u.clone(), a.clone()]),
            Some((1, "[A1] I will now cr"))
        );
        assert_eq!(
            continuation_tail(&[u.clone(), a.clone(), ask.clone()]),
            Some((1, "[A1] I will now cr"))
        );
        assert_eq!(continuation_tail(std::slice::from_ref(&u)), None);
        // Two user messages after it, or a tool result: not a continuation.
        assert_eq!(
            continuation_tail(&[u.clone(), a.clone(), ask.clone(), ask]),
            None
        );
        let mut call = a.clone();
        call.calls.push(crate::proxy::history::Call {
            id: Some("c1".into()),
            name: "shell".into(),
            args: serde_json::Value::Null,
        });
        assert_eq!(continuation_tail(&[u, call]), None);
    }

    #[test]
    fn a_partial_is_carried_as_a_prefix_or_suffix_of_what_streamed() {
        let k = Kept::starting_with("[A1] I will now cr");
        assert!(k.carries("[A1] I will now cr"));
        assert!(k.carries("[A1] I will"));
        assert!(k.carries("now cr"));
        assert!(k.carries("[A1] I will now cr\n"));
        assert!(!k.carries("Something else entirely"));
        assert!(!k.carries(""));
        let mut long = Kept::default();
        long.push(&"x".repeat(MAX_KEPT + 10));
        assert!(long.truncated);
        assert_eq!(long.text.len(), MAX_KEPT);
        assert!(long.carries(&"x".repeat(MAX_KEPT + 10)));
        assert!(long.carries("xxx"));
        assert!(!long.carries("yxx"));
    }
}
