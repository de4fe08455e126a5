//! Framing of a streamed response body as it arrives: server-sent events (OpenAI, Anthropic,
//! Gemini with `alt=sse`) or the elements of a JSON array (Gemini `streamGenerateContent`
//! without `alt=sse`).
//!
//! Owns only framing: where each event or element ends in the byte stream (so fault
//! injection can cut between two of them) and its payload (the joined `data:` lines, or the
//! element's JSON text). The bytes themselves are forwarded untouched; what a payload means is
//! the provider decoders' business (in the core).

/// How a response body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// `text/event-stream`.
    Sse,
    /// A JSON array streamed element by element.
    JsonArray,
    /// One JSON document (a non-streaming response): one frame at the end.
    Whole,
}

/// One complete frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The bytes of the body up to the frame's end, from the previous frame's end (separators
    /// and comments before it included).
    pub bytes: Vec<u8>,
    /// The SSE `event:` name, when there was one.
    pub event: Option<String>,
    /// The payload: joined `data:` lines, or the JSON element.
    pub data: String,
}

/// Bytes in, frames out.
#[derive(Debug)]
pub struct Framer {
    framing: Framing,
    /// Bytes since the end of the last frame.
    buf: Vec<u8>,
    /// How far `buf` has been scanned.
    scanned: usize,
    /// SSE: the event being assembled.
    event: Option<String>,
    data: String,
    has_data: bool,
    /// JSON array: nesting depth, string state, start of the current element.
    depth: u32,
    in_string: bool,
    escaped: bool,
    start: Option<usize>,
    /// Largest frame accepted; a longer one is dropped (counted) and framing resynchronises.
    max_frame: usize,
    /// Frames dropped for their size.
    pub oversized: u64,
    /// `Whole`: the document outgrew `max_frame`; it is passed through unobserved and nothing
    /// more is held.
    unobserved: bool,
}

impl Framer {
    /// A framer for a body framed as `framing`, holding at most `max_frame` bytes of a frame.
    pub fn new(framing: Framing, max_frame: usize) -> Self {
        Framer {
            framing,
            buf: Vec::new(),
            scanned: 0,
            event: None,
            data: String::new(),
            has_data: false,
            depth: 0,
            in_string: false,
            escaped: false,
            start: None,
            max_frame,
            oversized: 0,
            unobserved: false,
        }
    }

    /// The framing.
    pub fn framing(&self) -> Framing {
        self.framing
    }

    /// Whether a `Whole` document outgrew the cap: it is not observed (its bytes still go to
    /// the client), and [`Framer::finish`] gives no frame.
    pub fn unobserved(&self) -> bool {
        self.unobserved
    }

    /// Feed bytes; returns the frames they complete.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<Frame> {
        if self.unobserved {
            return Vec::new();
        }
        if self.framing == Framing::Whole && self.buf.len() + bytes.len() > self.max_frame {
            // A document this large is not a model answer this proxy can reshape: stop holding
            // it (an endless answer would otherwise grow without bound).
            self.oversized += 1;
            self.unobserved = true;
            self.buf = Vec::new();
            return Vec::new();
        }
        self.buf.extend_from_slice(bytes);
        let mut out = Vec::new();
        match self.framing {
            Framing::Sse => self.scan_sse(&mut out),
            Framing::JsonArray => self.scan_array(&mut out),
            Framing::Whole => {}
        }
        if self.buf.len() > self.max_frame && self.framing != Framing::Whole {
            // A frame this large is not an LLM stream event: drop what is held and resync.
            self.oversized += 1;
            self.buf.clear();
            self.scanned = 0;
            self.event = None;
            self.data.clear();
            self.has_data = false;
            self.depth = 0;
            self.in_string = false;
            self.escaped = false;
            self.start = None;
        }
        out
    }

    /// The body ended: a last frame (an SSE event without its blank line, or a whole
    /// document), and the bytes after the last frame (a JSON array's closing `]`).
    pub fn finish(&mut self) -> (Option<Frame>, Vec<u8>) {
        match self.framing {
            Framing::Sse => {
                let mut out = Vec::new();
                // A last line without its newline.
                if self.scanned < self.buf.len() {
                    self.buf.push(b'\n');
                    self.scan_sse(&mut out);
                }
                let frame = out.pop().or_else(|| {
                    self.has_data.then(|| Frame {
                        bytes: std::mem::take(&mut self.buf),
                        event: self.event.take(),
                        data: std::mem::take(&mut self.data),
                    })
                });
                (frame, std::mem::take(&mut self.buf))
            }
            Framing::JsonArray => (None, std::mem::take(&mut self.buf)),
            Framing::Whole if self.unobserved => (None, Vec::new()),
            Framing::Whole => {
                let bytes = std::mem::take(&mut self.buf);
                let data = String::from_utf8_lossy(&bytes).into_owned();
                let frame = (!data.trim().is_empty()).then_some(Frame {
                    bytes,
                    event: None,
                    data,
                });
                (frame, Vec::new())
            }
        }
    }

    fn scan_sse(&mut self, out: &mut Vec<Frame>) {
        let mut line_start = self.scanned;
        while let Some(nl) = memchr::memchr(b'\n', &self.buf[self.scanned..]) {
            let end = self.scanned + nl;
            let mut line = &self.buf[line_start..end];
            if line.last() == Some(&b'\r') {
                line = &line[..line.len() - 1];
            }
            self.scanned = end + 1;
            if line.is_empty() {
                if self.has_data {
                    let rest = self.buf.split_off(self.scanned);
                    let bytes = std::mem::replace(&mut self.buf, rest);
                    self.scanned = 0;
                    out.push(Frame {
                        bytes,
                        event: self.event.take(),
                        data: std::mem::take(&mut self.data),
                    });
                    self.has_data = false;
                } else {
                    self.event = None;
                }
                line_start = self.scanned;
                continue;
            }
            let text = String::from_utf8_lossy(line);
            let (field, value) = match text.find(':') {
                Some(0) => {
                    line_start = self.scanned;
                    continue; // a comment
                }
                Some(i) => {
                    let v = &text[i + 1..];
                    (&text[..i], v.strip_prefix(' ').unwrap_or(v))
                }
                None => (text.as_ref(), ""),
            };
            match field {
                "data" => {
                    if self.has_data {
                        self.data.push('\n');
                    }
                    self.data.push_str(value);
                    self.has_data = true;
                }
                "event" => self.event = Some(value.to_owned()),
                _ => {}
            }
            line_start = self.scanned;
        }
    }

    fn scan_array(&mut self, out: &mut Vec<Frame>) {
        let mut i = self.scanned;
        while i < self.buf.len() {
            let b = self.buf[i];
            i += 1;
            if self.depth == 0 {
                if b == b'{' || b == b'[' && self.start.is_some() {
                    self.depth = 1;
                    self.start = Some(i - 1);
                } else if b == b'[' {
                    // The array's own opening bracket.
                    self.start = Some(usize::MAX);
                }
                continue;
            }
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                } else if b == b'\\' {
                    self.escaped = true;
                } else if b == b'"' {
                    self.in_string = false;
                }
                continue;
            }
            match b {
                b'"' => self.in_string = true,
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' => {
                    self.depth -= 1;
                    if self.depth == 0 {
                        let start = self.start.unwrap_or(0);
                        let data = String::from_utf8_lossy(&self.buf[start..i]).into_owned();
                        let rest = self.buf.split_off(i);
                        let bytes = std::mem::replace(&mut self.buf, rest);
                        out.push(Frame {
                            bytes,
                            event: None,
                            data,
                        });
                        self.start = Some(usize::MAX);
                        i = 0;
                    }
                }
                _ => {}
            }
        }
        self.scanned = i;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(framing: Framing, body: &[u8], step: usize) -> (Vec<Frame>, Vec<u8>) {
        let mut f = Framer::new(framing, 1 << 20);
        let mut frames = Vec::new();
        for chunk in body.chunks(step.max(1)) {
            frames.extend(f.push(chunk));
        }
        let (last, tail) = f.finish();
        frames.extend(last);
        (frames, tail)
    }

    #[test]
    fn sse_frames_keep_every_byte_whatever_the_chunking() {
        let body = b": comment\r\nevent: message_start\r\ndata: {\"a\":1}\r\n\r\ndata: x\ndata: y\n\n\nevent: ping\ndata: {}\n\n";
        for step in [1, 2, 3, 7, 100] {
            let (frames, tail) = all(Framing::Sse, body, step);
            let datas: Vec<&str> = frames.iter().map(|f| f.data.as_str()).collect();
            assert_eq!(datas, ["{\"a\":1}", "x\ny", "{}"], "step {step}");
            assert_eq!(frames[0].event.as_deref(), Some("message_start"));
            assert_eq!(frames[1].event, None);
            assert_eq!(frames[2].event.as_deref(), Some("ping"));
            let mut joined: Vec<u8> = frames.iter().flat_map(|f| f.bytes.clone()).collect();
            joined.extend(tail);
            assert_eq!(joined, body, "step {step}");
        }
    }

    #[test]
    fn sse_last_event_without_blank_line_is_a_frame() {
        let (frames, tail) = all(Framing::Sse, b"data: {\"a\":1}\n\ndata: {\"b\":2}", 4);
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[1].data, "{\"b\":2}");
        assert!(tail.is_empty());
    }

    #[test]
    fn json_array_elements_with_brackets_and_quotes_in_strings() {
        let body = b"[{\"t\":\"a]}\\\"{\",\"n\":[1,{\"x\":2}]}\r\n,\r\n{\"u\":3}\n]";
        for step in [1, 5, 1000] {
            let (frames, tail) = all(Framing::JsonArray, body, step);
            let datas: Vec<&str> = frames.iter().map(|f| f.data.as_str()).collect();
            assert_eq!(
                datas,
                ["{\"t\":\"a]}\\\"{\",\"n\":[1,{\"x\":2}]}", "{\"u\":3}"],
                "step {step}"
            );
            let mut joined: Vec<u8> = frames.iter().flat_map(|f| f.bytes.clone()).collect();
            joined.extend(&tail);
            assert_eq!(joined, body);
            assert_eq!(tail, b"\n]");
        }
    }

    #[test]
    fn whole_document_is_one_frame_at_the_end() {
        let (frames, _) = all(Framing::Whole, b"{\"candidates\":[]}", 3);
        assert_eq!(frames.len(), 1);
        assert_eq!(frames[0].data, "{\"candidates\":[]}");
    }

    #[test]
    fn a_whole_document_over_the_cap_is_released_and_never_held_again() {
        let mut f = Framer::new(Framing::Whole, 64);
        assert!(f.push(&[b'{'; 40]).is_empty());
        assert!(!f.unobserved());
        assert!(f.push(&[b'x'; 40]).is_empty());
        assert!(f.unobserved());
        assert_eq!(f.oversized, 1);
        for _ in 0..1000 {
            f.push(&[b'x'; 4096]);
        }
        assert_eq!(f.buf.capacity(), 0, "nothing held after the cap");
        assert_eq!(f.oversized, 1, "counted once per answer");
        assert_eq!(f.finish(), (None, Vec::new()));
    }

    #[test]
    fn oversized_frame_is_dropped_and_framing_resumes() {
        let mut f = Framer::new(Framing::Sse, 64);
        assert!(f.push(&[b'x'; 100]).is_empty());
        assert_eq!(f.oversized, 1);
        // The rest of that line, then a good event.
        let frames = f.push(b"\n\ndata: {}\n\n");
        assert_eq!(frames.len(), 1);
        assert_eq!(frames[0].data, "{}");
    }
}
