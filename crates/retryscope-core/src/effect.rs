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
pub fn parse_args(raw: Option<&str>) -> Value {
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
pub fn write_canonical(v: &Value, out: &mut String) {
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
        other => out.push_str(&other.to_string()),
    }
}

fn write_json_string(s: &str, out: &mut String) {
    // serde_json's string escaping is canonical (minimal escapes, \u00XX for controls).
    out.push_str(&Value::String(s.to_owned()).to_string());
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
        material.push(',');
        material.push_str(&step.to_string());
    }
    material.push(']');
    let digest = Sha256::digest(material.as_bytes());
    let mut hex = String::with_capacity(16);
    for b in &digest[..8] {
        hex.push_str(&format!("{b:02x}"));
    }
    hex
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
}
