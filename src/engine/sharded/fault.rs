//! Fault injection for the worker-death tests (issue 22): make one ingest worker thread panic,
//! as a bug in a decoder or the correlator would, at a chosen point of its input.
//!
//! `RETRYSCOPE_FAULT_WORKER_PANIC_AFTER=W:N` makes worker `W` (0-based, `--workers` ≥ 2) panic
//! when it is handed a line after having applied `N` lines. It is read in debug builds only
//! (`cfg(debug_assertions)`), never in a release build: the end-to-end tests run the binary
//! cargo builds for them, which is built without `cfg(test)`, so a `cfg(test)` gate would hide
//! the hook from them; and a cargo feature cannot be turned on by a package's own integration
//! tests (a dev-dependency on itself is a cycle, `required-features` skips the test unless
//! the feature is given by hand). The dev and test profiles have debug assertions, the release
//! profile does not, so the variable does nothing in what is shipped.

/// Which worker panics, and after how many lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PanicAfter {
    /// The worker's index.
    pub worker: usize,
    /// Lines it applies before the panic.
    pub lines: u64,
    /// The worker's thread is not started at all (`W:spawn`): the system refused it.
    pub spawn_fails: bool,
}

/// The variable's name.
pub(super) const ENV: &str = "RETRYSCOPE_FAULT_WORKER_PANIC_AFTER";

// In a release build only the unit tests use `parse`.
#[cfg_attr(not(debug_assertions), allow(dead_code))]
impl PanicAfter {
    /// The fault asked for by [`ENV`]; always `None` in a release build.
    pub(super) fn from_env() -> Option<PanicAfter> {
        #[cfg(debug_assertions)]
        {
            let value = std::env::var(ENV).ok()?;
            let fault = PanicAfter::parse(&value);
            if fault.is_none() {
                tracing::warn!(value = %value, "{ENV} is not WORKER:LINES; no fault injected");
            }
            fault
        }
        #[cfg(not(debug_assertions))]
        {
            None
        }
    }

    /// `W:N`.
    pub(super) fn parse(value: &str) -> Option<PanicAfter> {
        let (worker, lines) = value.trim().split_once(':')?;
        let spawn_fails = lines.trim() == "spawn";
        Some(PanicAfter {
            worker: worker.trim().parse().ok()?,
            lines: if spawn_fails {
                0
            } else {
                lines.trim().parse().ok()?
            },
            spawn_fails,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_worker_and_lines() {
        assert_eq!(
            PanicAfter::parse("1:40"),
            Some(PanicAfter {
                worker: 1,
                lines: 40,
                spawn_fails: false,
            })
        );
        assert_eq!(
            PanicAfter::parse("0:spawn").map(|f| (f.worker, f.spawn_fails)),
            Some((0, true))
        );
        assert_eq!(PanicAfter::parse("40"), None);
        assert_eq!(PanicAfter::parse("a:1"), None);
        assert_eq!(PanicAfter::parse("1:-3"), None);
    }
}
