//! Which subsystems pre-register metric label values in a process's [`Metrics`]: the list
//! only. Each subsystem owns its values and registers them beside the code that counts them:
//! the file tailer's error kinds (`internal_events::TailerReport`, the tailer's metrics side:
//! the tailer itself never touches metrics), the proxy's cut points
//! (`internal_events::ProxyCut`), the OTLP receiver's signals and protocols
//! (`internal_events::OtlpReport`, the receiver's metrics side), the listeners and their refusal reasons (`listener::Gate`).
//!
//! [`Metrics::new`] registers all of them in every process, whichever subsystems it runs:
//! every family is on every command's first scrape (a family without a series is not exposed
//! at all), which the dashboards and CI's scrape check of a `run` over files rely on.

use crate::internal_events::{OtlpReport, ProxyCut, TailerReport};
use crate::listener::Gate;
use crate::sink::metrics::Metrics;

/// Register every subsystem's zero series in `metrics`.
pub fn preregister(metrics: &Metrics) {
    TailerReport::preregister(metrics);
    OtlpReport::preregister(metrics);
    Gate::preregister(metrics);
    ProxyCut::preregister(metrics);
}
