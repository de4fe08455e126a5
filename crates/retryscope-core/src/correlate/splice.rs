//! The spliced-text check on a turn's `output`.
//!
//! An output equal to the final attempt's text (same length and hash) is clean. Otherwise it is
//! spliced when it carries an earlier attempt's text more often than the final attempt's own
//! text does: this keeps an abandoned attempt whose text is a prefix of the final text from
//! looking like a splice, while "abandoned + final" concatenations are caught.
//!
//! A continuation attempt (its request carried the cut attempt's partial text, to be
//! continued) is expected to be kept after that text: the clean output is then the partial
//! text followed by the continuation's own. It is a splice when the continuation restarted its
//! answer instead of continuing it: its opening repeats the partial text's (the overlap is the
//! evidence), and the client kept both.

use serde::{Deserialize, Serialize};

use super::attempt::{AttemptState, TextStats};

/// What the correlator keeps of an `output` event: its stats, and how often each attempt's
/// text prefix (as known when the output arrived) occurs in it. Never the text itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct OutputState {
    pub text: TextStats,
    /// (attempt number, occurrences of that attempt's prefix in the output).
    pub occurrences: Vec<(u32, u32)>,
}

impl OutputState {
    pub(crate) fn new(text: &str, attempts: &[AttemptState], prefix_cap: usize) -> Self {
        let stats = TextStats::of(text, prefix_cap);
        // The common clean case: the output is exactly the newest attempt's text, so no splice
        // can be found and the substring searches are skipped.
        let clean = attempts.last().is_some_and(|a| {
            a.text.same_as(&stats) || a.continues.as_ref().is_some_and(|c| c.kept.same_as(&stats))
        });
        let occurrences = if clean {
            Vec::new()
        } else {
            attempts
                .iter()
                .filter(|a| !a.text.prefix.is_empty())
                .map(|a| (a.number, count(text, &a.text.prefix)))
                .collect()
        };
        OutputState {
            text: stats,
            occurrences,
        }
    }
}

fn count(haystack: &str, needle: &str) -> u32 {
    if needle.is_empty() {
        return 0;
    }
    haystack.matches(needle).count().min(u32::MAX as usize) as u32
}

/// An attempt whose text the output shows spliced in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Splice {
    pub attempt: u32,
    /// A continuation restarted: the text its opening shares with the partial text.
    pub overlap: Option<String>,
}

/// The attempt whose text the output shows spliced in, if any.
pub(crate) fn spliced_attempt(
    output: &OutputState,
    attempts: &[AttemptState],
    final_attempt: &AttemptState,
) -> Option<Splice> {
    // What the client should have kept of the final attempt.
    let kept = match &final_attempt.continues {
        Some(c) => {
            let shows_both = output.text.same_as(&c.kept)
                || (output.text.chars > c.prefill.chars
                    && output.text.prefix.starts_with(c.prefill.prefix.as_str()));
            if shows_both
                && let Some(overlap) = restart_overlap(&c.prefill, &final_attempt.text)
                && let Some(cut) = attempts
                    .iter()
                    .rev()
                    .find(|a| a.number < final_attempt.number)
            {
                return Some(Splice {
                    attempt: cut.number,
                    overlap: Some(overlap),
                });
            }
            if output.text.same_as(&c.kept) {
                return None;
            }
            &c.kept
        }
        None => &final_attempt.text,
    };
    if output.text.same_as(&final_attempt.text) {
        return None;
    }
    output.occurrences.iter().find_map(|&(number, in_output)| {
        if number == final_attempt.number || in_output == 0 {
            return None;
        }
        let earlier = attempts.iter().find(|a| a.number == number)?;
        let in_kept = count(&kept.prefix, &earlier.text.prefix);
        (in_output > in_kept).then_some(Splice {
            attempt: number,
            overlap: None,
        })
    })
}

/// Characters of overlap that make a continuation a restart, for a partial text of `chars`:
/// half of it, at least 4 and at most 32 (a genuine continuation shares a word or two with
/// what it continues; a restart repeats the opening).
fn restart_threshold(chars: u64) -> usize {
    (chars.div_ceil(2) as usize).clamp(4, 32)
}

/// The longest text the partial text's opening and the continuation's opening share, when it
/// is long enough to say the continuation started over.
fn restart_overlap(
    prefill: &super::attempt::TextStats,
    continuation: &super::attempt::TextStats,
) -> Option<String> {
    let a: Vec<char> = prefill.prefix.chars().collect();
    let b: Vec<char> = continuation.prefix.chars().collect();
    let need = restart_threshold(prefill.chars);
    if a.len() < need || b.len() < need {
        return None;
    }
    // Longest common substring, one row of the table at a time (both sides are bounded
    // prefixes, a few hundred characters).
    let mut prev = vec![0usize; b.len() + 1];
    let mut row = vec![0usize; b.len() + 1];
    let (mut best, mut end) = (0usize, 0usize);
    for &ca in &a {
        for (j, &cb) in b.iter().enumerate() {
            row[j + 1] = if ca == cb { prev[j] + 1 } else { 0 };
            if row[j + 1] > best {
                best = row[j + 1];
                end = j + 1;
            }
        }
        std::mem::swap(&mut prev, &mut row);
    }
    (best >= need).then(|| b[end - best..end].iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(n: u32, text: &str) -> AttemptState {
        let mut a = AttemptState::new(n, 0);
        a.text = TextStats::of(text, 256);
        a
    }

    #[test]
    fn naive_concatenation_is_spliced() {
        let a0 = attempt(0, "Checking order ORD-7781. Refunding the dam");
        let a1 = attempt(
            1,
            "Checking order ORD-7781. The book arrived damaged, so I have started a full refund.",
        );
        let all = vec![a0, a1.clone()];
        let out = OutputState::new(
            "Checking order ORD-7781. Refunding the damChecking order ORD-7781. The book arrived damaged, so I have started a full refund.",
            &all,
            256,
        );
        assert_eq!(spliced_attempt(&out, &all, &a1).map(|s| s.attempt), Some(0));
    }

    #[test]
    fn output_equal_to_final_is_clean_even_when_abandoned_is_prefix() {
        let a0 = attempt(0, "Checking order");
        let a1 = attempt(1, "Checking order ORD-7781. Done.");
        let all = vec![a0, a1.clone()];
        let out = OutputState::new("Checking order ORD-7781. Done.", &all, 256);
        assert_eq!(spliced_attempt(&out, &all, &a1), None);
        // A different output that still carries the prefix only as often as the final text does.
        let out = OutputState::new("Checking order ORD-7781.", &all, 256);
        assert_eq!(spliced_attempt(&out, &all, &a1), None);
        // Prefix twice: spliced.
        let out = OutputState::new("Checking orderChecking order ORD-7781. Done.", &all, 256);
        assert_eq!(spliced_attempt(&out, &all, &a1).map(|s| s.attempt), Some(0));
    }

    fn continuation(n: u32, prefill: &str, text: &str) -> AttemptState {
        let mut a = attempt(n, "");
        let mut c = super::super::attempt::Continuation::of(prefill, 256);
        c.kept.push(text, 256);
        a.text = TextStats::of(text, 256);
        a.continues = Some(Box::new(c));
        a
    }

    #[test]
    fn a_continuation_kept_after_its_partial_text_is_clean() {
        // Anthropic prefill / a trailing assistant message: the model goes on mid-word.
        let a0 = attempt(0, "Checking order ORD-7781. Refunding the dam");
        let a1 = continuation(
            1,
            "Checking order ORD-7781. Refunding the dam",
            "aged book in full now.",
        );
        let all = vec![a0, a1.clone()];
        let out = OutputState::new(
            "Checking order ORD-7781. Refunding the damaged book in full now.",
            &all,
            256,
        );
        assert_eq!(spliced_attempt(&out, &all, &a1), None);
        // The client kept only the continuation's own text: clean too.
        let out = OutputState::new("aged book in full now.", &all, 256);
        assert_eq!(spliced_attempt(&out, &all, &a1), None);
    }

    #[test]
    fn a_continuation_that_restarts_is_spliced_with_the_overlap() {
        // Qwen Code 0.24.4 through a cut (issue 21): the continuation request carries
        // "[A1] I will now cr"; the model answers from the start, the client keeps both.
        let a0 = attempt(0, "[A1] I will now cr");
        let a1 = continuation(
            1,
            "[A1] I will now cr",
            "[A2] I will now create the marker file (A2).",
        );
        let all = vec![a0, a1.clone()];
        let out = OutputState::new(
            "[A1] I will now cr[A2] I will now create the marker file (A2).",
            &all,
            256,
        );
        assert_eq!(
            spliced_attempt(&out, &all, &a1),
            Some(Splice {
                attempt: 0,
                overlap: Some("] I will now cr".to_owned())
            })
        );
        // Kept only the restart: clean.
        let out = OutputState::new("[A2] I will now create the marker file (A2).", &all, 256);
        assert_eq!(spliced_attempt(&out, &all, &a1), None);
    }

    #[test]
    fn restart_needs_a_real_overlap() {
        assert_eq!(restart_threshold(1), 4);
        assert_eq!(restart_threshold(18), 9);
        assert_eq!(restart_threshold(1_000), 32);
        let p = TextStats::of("Hello wor", 256);
        assert_eq!(
            restart_overlap(&p, &TextStats::of("ld, how are you", 256)),
            None
        );
        assert_eq!(
            restart_overlap(&p, &TextStats::of("Hello world, how are you", 256)).as_deref(),
            Some("Hello wor")
        );
    }
}
