//! Fault injection for the collector's tests: make every partition checkpoint slow, as a
//! large state or a slow JetStream would.
//!
//! `RETRYSCOPE_FAULT_SLOW_CHECKPOINT_MS=N` makes each checkpoint that has something to store
//! wait `N` ms before it stores it. Read in debug builds only (`cfg(debug_assertions)`), as
//! `RETRYSCOPE_FAULT_WORKER_PANIC_AFTER` is (`engine/sharded/fault.rs` says why a cargo
//! feature or `cfg(test)` cannot serve the end-to-end tests): in a release build the variable
//! does nothing.

use std::time::Duration;

/// The variable's name.
#[cfg_attr(not(debug_assertions), allow(dead_code))]
pub(super) const SLOW_CHECKPOINT_ENV: &str = "RETRYSCOPE_FAULT_SLOW_CHECKPOINT_MS";

/// How long each checkpoint waits before it stores, as [`SLOW_CHECKPOINT_ENV`] asks; always
/// `None` in a release build.
pub(super) fn slow_checkpoint() -> Option<Duration> {
    #[cfg(debug_assertions)]
    {
        static SLOW: std::sync::OnceLock<Option<Duration>> = std::sync::OnceLock::new();
        *SLOW.get_or_init(|| {
            let value = std::env::var(SLOW_CHECKPOINT_ENV).ok()?;
            let ms = value.trim().parse::<u64>().ok();
            if ms.is_none() {
                tracing::warn!(value = %value, "{SLOW_CHECKPOINT_ENV} is not a number of ms");
            }
            ms.map(Duration::from_millis)
        })
    }
    #[cfg(not(debug_assertions))]
    {
        None
    }
}
