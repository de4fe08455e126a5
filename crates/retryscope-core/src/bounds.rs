//! Sane ranges for the numbers in an event. Every decoder's events pass through
//! [`check`] (in [`crate::pipeline`]) before they reach the correlator: a value outside its
//! range is a bad value, counted (`invalid_value`) and skipped with its event, never summed
//! into a counter that cannot come down again.
//!
//! The bounds are far beyond anything real and far below what would overflow or distort a
//! sum: one usage event with `u64::MAX` tokens would otherwise add $2.5e14 to the cost
//! counters, and a `ts` of `i64::MIN` next to `i64::MAX` 1.8e16 s to a duration sum.

use crate::decode::{BadLineReason, DecodeError};
use crate::event::{Event, EventKind};

/// Most tokens one usage event may report, per kind (input, output, cached, ...): a thousand
/// times the largest context window of 2026.
pub(crate) const MAX_TOKENS: u64 = 1_000_000_000;

/// Earliest event time accepted: the Unix epoch (recorded test logs count from 0).
pub(crate) const MIN_TS_MS: i64 = 0;

/// Latest event time accepted: 2100-01-01T00:00:00Z, in Unix milliseconds.
pub(crate) const MAX_TS_MS: i64 = 4_102_444_800_000;

/// Highest attempt number accepted (attempts count from 0).
pub(crate) const MAX_ATTEMPT: u32 = 100_000;

/// Largest orchestrator step number accepted, either sign.
pub(crate) const MAX_STEP: i64 = 1_000_000_000_000;

fn bad(what: &str, bound: impl std::fmt::Display) -> DecodeError {
    // The message names the field and the bound, never the value from the line.
    DecodeError::new(
        BadLineReason::InvalidValue,
        format!("`{what}` out of range ({bound})"),
    )
}

/// `Ok` when every number in `ev` is within its sane range.
pub(crate) fn check(ev: &Event<'_>) -> Result<(), DecodeError> {
    if let Some(ts) = ev.ts_ms
        && !(MIN_TS_MS..=MAX_TS_MS).contains(&ts)
    {
        return Err(bad("ts", "1970 to 2100"));
    }
    if let Some(a) = ev.attempt
        && a > MAX_ATTEMPT
    {
        return Err(bad("attempt", format_args!("at most {MAX_ATTEMPT}")));
    }
    match &ev.kind {
        EventKind::Usage { usage, .. } => {
            let u = usage;
            for (name, n) in [
                ("input_tokens", u.input_tokens),
                ("output_tokens", u.output_tokens),
                ("cached_input_tokens", u.cached_input_tokens),
                ("cache_write_tokens", u.cache_write_tokens),
                ("reasoning_tokens", u.reasoning_tokens),
            ] {
                if n > MAX_TOKENS {
                    return Err(bad(name, format_args!("at most {MAX_TOKENS}")));
                }
            }
        }
        EventKind::ToolExec { step: Some(s), .. } if s.unsigned_abs() > MAX_STEP as u64 => {
            return Err(bad("step", format_args!("at most {MAX_STEP} either sign")));
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Usage;
    use std::borrow::Cow;

    fn ev(attempt: Option<u32>, ts_ms: Option<i64>, kind: EventKind<'static>) -> Event<'static> {
        Event {
            turn: Cow::Borrowed("t"),
            attempt,
            ts_ms,
            kind,
        }
    }

    #[test]
    fn numbers_outside_sane_ranges_are_bad_values() {
        let usage = |n| EventKind::Usage {
            usage: Usage {
                input_tokens: n,
                ..Usage::default()
            },
            model: None,
        };
        assert!(check(&ev(Some(0), Some(1_700_000_000_000), usage(1_000))).is_ok());
        for bad in [
            ev(Some(0), None, usage(u64::MAX)),
            ev(Some(0), Some(i64::MIN), usage(1)),
            ev(Some(0), Some(i64::MAX), usage(1)),
            ev(Some(u32::MAX), None, EventKind::RenderReset),
        ] {
            let e = check(&bad).unwrap_err();
            assert_eq!(e.reason, BadLineReason::InvalidValue);
        }
    }
}
