//! Making log-derived text safe to show: every string that came from an input (turn ids, model
//! and tool names, reasons, file names) goes through here before it meets a terminal or a
//! metric label.
//!
//! Control characters (C0, DEL, C1) would let a log line move the cursor, clear the screen or
//! set the terminal title; bidirectional controls reorder what is shown (Trojan Source);
//! zero-width characters, U+2028/U+2029 and U+FEFF hide text or break lines unseen. All of them
//! are written as visible escapes (`\x1b`, `\n`, `\u{9b}`, `\u{202e}`), and a backslash is
//! doubled so an escape cannot be forged. Text without them is borrowed unchanged.
//!
//! JSON output ([`to_json_vec`], [`to_json_string`]) stays valid JSON with the same meaning:
//! serde_json escapes only C0, DEL passes, and C1, bidi and zero-width characters would reach a
//! terminal raw when a findings line is printed there; here every one of them (the same classes
//! as [`display`], backslash aside) is written as a `\uXXXX` escape, which any JSON reader turns
//! back into the same character.

use std::borrow::Cow;
use std::fmt::Write as _;

fn is_unsafe(c: char) -> bool {
    c == '\\' || is_invisible(c)
}

/// Characters that act on a terminal or hide from a reader instead of showing: C0, DEL, C1,
/// bidirectional controls, zero-width characters, line and paragraph separators, the BOM.
pub fn is_invisible(c: char) -> bool {
    c.is_control() || is_bidi_control(c) || is_zero_width_or_separator(c)
}

/// Bidirectional overrides, embeddings, isolates and marks can make a terminal show text in
/// another order than it is (`Trojan Source`); they are escaped like control characters.
fn is_bidi_control(c: char) -> bool {
    matches!(
        c,
        '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{061c}'
    )
}

/// Zero-width space, non-joiner, joiner, word joiner, BOM; line and paragraph separators (a
/// line break to some terminals and editors, none to a log reader).
fn is_zero_width_or_separator(c: char) -> bool {
    matches!(
        c,
        '\u{200b}'..='\u{200d}' | '\u{2060}' | '\u{feff}' | '\u{2028}' | '\u{2029}'
    )
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

/// Writes JSON strings with every [`is_invisible`] character outside ASCII (and DEL) as a
/// `\uXXXX` escape; serde_json already escapes C0.
struct SafeJson;

impl serde_json::ser::Formatter for SafeJson {
    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        let mut start = 0;
        for (i, c) in fragment.char_indices() {
            if is_invisible(c) {
                writer.write_all(&fragment.as_bytes()[start..i])?;
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    write!(writer, "\\u{:04x}", u)?;
                }
                start = i + c.len_utf8();
            }
        }
        writer.write_all(&fragment.as_bytes()[start..])
    }
}

/// `value` as a JSON document whose strings carry no raw invisible character (see the module
/// documentation): safe to print on a terminal, read back unchanged by any JSON parser.
pub fn to_json_vec<T: serde::Serialize + ?Sized>(value: &T) -> serde_json::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(128);
    let mut ser = serde_json::Serializer::with_formatter(&mut out, SafeJson);
    value.serialize(&mut ser)?;
    Ok(out)
}

/// [`to_json_vec`] as a string.
pub fn to_json_string<T: serde::Serialize + ?Sized>(value: &T) -> serde_json::Result<String> {
    let bytes = to_json_vec(value)?;
    // Serde writes UTF-8 and the escapes are ASCII.
    Ok(String::from_utf8(bytes).unwrap_or_default())
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

    /// One of each class: C0, DEL, C1 (CSI), bidi embeddings, overrides, isolates and marks,
    /// zero-width, separators, BOM.
    const EVERY_CLASS: &[char] = &[
        '\x00', '\x07', '\x1b', '\x7f', '\u{80}', '\u{9b}', '\u{9f}', '\u{202a}', '\u{202b}',
        '\u{202c}', '\u{202d}', '\u{202e}', '\u{2066}', '\u{2067}', '\u{2068}', '\u{2069}',
        '\u{200e}', '\u{200f}', '\u{061c}', '\u{200b}', '\u{200c}', '\u{200d}', '\u{2060}',
        '\u{2028}', '\u{2029}', '\u{feff}',
    ];

    #[test]
    fn every_class_is_escaped_for_a_terminal() {
        for &c in EVERY_CLASS {
            let s = format!("a{c}b");
            let shown = display(&s);
            assert!(!shown.contains(c), "{c:?} passed raw: {shown:?}");
            assert!(shown.starts_with('a') && shown.ends_with('b'), "{shown:?}");
        }
        // Ordinary non-ASCII text is left alone.
        assert!(matches!(display("naïve 日本語 — ✓ 🙂"), Cow::Borrowed(_)));
    }

    #[test]
    fn json_escapes_every_class_and_reads_back_the_same() {
        let all: String = EVERY_CLASS.iter().collect::<String>() + "ok é 日本 \\ \"";
        let v = serde_json::json!({ "reason": all, "n": 1 });
        let text = to_json_string(&v).expect("json");
        assert!(!text.chars().any(is_invisible), "raw character in {text:?}");
        assert!(text.contains("\\u009b") && text.contains("\\u202e") && text.contains("\\ufeff"));
        let back: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
        assert_eq!(back, v);
        // Plain serde_json leaves C1 and bidi raw: this is what the formatter is for.
        assert!(
            serde_json::to_string(&v)
                .expect("json")
                .contains('\u{202e}')
        );
    }

    #[test]
    fn a_backslash_cannot_forge_an_escape() {
        assert_eq!(display("a\\x1b"), "a\\\\x1b");
        assert_ne!(display("a\\x1b"), display("a\x1b"));
    }
}
