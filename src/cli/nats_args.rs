//! The NATS flags: the deployment's, shared by `ship` and `run --nats` (credentials, TLS, and
//! the replicas and retention of what retryscope creates; docs/scaling.md), and a collector's.

use std::path::PathBuf;
use std::time::Duration;

use retryscope::nats::deploy::{DEFAULT_EVENTS_MAX_AGE, DEFAULT_FINDINGS_MAX_AGE, Deploy};

/// How to reach the NATS servers and what to create on them.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct NatsArgs {
    /// NATS credentials file (user JWT and seed), for servers in operator mode. A user and
    /// password go in the URL: `nats://user:password@host:4222`.
    #[arg(long, value_name = "FILE")]
    nats_creds: Option<PathBuf>,
    /// CA certificates (PEM) that sign the NATS server's certificate; connects with TLS.
    #[arg(long, value_name = "FILE")]
    nats_ca: Option<PathBuf>,
    /// Client certificate (PEM) for NATS servers that verify clients (with --nats-key).
    #[arg(long, value_name = "FILE", requires = "nats_key")]
    nats_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "nats_cert")]
    nats_key: Option<PathBuf>,
    /// Replicas of the streams and buckets retryscope creates (3 on a clustered JetStream)
    /// [default: 1].
    #[arg(long, value_name = "N")]
    nats_replicas: Option<usize>,
    /// Hours shipped lines are kept in JetStream when retryscope creates the stream; 0 keeps
    /// them until the server's limits [default: 168].
    #[arg(long, value_name = "HOURS")]
    nats_events_max_age_hours: Option<u64>,
    /// Hours findings are kept when retryscope creates their stream; 0 keeps them forever
    /// [default: 720].
    #[arg(long, value_name = "HOURS")]
    nats_findings_max_age_hours: Option<u64>,
}

impl NatsArgs {
    /// The first flag given, for a command that has no NATS to apply it to.
    pub(crate) fn any_given(&self) -> Option<&'static str> {
        [
            (self.nats_creds.is_some(), "--nats-creds"),
            (self.nats_ca.is_some(), "--nats-ca"),
            (self.nats_cert.is_some(), "--nats-cert"),
            (self.nats_replicas.is_some(), "--nats-replicas"),
            (
                self.nats_events_max_age_hours.is_some(),
                "--nats-events-max-age-hours",
            ),
            (
                self.nats_findings_max_age_hours.is_some(),
                "--nats-findings-max-age-hours",
            ),
        ]
        .into_iter()
        .find_map(|(given, flag)| given.then_some(flag))
    }

    /// The deployment at `url` with these flags.
    pub(crate) fn deploy(&self, url: &str) -> anyhow::Result<Deploy> {
        let replicas = self.nats_replicas.unwrap_or(1);
        if !(1..=5).contains(&replicas) {
            anyhow::bail!("--nats-replicas must be 1 to 5 (JetStream's range), not {replicas}");
        }
        let hours = |h: Option<u64>, default: Duration| {
            h.map_or(default, |h| Duration::from_secs(h.saturating_mul(3600)))
        };
        Ok(Deploy {
            creds: self.nats_creds.clone(),
            ca: self.nats_ca.clone(),
            client_cert: self.nats_cert.clone().zip(self.nats_key.clone()),
            replicas,
            events_max_age: hours(self.nats_events_max_age_hours, DEFAULT_EVENTS_MAX_AGE),
            findings_max_age: hours(self.nats_findings_max_age_hours, DEFAULT_FINDINGS_MAX_AGE),
            ..Deploy::plain(url)
        })
    }
}

/// A collector's own flags (`run --nats`).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct CollectorArgs {
    /// With --nats: this instance's name among the collectors, the same across restarts;
    /// two live collectors may not share one [default: the host name].
    #[arg(long, value_name = "NAME")]
    pub(crate) instance: Option<String>,
    /// With --nats: partition lease in seconds (takeover time when an instance dies).
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    pub(crate) lease_secs: u64,
    /// With --nats: partition checkpoint interval in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    pub(crate) checkpoint_ms: u64,
    /// With --nats: hold each turn until it has been quiet this long (seconds of its
    /// partition's clock), then correlate its events in time order, so a part shipped late by
    /// another host still takes its place; 0 correlates lines as they arrive.
    #[arg(long, value_name = "SECS", default_value_t = 5)]
    pub(crate) settle_secs: u64,
}
