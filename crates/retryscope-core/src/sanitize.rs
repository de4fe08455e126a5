//! Making log-derived text safe to show: every string that came from an input (turn ids, model
//! and tool names, reasons, file names) goes through here before it meets a terminal or a
//! metric label.
//!
//! Control characters (C0, DEL, C1) would let a log line move the cursor, clear the screen or
//! set the terminal title; they are written as visible escapes (`\x1b`, `\n`, `\u{9b}`), and a
//! backslash is doubled so an escape cannot be forged. Text without them is borrowed unchanged.

use std::borrow::Cow;
use std::fmt::Write as _;

fn is_unsafe(c: char) -> bool {
    c.is_control() || c == '\\' || is_bidi_control(c)
}

/// Bidirectional overrides can make a terminal show text in another order than it is
/// (`Trojan Source`); they are escaped like control characters.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}')
}

/// `s` with control characters escaped, for a terminal or a log line. Borrowed when clean.
pub fn display(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_unsafe) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x80 && is_unsafe(c) => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if is_unsafe(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// A metric label value: control characters escaped as for [`display`], so an exposition
/// line or a dashboard legend never carries raw ESC or CR.
pub fn label(s: &str) -> Cow<'_, str> {
    display(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_text_is_borrowed() {
        assert!(matches!(display("claude-sonnet-4-5 ✓"), Cow::Borrowed(_)));
    }

    #[test]
    fn escapes_terminal_controls_so_they_cannot_act() {
        let hostile = "t\x1b]0;pwned\x07\r\x08\0x\u{9b}2J\u{202e}";
        let shown = display(hostile);
        assert_eq!(shown, "t\\x1b]0;pwned\\x07\\r\\x08\\x00x\\u{9b}2J\\u{202e}");
        assert!(!shown.chars().any(char::is_control));
    }

    #[test]
    fn a_backslash_cannot_forge_an_escape() {
        assert_eq!(display("a\\x1b"), "a\\\\x1b");
        assert_ne!(display("a\\x1b"), display("a\x1b"));
    }
}
