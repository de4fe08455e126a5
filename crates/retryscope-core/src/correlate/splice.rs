//! The spliced-text check on a turn's `output`.
//!
//! An output equal to the final attempt's text (same length and hash) is clean. Otherwise it is
//! spliced when it carries an earlier attempt's text more often than the final attempt's own
//! text does: this keeps an abandoned attempt whose text is a prefix of the final text from
//! looking like a splice, while "abandoned + final" concatenations are caught.

use serde::{Deserialize, Serialize};

use super::attempt::{AttemptState, TextStats};

/// What the correlator keeps of an `output` event: its stats, and how often each attempt's
/// text prefix (as known when the output arrived) occurs in it. Never the text itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputState {
    pub text: TextStats,
    /// (attempt number, occurrences of that attempt's prefix in the output).
    pub occurrences: Vec<(u32, u32)>,
}

impl OutputState {
    pub fn new(text: &str, attempts: &[AttemptState], prefix_cap: usize) -> Self {
        let stats = TextStats::of(text, prefix_cap);
        // The common clean case: the output is exactly the newest attempt's text, so no splice
        // can be found and the substring searches are skipped.
        let clean = attempts.last().is_some_and(|a| a.text.same_as(&stats));
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

/// The attempt whose text the output shows spliced in, if any.
pub fn spliced_attempt(
    output: &OutputState,
    attempts: &[AttemptState],
    final_attempt: &AttemptState,
) -> Option<u32> {
    if output.text.same_as(&final_attempt.text) {
        return None;
    }
    output.occurrences.iter().find_map(|&(number, in_output)| {
        if number == final_attempt.number || in_output == 0 {
            return None;
        }
        let earlier = attempts.iter().find(|a| a.number == number)?;
        let in_final = count(&final_attempt.text.prefix, &earlier.text.prefix);
        (in_output > in_final).then_some(number)
    })
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
        assert_eq!(spliced_attempt(&out, &all, &a1), Some(0));
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
        assert_eq!(spliced_attempt(&out, &all, &a1), Some(0));
    }
}
