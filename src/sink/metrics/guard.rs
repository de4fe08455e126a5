//! Bounded label values: free text from logs (model, provider, tool, retry reason) becomes a
//! metric label only through a [`LabelGuard`], which sanitizes it and caps how many distinct
//! values one label may take.

use std::collections::BTreeSet;

/// The longest label value kept, in characters; longer values are truncated.
pub const MAX_LABEL_CHARS: usize = 64;

/// The value that stands in for every value beyond a guard's cap.
pub const OTHER: &str = "other";

/// The value for a missing or empty model, provider or tool.
pub const UNKNOWN: &str = "unknown";

/// What a guard did with one value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admitted {
    /// The (sanitized) value itself, or the guard's empty value.
    Value(String),
    /// The cap was reached: the value became [`OTHER`].
    Overflow,
}

impl Admitted {
    /// The label value to use.
    pub fn as_str(&self) -> &str {
        match self {
            Admitted::Value(v) => v,
            Admitted::Overflow => OTHER,
        }
    }
}

/// Caps the distinct values of one label.
///
/// Values are trimmed and truncated to [`MAX_LABEL_CHARS`] characters. Missing or empty values
/// become the guard's `empty` value. The first `cap` distinct other values are admitted as they
/// are; later new values become [`OTHER`]. The reserved values ([`OTHER`], [`UNKNOWN`] and the
/// guard's `empty` value) never use up the cap.
#[derive(Debug, Clone)]
pub struct LabelGuard {
    name: &'static str,
    empty: &'static str,
    cap: usize,
    admitted: BTreeSet<String>,
}

impl LabelGuard {
    /// A guard for label `name` that admits up to `cap` distinct values and maps missing or
    /// empty values to `empty`.
    pub fn new(name: &'static str, cap: usize, empty: &'static str) -> Self {
        LabelGuard {
            name,
            empty,
            cap,
            admitted: BTreeSet::new(),
        }
    }

    /// The label this guard bounds.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The cap on distinct values.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// The values admitted so far (excluding the reserved ones), sorted.
    pub fn admitted(&self) -> impl Iterator<Item = &str> {
        self.admitted.iter().map(String::as_str)
    }

    /// Map one raw value to its label value, admitting it if there is room.
    pub fn admit(&mut self, raw: Option<&str>) -> Admitted {
        let value = sanitize(raw.unwrap_or(""));
        if value.is_empty() {
            return Admitted::Value(self.empty.to_owned());
        }
        if value == OTHER || value == UNKNOWN || value == self.empty {
            return Admitted::Value(value);
        }
        if self.admitted.contains(&value) {
            return Admitted::Value(value);
        }
        if self.admitted.len() < self.cap {
            self.admitted.insert(value.clone());
            return Admitted::Value(value);
        }
        Admitted::Overflow
    }

    /// Replace the admitted set (restoring a snapshot). Restored values are kept even if they
    /// exceed the current cap, so that series already exported keep their labels.
    pub fn restore<I: IntoIterator<Item = String>>(&mut self, values: I) {
        self.admitted = values.into_iter().map(|v| sanitize(&v)).collect();
    }
}

/// Trim, escape control characters (see [`retryscope_core::sanitize::label`]) and truncate a raw value
/// to at most [`MAX_LABEL_CHARS`] characters.
pub fn sanitize(raw: &str) -> String {
    retryscope_core::sanitize::label(raw.trim())
        .chars()
        .take(MAX_LABEL_CHARS)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_and_reserves() {
        let mut g = LabelGuard::new("model", 2, UNKNOWN);
        assert_eq!(g.admit(None).as_str(), "unknown");
        assert_eq!(g.admit(Some("  ")).as_str(), "unknown");
        assert_eq!(g.admit(Some("a")).as_str(), "a");
        assert_eq!(g.admit(Some("other")).as_str(), "other");
        assert_eq!(g.admit(Some("b")).as_str(), "b");
        assert_eq!(g.admit(Some("c")), Admitted::Overflow);
        assert_eq!(g.admit(Some("a")).as_str(), "a");
        assert_eq!(g.admitted().collect::<Vec<_>>(), vec!["a", "b"]);
    }

    #[test]
    fn label_values_carry_no_raw_control_characters() {
        let mut g = LabelGuard::new("model", 8, UNKNOWN);
        let v = g.admit(Some("gpt\x1b]0;x\x07\r4"));
        assert_eq!(v.as_str(), "gpt\\x1b]0;x\\x07\\r4");
        assert!(!v.as_str().chars().any(char::is_control));
    }

    #[test]
    fn truncates_on_char_boundaries() {
        let long = "é".repeat(100);
        let s = sanitize(&long);
        assert_eq!(s.chars().count(), MAX_LABEL_CHARS);
    }
}
