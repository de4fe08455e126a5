//! Setters of the series of the parts around the engine: the OTLP receiver's spool, the
//! proxy's streams and added latency, a `run --nats` collector's share of the cluster, and the
//! listeners' connections.

use super::Metrics;
use super::family::FamilyId as F;
use super::state::lock;

/// What a `run --nats` collector exports about its share of the cluster (counters since the
/// process started).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClusterStats {
    /// Partitions of the events stream.
    pub partitions: u32,
    /// Partitions owned now.
    pub owned: u32,
    /// Leases acquired.
    pub takeovers: u64,
    /// Messages correlated and not yet covered by a stored checkpoint.
    pub checkpoint_lag: u64,
    /// Findings not published or not acknowledged.
    pub publish_failures: u64,
    /// Partition checkpoints stored.
    pub checkpoint_writes: u64,
    /// Partition checkpoints that failed.
    pub checkpoint_failures: u64,
    /// Findings too large to publish (dead letters).
    pub dead_letters: u64,
    /// Held events a take could not read back from the events stream.
    pub held_lost: u64,
}

impl Metrics {
    /// Count a connection refused or closed by a listener (both labels from closed sets in
    /// [`crate::listener`]).
    pub fn listener_connection_refused(&self, listener: &str, reason: &str) {
        lock(&self.inner).add(F::ListenerRefused, &[listener, reason], 1.0);
    }

    /// Connections open on a listener.
    pub fn set_listener_connections(&self, listener: &str, open: u64) {
        lock(&self.inner)
            .table
            .set(F::ListenerOpen as usize, &[listener], open as f64);
    }

    /// Count one model stream `retryscope proxy` forwarded and tracked.
    pub fn inc_proxy_streams(&self) {
        lock(&self.inner).add(F::ProxyStreams, &[], 1.0);
    }

    /// Count lines `retryscope proxy` dropped because its engine had stopped taking them.
    pub fn inc_proxy_feed_lost(&self, lines: u64) {
        lock(&self.inner).add(F::ProxyFeedLost, &[], lines as f64);
    }

    /// Observe the time `retryscope proxy` held one upstream chunk.
    pub fn observe_proxy_latency(&self, seconds: f64) {
        if seconds.is_finite() && seconds >= 0.0 {
            lock(&self.inner)
                .table
                .observe(F::ProxyLatency as usize, &[], seconds);
        }
    }

    /// Count a stream cut on purpose by `retryscope proxy`.
    /// `tools`: whether the request cut offered the model tools.
    pub fn inc_proxy_cut(&self, point: &'static str, how: &'static str, tools: bool) {
        let tools = if tools { "true" } else { "false" };
        lock(&self.inner).add(F::ProxyCuts, &[point, how, tools], 1.0);
    }

    /// Count an upstream failure of `retryscope proxy`.
    pub fn inc_proxy_upstream_errors(&self) {
        lock(&self.inner).add(F::ProxyUpstreamErrors, &[], 1.0);
    }

    /// Count a non-streaming answer `retryscope proxy` passed through unobserved.
    pub fn inc_proxy_unobserved(&self) {
        lock(&self.inner).add(F::ProxyUnobserved, &[], 1.0);
    }

    /// Count one OTLP request received (`signal`, `protocol` and `outcome` come from closed
    /// sets in `source::otlp`) and the records it carried when accepted.
    pub fn otlp_request(&self, signal: &str, protocol: &str, outcome: &str, records: u64) {
        let mut inner = lock(&self.inner);
        inner.add(F::OtlpReceived, &[signal, protocol, outcome], 1.0);
        if records > 0 {
            inner.add(F::OtlpRecords, &[signal], records as f64);
        }
    }

    /// The OTLP receiver's queue depth.
    pub fn set_otlp_queue(&self, records: u64, bytes: u64) {
        let mut inner = lock(&self.inner);
        inner
            .table
            .set(F::OtlpQueueRecords as usize, &[], records as f64);
        inner
            .table
            .set(F::OtlpQueueBytes as usize, &[], bytes as f64);
    }

    /// Set the cluster series of `run --nats` (instance-wide, set after the owned partitions'
    /// sum is restored): they are this process's own, never a partition's.
    pub fn set_cluster(&self, c: &ClusterStats) {
        let mut inner = lock(&self.inner);
        let t = &mut inner.table;
        t.set(F::NatsPartitions as usize, &[], f64::from(c.partitions));
        t.set(F::NatsOwned as usize, &[], f64::from(c.owned));
        t.set(F::NatsTakeovers as usize, &[], c.takeovers as f64);
        t.set(F::NatsCheckpointLag as usize, &[], c.checkpoint_lag as f64);
        t.set(
            F::NatsPublishFailures as usize,
            &[],
            c.publish_failures as f64,
        );
        t.set(
            F::CheckpointWrites as usize,
            &[],
            c.checkpoint_writes as f64,
        );
        t.set(
            F::CheckpointFailures as usize,
            &[],
            c.checkpoint_failures as f64,
        );
        t.set(F::NatsDeadLetters as usize, &[], c.dead_letters as f64);
        t.set(F::NatsHeldLost as usize, &[], c.held_lost as f64);
    }

    /// The OTLP receiver's spool on disk.
    pub fn set_otlp_spool_bytes(&self, bytes: u64) {
        lock(&self.inner)
            .table
            .set(F::OtlpSpoolBytes as usize, &[], bytes as f64);
    }
}
