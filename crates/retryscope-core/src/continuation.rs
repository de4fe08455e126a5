//! What a continuation looks like in a request's history, whatever the format: the judgement
//! the proxy (`proxy/attempts/retry_match.rs`) and the GenAI-convention OTLP decoder
//! (`decode/otlp/genai.rs`) share.
//!
//! Owns: [`tail`] (a history ending with an assistant message of plain text, the cut
//! attempt's partial output, optionally followed by one user message asking to go on) and
//! [`carries`] (that partial text is what the cut attempt streamed, or a prefix or suffix of
//! it: clients trim, or keep only what was rendered).

/// Who wrote a message of a history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The system or developer prompt.
    System,
    /// The user (or a tool result sent as the user).
    User,
    /// The model.
    Assistant,
    /// Anything else (a `tool` message).
    Other,
}

/// What the continuation judgement needs of one history message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message<'a> {
    /// Its role.
    pub role: Role,
    /// Its text parts, joined.
    pub text: &'a str,
    /// It carries tool calls.
    pub calls: bool,
    /// It carries tool results.
    pub results: bool,
}

/// The trailing messages of a continuation request: where the history before them ends, and
/// the partial text they carry. `None`: the history does not end like a continuation.
pub fn tail<'a>(messages: &[Message<'a>]) -> Option<(usize, &'a str)> {
    let is_partial = |m: &Message<'_>| m.role == Role::Assistant && !m.calls && !m.text.is_empty();
    let n = messages.len();
    let last = messages.last()?;
    if is_partial(last) {
        return Some((n - 1, last.text));
    }
    // A partial answer, then one user message (asking the model to go on).
    if last.role == Role::User && !last.results && n >= 2 {
        let m = &messages[n - 2];
        if is_partial(m) {
            return Some((n - 2, m.text));
        }
    }
    None
}

/// Whether `partial` (a history's trailing assistant text) is what an attempt streamed
/// (`streamed`, only its start when `truncated`), or a prefix or suffix of it.
pub fn carries(streamed: &str, truncated: bool, partial: &str) -> bool {
    let p = partial.trim();
    if p.is_empty() {
        return false;
    }
    if truncated {
        // Only the start is known: one must start the other.
        return streamed.starts_with(partial.trim_end()) || partial.starts_with(streamed);
    }
    let k = streamed.trim();
    k.starts_with(p) || k.ends_with(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(role: Role, text: &str) -> Message<'_> {
        Message {
            role,
            text,
            calls: false,
            results: false,
        }
    }

    #[test]
    fn tails_that_continue_and_tails_that_do_not() {
        let u = m(Role::User, "make the file");
        let a = m(Role::Assistant, "[A1] I will now cr");
        let ask = m(
            Role::User,
            "output only text that comes after this suffix: …",
        );
        assert_eq!(tail(&[u, a]), Some((1, "[A1] I will now cr")));
        assert_eq!(tail(&[u, a, ask]), Some((1, "[A1] I will now cr")));
        assert_eq!(tail(&[u]), None);
        assert_eq!(tail(&[u, a, ask, ask]), None);
        let call = Message { calls: true, ..a };
        assert_eq!(tail(&[u, call]), None);
        let result = Message {
            results: true,
            ..ask
        };
        assert_eq!(tail(&[u, a, result]), None);
    }

    #[test]
    fn a_partial_is_a_prefix_or_suffix_of_what_streamed() {
        assert!(carries("[A1] I will now cr", false, "[A1] I will"));
        assert!(carries("[A1] I will now cr", false, "now cr\n"));
        assert!(!carries("[A1] I will now cr", false, "Something else"));
        assert!(!carries("[A1] I will now cr", false, "  "));
        assert!(carries("xxx", true, "xxxxy"));
        assert!(!carries("xxx", true, "yxx"));
    }
}
