//! Rendering one turn of the synthetic fleet as native-format JSON lines, time-ordered, handed
//! out one at a time (ids, finish reasons, errors, usage).

use super::*;

/// One turn's lines, rendered ahead and handed out one at a time.
#[derive(Debug, Default)]
pub(super) struct RenderedTurn {
    pub(super) buf: String,
    /// (event time, start, end) of each line in `buf`.
    pub(super) lines: Vec<(i64, usize, usize)>,
    pub(super) next: usize,
    pub(super) line_start: usize,
    pub(super) line_ts: i64,
}

impl RenderedTurn {
    pub(super) fn clear(&mut self) {
        self.buf.clear();
        self.lines.clear();
        self.next = 0;
    }

    pub(super) fn next_ts(&self) -> Option<i64> {
        self.lines.get(self.next).map(|l| l.0)
    }

    pub(super) fn take_line(&mut self, out: &mut String) {
        if let Some(&(_, from, to)) = self.lines.get(self.next) {
            out.push_str(&self.buf[from..to]);
            self.next += 1;
        }
    }

    pub(super) fn open(&mut self, turn: &str, ty: &str, ts: i64, attempt: Option<u32>) {
        self.line_start = self.buf.len();
        self.line_ts = ts;
        self.buf.push_str("{\"v\":1,\"turn\":");
        push_json_str(&mut self.buf, turn);
        self.buf.push_str(",\"type\":\"");
        self.buf.push_str(ty);
        self.buf.push_str("\",\"ts\":");
        let _ = write!(self.buf, "{ts}");
        if let Some(a) = attempt {
            let _ = write!(self.buf, ",\"attempt\":{a}");
        }
    }

    pub(super) fn str_field(&mut self, key: &str, value: &str) {
        self.buf.push_str(",\"");
        self.buf.push_str(key);
        self.buf.push_str("\":");
        push_json_str(&mut self.buf, value);
    }

    pub(super) fn num_field(&mut self, key: &str, value: u64) {
        let _ = write!(self.buf, ",\"{key}\":{value}");
    }

    pub(super) fn close(&mut self) {
        self.buf.push('}');
        self.lines
            .push((self.line_ts, self.line_start, self.buf.len()));
    }
}

/// Append `s` as a JSON string literal.
pub(super) fn push_json_str(out: &mut String, s: &str) {
    out.push('"');
    let mut from = 0;
    for (i, b) in s.bytes().enumerate() {
        let esc = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0..=0x1f => "",
            _ => continue,
        };
        // ASCII bytes are always character boundaries.
        out.push_str(&s[from..i]);
        if esc.is_empty() {
            let _ = write!(out, "\\u{:04x}", b);
        } else {
            out.push_str(esc);
        }
        from = i + 1;
    }
    out.push_str(&s[from..]);
    out.push('"');
}

pub(super) const BASE62: &[u8; 62] =
    b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

pub(super) fn push_random_id(rng: &mut Rng, len: usize, out: &mut String) {
    for _ in 0..len {
        out.push(char::from(BASE62[rng.below(BASE62.len())]));
    }
}

pub(super) fn push_request_id(rng: &mut Rng, provider: &str, out: &mut String) {
    match provider {
        "anthropic" => {
            out.push_str("req_011C");
            push_random_id(rng, 16, out);
        }
        "openai" => {
            out.push_str("req_");
            push_random_id(rng, 20, out);
        }
        _ => push_random_id(rng, 18, out),
    }
}

pub(super) fn push_call_id(rng: &mut Rng, provider: &str, out: &mut String) {
    match provider {
        "anthropic" => {
            out.push_str("toolu_01");
            push_random_id(rng, 14, out);
        }
        "openai" => {
            out.push_str("call_");
            push_random_id(rng, 16, out);
        }
        _ => {
            out.push_str("fc_");
            push_random_id(rng, 12, out);
        }
    }
}

pub(super) fn finish_reason(provider: &str, called: bool) -> &'static str {
    match (provider, called) {
        ("anthropic", true) => "tool_use",
        ("anthropic", false) => "end_turn",
        ("openai", true) => "tool_calls",
        ("openai", false) => "stop",
        _ => "STOP",
    }
}

/// (retry reason, error message, error code): how a stream breaks, and why it is retried.
pub(super) const ERRORS: [(&str, &str, &str); 5] = [
    ("connection_reset", "connection reset by peer", "ECONNRESET"),
    (
        "connection_reset",
        "stream closed before message_stop",
        "stream_closed",
    ),
    ("overloaded", "Overloaded", "overloaded_error"),
    ("timeout", "no data received for 30s", "ETIMEDOUT"),
    ("rate_limited", "rate limit exceeded, retry after 2s", "429"),
];

#[allow(clippy::too_many_arguments)]
pub(super) fn render_usage(
    t: &mut RenderedTurn,
    turn: &str,
    ts: i64,
    attempt: u32,
    rng: &mut Rng,
    agent_index: usize,
    agent: &AgentProfile,
    out_chars: usize,
) {
    let input = 1_200 + 700 * (agent_index as u64 % 8) + rng.below(2_500) as u64;
    let mut output = (out_chars as u64) / 4 + rng.below(24) as u64;
    let reasoning = if agent.model.starts_with("gpt-5") || agent.model.ends_with("-pro") {
        rng.range(40, 600) as u64
    } else {
        0
    };
    output += reasoning;
    t.open(turn, "usage", ts, Some(attempt));
    t.num_field("input_tokens", input);
    t.num_field("output_tokens", output);
    if rng.chance(0.7) {
        t.num_field(
            "cached_input_tokens",
            input * rng.range(40, 85) as u64 / 100,
        );
    }
    if reasoning > 0 {
        t.num_field("reasoning_tokens", reasoning);
    }
    t.close();
}
