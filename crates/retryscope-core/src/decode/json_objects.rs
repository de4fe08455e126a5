//! Reassembling JSON objects that span lines (pretty-printed with `JSON.stringify(x, null, 2)`,
//! as gemini-cli's telemetry outfile writes them) from a line-framed input, also when objects
//! are one per line or several follow each other.
//!
//! Owns: brace and bracket depth outside strings (escapes honoured), the size cap, and the
//! errors for text outside any object.

use super::{BadLineReason, DecodeError};

/// Objects larger than this are dropped (a runaway unbalanced brace).
const MAX_OBJECT_BYTES: usize = 16 << 20;

/// Collects lines until a top-level object closes.
#[derive(Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct ObjectFramer {
    buf: String,
    depth: i64,
    in_str: bool,
    escaped: bool,
}

impl ObjectFramer {
    /// Add one line (without its newline); returns the text of the object it completes.
    pub(crate) fn push_line(&mut self, line: &str) -> Result<Option<String>, DecodeError> {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if self.buf.is_empty() {
            let t = line.trim_start();
            if t.is_empty() {
                return Ok(None);
            }
            if !t.starts_with('{') {
                return Err(DecodeError::new(
                    BadLineReason::InvalidJson,
                    "expected a JSON object",
                ));
            }
        }
        self.buf.push_str(line);
        self.buf.push('\n');
        let closed = self.scan(line);
        if self.buf.len() > MAX_OBJECT_BYTES {
            self.reset();
            return Err(DecodeError::new(
                BadLineReason::TooLong,
                "telemetry record too large",
            ));
        }
        if !closed || self.depth > 0 {
            return Ok(None);
        }
        let unbalanced = self.depth < 0;
        let text = std::mem::take(&mut self.buf);
        self.reset();
        if unbalanced {
            return Err(DecodeError::new(
                BadLineReason::InvalidJson,
                "unbalanced braces",
            ));
        }
        Ok(Some(text))
    }

    /// Drop a partial object (end of input).
    pub(crate) fn reset(&mut self) {
        self.buf.clear();
        self.depth = 0;
        self.in_str = false;
        self.escaped = false;
    }

    /// Track depth outside strings; true when the top level just closed.
    fn scan(&mut self, line: &str) -> bool {
        let mut closed = false;
        for c in line.chars() {
            if self.in_str {
                if self.escaped {
                    self.escaped = false;
                } else if c == '\\' {
                    self.escaped = true;
                } else if c == '"' {
                    self.in_str = false;
                }
                continue;
            }
            match c {
                '"' => self.in_str = true,
                '{' | '[' => self.depth += 1,
                '}' | ']' => {
                    self.depth -= 1;
                    if self.depth == 0 {
                        closed = true;
                    }
                }
                _ => {}
            }
        }
        closed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pretty_objects_with_braces_in_strings_and_one_line_objects() {
        let mut f = ObjectFramer::default();
        let mut got = Vec::new();
        for line in [
            "{",
            "  \"a\": \"} brace \\\" quote {\",",
            "  \"b\": [1, {\"c\": 2}]",
            "}",
            "",
            "{\"x\":1}",
        ] {
            if let Some(o) = f.push_line(line).expect("line") {
                got.push(serde_json::from_str::<serde_json::Value>(&o).expect("json"));
            }
        }
        assert_eq!(got.len(), 2);
        assert_eq!(got[0]["b"][1]["c"], 2);
        assert!(f.push_line("not json").is_err());
    }
}
