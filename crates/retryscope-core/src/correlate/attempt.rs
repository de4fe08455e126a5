//! One attempt's state: outcome, text statistics (length, hash, bounded prefix), calls,
//! executions and usage. Holds no unbounded text.

use serde::{Deserialize, Serialize};

use super::intern::Sym;
use crate::event::Usage;
use crate::fasthash::StreamHash;
use crate::report::{MAX_TIMELINE_MARKS, MarkKind, Outcome, TimelineMark};

/// Text statistics of a stream of fragments.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TextStats {
    /// Characters.
    pub chars: u64,
    /// Streaming hash of the UTF-8 bytes.
    pub hash: StreamHash,
    /// The first bytes, cut on a character boundary.
    pub prefix: String,
    /// The prefix stopped short of a character that did not fit: it takes no more text, so
    /// it stays a contiguous start of the text (a later ASCII fragment would still fit).
    #[serde(default)]
    pub prefix_closed: bool,
}

impl TextStats {
    /// Stats of one whole text.
    pub(crate) fn of(text: &str, prefix_cap: usize) -> Self {
        let mut s = TextStats::default();
        s.push(text, prefix_cap);
        s
    }

    /// Append a fragment; returns its length in characters.
    pub(crate) fn push(&mut self, text: &str, prefix_cap: usize) -> u64 {
        let chars = text.chars().count() as u64;
        self.chars += chars;
        self.hash.push(text.as_bytes());
        let room = prefix_cap.saturating_sub(self.prefix.len());
        if room > 0 && !self.prefix_closed {
            if self.prefix.capacity() == 0 {
                self.prefix
                    .reserve_exact(prefix_cap.min(text.len().max(64)));
            }
            let mut cut = room.min(text.len());
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            self.prefix.push_str(&text[..cut]);
            self.prefix_closed = cut < text.len();
        }
        chars
    }

    /// Same text (by length and hash).
    pub(crate) fn same_as(&self, other: &TextStats) -> bool {
        self.chars == other.chars && self.hash.value() == other.hash.value()
    }
}

/// A complete tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CallState {
    pub id: Box<str>,
    pub name: Sym,
    /// Effect key without a step.
    pub effect_key: Box<str>,
    /// Canonical arguments, kept only when small (to derive stepped keys).
    pub canonical_args: Option<Box<str>>,
}

/// One execution of a call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ExecState {
    pub id: String,
    pub name: Sym,
    /// `None` until the call it executes is known.
    pub effect_key: Option<String>,
    pub step: Option<i64>,
    pub read: bool,
    pub status: Option<Sym>,
    pub ts_ms: i64,
    /// Already reported as `abandoned_tool_executed`.
    pub flagged_abandoned: bool,
    /// How its result says it ended, when not in success (started, then aborted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<crate::rules::abandoned_tool_executed::Stopped>,
    /// The start of that result, kept only with content capture.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
}

impl ExecState {
    /// The call this execution ran, as the rules name it.
    pub(crate) fn call(&self) -> crate::rules::Call<'_> {
        crate::rules::Call {
            tool: &self.name,
            id: &self.id,
            effect_key: self.effect_key.as_deref(),
        }
    }
}

/// One attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct AttemptState {
    pub number: u32,
    pub outcome: Outcome,
    pub finish_reason: Option<Sym>,
    pub error: Option<Box<str>>,
    pub retry_reason: Option<Sym>,
    pub model: Option<Sym>,
    pub started_ms: i64,
    pub ended_ms: i64,
    pub text: TextStats,
    /// Turn-local sequence number of this attempt's last text fragment.
    pub last_text_seq: u64,
    pub args_chars: u64,
    pub calls: Vec<CallState>,
    pub execs: Vec<ExecState>,
    /// Boxed: an attempt still streaming has none yet (one pointer instead of ~50 bytes).
    pub usage: Option<Box<Usage>>,
    pub usage_model: Option<Sym>,
    /// A continuation: the partial output it was asked to continue (boxed: one pointer
    /// otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continues: Option<Box<Continuation>>,
    /// Timeline marks, only when the correlator keeps them (boxed: one pointer otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marks: Option<Box<Marks>>,
}

/// A continuation attempt's texts: the partial output its request carried (the prefill) and
/// what the client should keep, that partial output followed by this attempt's own text.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Continuation {
    pub prefill: TextStats,
    pub kept: TextStats,
}

impl Continuation {
    pub(crate) fn of(prefill: &str, prefix_cap: usize) -> Self {
        let stats = TextStats::of(prefill, prefix_cap);
        Continuation {
            prefill: stats.clone(),
            kept: stats,
        }
    }
}

/// An attempt's bounded timeline (see [`TimelineMark`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Marks {
    pub list: Vec<TimelineMark>,
    pub dropped: u32,
}

impl Marks {
    /// Record an event; consecutive text events become one run.
    pub(crate) fn push(&mut self, kind: MarkKind, ts: i64, chars: u64, call_id: Option<&str>) {
        if kind == MarkKind::Text
            && let Some(last) = self.list.last_mut()
            && last.kind == MarkKind::Text
        {
            last.end_ms = Some(last.end_ms.unwrap_or(last.ts_ms).max(ts));
            last.chars = Some(last.chars.unwrap_or(0) + chars);
            return;
        }
        if self.list.len() >= MAX_TIMELINE_MARKS {
            self.dropped = self.dropped.saturating_add(1);
            return;
        }
        self.list.push(TimelineMark {
            kind,
            ts_ms: ts,
            end_ms: None,
            chars: (kind == MarkKind::Text).then_some(chars),
            call_id: call_id.map(str::to_owned),
        });
    }
}

impl AttemptState {
    pub(crate) fn new(number: u32, ts: i64) -> Self {
        AttemptState {
            number,
            outcome: Outcome::Open,
            finish_reason: None,
            error: None,
            retry_reason: None,
            model: None,
            started_ms: ts,
            ended_ms: ts,
            text: TextStats::default(),
            last_text_seq: 0,
            args_chars: 0,
            calls: Vec::new(),
            execs: Vec::new(),
            usage: None,
            usage_model: None,
            continues: None,
            marks: None,
        }
    }

    /// Put an event on the timeline when marks are kept (`keep`).
    pub(crate) fn mark(
        &mut self,
        keep: bool,
        kind: MarkKind,
        ts: i64,
        chars: u64,
        call_id: Option<&str>,
    ) {
        if keep {
            self.marks
                .get_or_insert_with(Default::default)
                .push(kind, ts, chars, call_id);
        }
    }

    /// Still streaming: neither finished, failed nor abandoned.
    pub(crate) fn is_open(&self) -> bool {
        self.outcome == Outcome::Open
    }

    pub(crate) fn touch(&mut self, ts: i64) {
        self.started_ms = self.started_ms.min(ts);
        self.ended_ms = self.ended_ms.max(ts);
    }

    pub(crate) fn call(&self, id: &str) -> Option<&CallState> {
        self.calls.iter().find(|c| &*c.id == id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_hash_ignores_how_bytes_are_split() {
        let text: Vec<u8> = (0u8..=200).collect();
        let mut whole = StreamHash::default();
        whole.push(&text);
        for split in [1usize, 3, 7, 8, 9, 15] {
            let mut h = StreamHash::default();
            for part in text.chunks(split) {
                h.push(part);
            }
            assert_eq!(h.value(), whole.value(), "split {split}");
        }
        let mut other = StreamHash::default();
        other.push(&text[..200]);
        assert_ne!(other.value(), whole.value());
        let (mut a, mut b) = (StreamHash::default(), StreamHash::default());
        a.push(b"ab");
        b.push(b"ab\0");
        assert_ne!(a.value(), b.value(), "length is part of the hash");
    }

    #[test]
    fn fragment_hash_equals_whole_hash() {
        let mut s = TextStats::default();
        for frag in ["Checking or", "der ORD-", "7781. é", "✓"] {
            s.push(frag, 8);
        }
        let whole = TextStats::of("Checking order ORD-7781. é✓", 8);
        assert!(s.same_as(&whole));
        assert_eq!(s.prefix, "Checking");
        assert_eq!(s.chars, 27);
    }

    #[test]
    fn prefix_stays_contiguous_when_a_character_does_not_fit() {
        // Cap 5: "ab" + "é" fill 4 bytes, the second "é" does not fit; "c" would, but the
        // prefix must stay a start of the text ("abéé c..."), or searches for it fail.
        let mut s = TextStats::default();
        for frag in ["ab", "éé", "cd"] {
            s.push(frag, 5);
        }
        assert_eq!(s.prefix, "abé");
        assert!("abéécd".starts_with(&s.prefix));
    }

    #[test]
    fn timeline_marks_merge_text_runs_and_stay_bounded() {
        let mut m = Marks::default();
        m.push(MarkKind::Text, 10, 3, None);
        m.push(MarkKind::Text, 20, 4, None);
        m.push(MarkKind::ToolCall, 25, 0, Some("c1"));
        m.push(MarkKind::Text, 30, 1, None);
        assert_eq!(m.list.len(), 3);
        assert_eq!(
            (m.list[0].ts_ms, m.list[0].end_ms, m.list[0].chars),
            (10, Some(20), Some(7))
        );
        assert_eq!(m.list[1].call_id.as_deref(), Some("c1"));
        for i in 0..200 {
            m.push(MarkKind::ToolCall, 40 + i, 0, Some("c"));
            m.push(MarkKind::Text, 41 + i, 1, None);
        }
        assert_eq!(m.list.len(), MAX_TIMELINE_MARKS);
        // Text after a kept text mark still merges; everything else past the cap is counted.
        assert!(m.dropped >= 200 - MAX_TIMELINE_MARKS as u32 / 2);
    }

    #[test]
    fn prefix_cuts_on_char_boundary() {
        let s = TextStats::of("ééé", 3);
        assert_eq!(s.prefix, "é");
    }
}
