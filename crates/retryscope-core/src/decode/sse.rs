//! SSE framing: turns lines of a raw `text/event-stream` body, or of a JSON-per-line chunk
//! file, into payloads.
//!
//! Owns only framing: `event:` / `data:` fields, blank-line dispatch, comments, CRLF, and the
//! `[DONE]` sentinel. A line that starts with `{` outside an SSE event is a whole payload on
//! its own (the `*.chunks.txt` form, where a harness would have added `data: `). What a payload
//! means is the provider decoder's business.

/// One dispatched SSE event (or one JSON-per-line payload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Frame {
    /// The `event:` name, when there was one.
    pub event: Option<String>,
    /// The joined `data:` lines.
    pub data: String,
}

impl Frame {
    /// Whether this is the OpenAI `[DONE]` sentinel.
    pub(crate) fn is_done(&self) -> bool {
        self.data.trim() == "[DONE]"
    }
}

/// Line-at-a-time SSE framer.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct SseFramer {
    event: Option<String>,
    data: String,
    has_data: bool,
}

impl SseFramer {
    /// A framer with nothing pending.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Feed one line (without `\n`; a trailing `\r` is stripped). Returns the frames it
    /// completes: at most two (a pending event cut short by a bare JSON line, and that line).
    pub(crate) fn push_line(&mut self, line: &str) -> Vec<Frame> {
        let line = line.strip_suffix('\r').unwrap_or(line);
        let mut out = Vec::new();
        if line.is_empty() {
            out.extend(self.dispatch());
            return out;
        }
        if line.starts_with(':') {
            return out; // comment / keep-alive
        }
        let trimmed = line.trim_start();
        if trimmed.starts_with('{') || trimmed == "[DONE]" {
            // A JSON-per-line payload: it ends whatever event was pending.
            out.extend(self.dispatch());
            out.push(Frame {
                event: None,
                data: trimmed.to_owned(),
            });
            return out;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = Some(value.to_owned()),
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            // `id:`, `retry:` and unknown fields carry nothing a decoder needs.
            _ => {}
        }
        out
    }

    /// End of input: dispatch an event left without its closing blank line.
    pub(crate) fn finish(&mut self) -> Option<Frame> {
        self.dispatch()
    }

    fn dispatch(&mut self) -> Option<Frame> {
        let event = self.event.take();
        if !self.has_data {
            return None;
        }
        self.has_data = false;
        Some(Frame {
            event,
            data: std::mem::take(&mut self.data),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(input: &str) -> Vec<Frame> {
        let mut f = SseFramer::new();
        let mut out = Vec::new();
        for line in input.split('\n') {
            out.extend(f.push_line(line));
        }
        out.extend(f.finish());
        out
    }

    #[test]
    fn event_and_data_lines_crlf() {
        let got = frames(
            "event: ping\r\ndata: {\"type\":\"ping\"}\r\n\r\n: keep-alive\r\ndata: a\r\ndata: b\r\n\r\n",
        );
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].event.as_deref(), Some("ping"));
        assert_eq!(got[0].data, "{\"type\":\"ping\"}");
        assert_eq!(got[1].event, None);
        assert_eq!(got[1].data, "a\nb");
    }

    #[test]
    fn json_per_line_and_done() {
        let got = frames("{\"a\":1}\n{\"b\":2}\ndata: [DONE]\n\n");
        assert_eq!(got.len(), 3);
        assert_eq!(got[1].data, "{\"b\":2}");
        assert!(got[2].is_done());
    }

    #[test]
    fn unterminated_event_is_flushed_at_end() {
        let got = frames("data: {\"x\":1}");
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].data, "{\"x\":1}");
    }

    #[test]
    fn event_without_data_is_dropped() {
        assert!(frames("event: ping\n\n").is_empty());
    }
}
