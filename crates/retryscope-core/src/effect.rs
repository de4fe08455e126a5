//! Effect keys: a tool call's identity by meaning, stable across attempts and provider ids.
//!
//! `key = hex(sha256(canonical_json([turn, tool, args, step?])))[..16]`, where canonical JSON
//! has object keys sorted by their UTF-8 bytes and no insignificant whitespace. Arguments logged
//! as a JSON string that itself holds JSON (OpenAI's `arguments`) are unwrapped first, so both
//! spellings of one call get one key. Arguments that are not JSON at all (a truncated stream)
//! are keyed by their raw text.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Parse raw argument text into a JSON value, unwrapping a string that holds JSON.
pub(crate) fn parse_args(raw: Option<&str>) -> Value {
    let Some(raw) = raw else {
        return Value::Object(Default::default());
    };
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        return Value::Object(Default::default());
    }
    match serde_json::from_str::<Value>(trimmed) {
        Ok(Value::String(inner)) => match serde_json::from_str::<Value>(inner.trim()) {
            Ok(v @ (Value::Object(_) | Value::Array(_))) => v,
            _ if inner.trim().is_empty() => Value::Object(Default::default()),
            _ => Value::String(inner),
        },
        Ok(v) => v,
        Err(_) => Value::String(raw.to_owned()),
    }
}

/// Write `v` as canonical JSON: sorted object keys, no whitespace.
pub(crate) fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            for (i, (k, val)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json_string(k, out);
                out.push(':');
                write_canonical(val, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::String(s) => write_json_string(s, out),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Null => out.push_str("null"),
        Value::Number(n) => {
            use std::fmt::Write;
            // serde_json's `Number` displays as it serializes.
            let _ = write!(out, "{n}");
        }
    }
}

/// `s` as a JSON string, escaped exactly as serde_json escapes it (canonical: minimal escapes,
/// the short forms for `\b \t \n \f \r`, lowercase `\u00xx` for other controls), written in
/// place: this runs for every tool call and execution.
fn write_json_string(s: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('"');
    let mut plain_from = 0;
    for (i, b) in s.bytes().enumerate() {
        let escape: &str = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0x00..=0x1f => "",
            _ => continue,
        };
        out.push_str(&s[plain_from..i]);
        plain_from = i + 1;
        if escape.is_empty() {
            out.push_str("\\u00");
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        } else {
            out.push_str(escape);
        }
    }
    out.push_str(&s[plain_from..]);
    out.push('"');
}

/// `s` as a JSON string literal (what `serde_json` writes for it).
pub(crate) fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    write_json_string(s, &mut out);
    out
}

/// Canonical JSON of raw argument text.
pub fn canonical_args(raw: Option<&str>) -> String {
    let mut out = String::new();
    write_canonical(&parse_args(raw), &mut out);
    out
}

/// The effect key of a call: 16 hex digits.
pub fn effect_key(turn: &str, tool: &str, canonical_args: &str, step: Option<i64>) -> String {
    let mut material = String::with_capacity(turn.len() + tool.len() + canonical_args.len() + 24);
    material.push('[');
    write_json_string(turn, &mut material);
    material.push(',');
    write_json_string(tool, &mut material);
    material.push(',');
    material.push_str(canonical_args);
    if let Some(step) = step {
        use std::fmt::Write;
        let _ = write!(material, ",{step}");
    }
    material.push(']');
    let digest = Sha256::digest(material.as_bytes());
    const HEX: &[u8; 16] = b"0123456789abcdef";
    digest[..8]
        .iter()
        .flat_map(|b| [HEX[usize::from(b >> 4)], HEX[usize::from(b & 0xf)]])
        .map(char::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_sorts_keys_and_drops_whitespace() {
        assert_eq!(
            canonical_args(Some(r#"{ "b": [1, {"z":1,"a":2}], "a": "x" }"#)),
            r#"{"a":"x","b":[1,{"a":2,"z":1}]}"#
        );
    }

    #[test]
    fn string_wrapped_json_is_unwrapped() {
        assert_eq!(
            canonical_args(Some(r#""{\"order\": \"ORD-7781\"}""#)),
            canonical_args(Some(r#"{"order":"ORD-7781"}"#))
        );
    }

    #[test]
    fn missing_and_empty_args_are_empty_object() {
        assert_eq!(canonical_args(None), "{}");
        assert_eq!(canonical_args(Some("")), "{}");
        assert_eq!(canonical_args(Some(r#""""#)), "{}");
    }

    #[test]
    fn truncated_args_keyed_by_raw_text() {
        assert_eq!(
            canonical_args(Some(r#"{"path": "/tm"#)),
            r#""{\"path\": \"/tm""#
        );
    }

    #[test]
    fn key_is_stable_across_ids_and_spellings_and_sensitive_to_meaning() {
        let a = effect_key(
            "t1",
            "issue_refund",
            &canonical_args(Some(r#"{"order":"ORD-7781","amount":12.5}"#)),
            None,
        );
        let b = effect_key(
            "t1",
            "issue_refund",
            &canonical_args(Some(r#"{ "amount": 12.5, "order": "ORD-7781" }"#)),
            None,
        );
        assert_eq!(a, b);
        assert_eq!(a.len(), 16);
        let other_turn = effect_key(
            "t2",
            "issue_refund",
            &canonical_args(Some(r#"{"order":"ORD-7781","amount":12.5}"#)),
            None,
        );
        let other_step = effect_key(
            "t1",
            "issue_refund",
            &canonical_args(Some(r#"{"order":"ORD-7781","amount":12.5}"#)),
            Some(2),
        );
        assert_ne!(a, other_turn);
        assert_ne!(a, other_step);
    }

    #[test]
    fn strings_are_escaped_exactly_as_serde_json_escapes_them() {
        let mut all: String = (0u8..0x80).map(char::from).collect();
        all.push_str("é😀\u{2028}\u{7f}");
        for s in [all.as_str(), "", "plain", "\"\\", "a\u{0}b"] {
            let mut ours = String::new();
            write_json_string(s, &mut ours);
            assert_eq!(ours, serde_json::to_string(s).unwrap_or_default(), "{s:?}");
        }
    }

    #[test]
    fn scalars_are_written_as_serde_json_writes_them() {
        for raw in [
            "true",
            "false",
            "null",
            "0",
            "-12",
            "12.5",
            "1e300",
            "18446744073709551615",
        ] {
            let v: Value = serde_json::from_str(raw).unwrap_or_default();
            let mut ours = String::new();
            write_canonical(&v, &mut ours);
            assert_eq!(ours, v.to_string(), "{raw}");
        }
    }
}
