//! The metric families: names, help, types, label names and buckets, in one table.
//!
//! Names and label sets are a public contract (dashboards and alert rules depend on them).

/// Buckets of `retryscope_attempts_per_turn`.
pub const ATTEMPTS_BUCKETS: &[f64] = &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0];

/// Buckets of the duration histograms, in seconds.
pub const DURATION_BUCKETS: &[f64] = &[
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];

/// Buckets of `retryscope_proxy_added_latency_seconds`: the proxy holds a chunk for
/// microseconds (framing and the tracker), so the buckets start at 10µs.
pub const PROXY_LATENCY_BUCKETS: &[f64] = &[
    0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.05,
];

/// The type of a family.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// A monotonic counter.
    Counter,
    /// A gauge.
    Gauge,
    /// A histogram with these upper bounds (`+Inf` implied).
    Histogram(&'static [f64]),
}

/// One metric family.
#[derive(Debug, Clone, Copy)]
pub struct Family {
    /// Full name, `retryscope_` prefix included.
    pub name: &'static str,
    /// HELP text.
    pub help: &'static str,
    /// Type.
    pub kind: Kind,
    /// Label names, in exposition order.
    pub labels: &'static [&'static str],
}

macro_rules! families {
    ($($id:ident => $name:literal, $kind:expr, [$($label:literal),*], $help:literal;)*) => {
        /// A family: its index in [`FAMILIES`] (the variants name the table's rows).
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[allow(missing_docs)]
        pub enum FamilyId { $($id),* }

        /// Every family, indexed by [`FamilyId`].
        pub const FAMILIES: &[Family] = &[
            $(Family { name: $name, help: $help, kind: $kind, labels: &[$($label),*] }),*
        ];
    };
}

use Kind::{Counter, Gauge, Histogram};

families! {
    Turns => "retryscope_turns_total", Counter, ["agent", "model", "provider", "status"],
        "Turns closed, by final status.";
    Attempts => "retryscope_attempts_total", Counter, ["model", "provider", "outcome"],
        "Attempts of closed turns, by outcome (model is the attempt's, else the turn's).";
    Retries => "retryscope_retries_total", Counter, ["agent", "model", "provider", "reason"],
        "Retries, counted when the retry is seen.";
    AttemptsPerTurn => "retryscope_attempts_per_turn", Histogram(ATTEMPTS_BUCKETS), ["model", "provider"],
        "Attempts per closed turn.";
    BilledTokens => "retryscope_billed_tokens_total", Counter,
        ["model", "provider", "token_type", "attempt_outcome", "usage_source"],
        "Billed tokens of closed turns' attempts. input excludes cached_input and cache_write; output includes reasoning.";
    BilledCost => "retryscope_billed_cost_usd_total", Counter, ["agent", "model", "provider", "attempt_outcome"],
        "Billed USD of closed turns' priced attempts.";
    ToolExecutions => "retryscope_tool_executions_total", Counter, ["tool", "attempt_outcome"],
        "Tool executions of closed turns, by the outcome of the attempt that called the tool.";
    Findings => "retryscope_findings_total", Counter, ["agent", "kind", "severity", "tool"],
        "Findings, counted when they become known.";
    TurnDuration => "retryscope_turn_duration_seconds", Histogram(DURATION_BUCKETS), ["model", "provider"],
        "Duration of closed turns (first to last event time).";
    AttemptDuration => "retryscope_attempt_duration_seconds", Histogram(DURATION_BUCKETS),
        ["model", "provider", "outcome"],
        "Duration of attempts of closed turns (first to last event time).";
    EventsRead => "retryscope_events_read_total", Counter, ["source"],
        "Lines (records) read from sources.";
    EventsDecoded => "retryscope_events_decoded_total", Counter, ["source"],
        "Events decoded and correlated.";
    BadLines => "retryscope_bad_lines_total", Counter, ["source", "reason"],
        "Lines that could not be decoded, by reason.";
    UnknownEvents => "retryscope_unknown_events_total", Counter, ["source"],
        "Events of a type this version does not know (skipped).";
    InputBlindSpots => "retryscope_input_blind_spots", Gauge, ["input_kind", "cannot_show"],
        "Inputs read since start that cannot show cannot_show (attempts, cuts, executions, displayed_text), when no other input read shows it (0 otherwise).";
    OpenTurns => "retryscope_open_turns", Gauge, [],
        "Turns currently open in the correlator.";
    EvictedTurns => "retryscope_evicted_turns_total", Counter, [],
        "Turns evicted to bound memory.";
    LateEvents => "retryscope_late_events_total", Counter, [],
        "Events that arrived out of order.";
    FilesWatched => "retryscope_files_watched", Gauge, [],
        "Files currently tailed.";
    FileRotations => "retryscope_file_rotations_total", Counter, [],
        "Tailed files that were rotated.";
    FileTruncations => "retryscope_file_truncations_total", Counter, [],
        "Tailed files that were truncated.";
    FileErrors => "retryscope_file_errors_total", Counter, ["kind"],
        "Problems with tailed files: emfile, enfile, eacces (an open or directory listing failed for want of descriptors or permission; not a rotation: retried every poll), read (another read or open failure; retried), checkpoint_mismatch (a checkpointed inode holds another file), checkpoint_orphaned (a checkpointed file is gone: its unread lines are lost).";
    AfterCloseEvents => "retryscope_after_close_events_total", Counter, [],
        "Events for turns already closed (dropped).";
    SessionsForgotten => "retryscope_sessions_forgotten_total", Counter, [],
        "Quiet sessions whose decoder state was dropped to keep at most 100,000 and 64 MiB (the longest quiet first; states are kept six hours otherwise): one that sends again starts afresh, its next model call named as its first.";
    SourceLag => "retryscope_source_lag_bytes", Gauge, ["source"],
        "Bytes written to a source but not yet read.";
    CheckpointWrites => "retryscope_checkpoint_writes_total", Counter, [],
        "Checkpoints written successfully.";
    CheckpointFailures => "retryscope_checkpoint_failures_total", Counter, [],
        "Checkpoint writes that failed.";
    StreamStatesLeftOut => "retryscope_checkpoint_stream_states_left_out", Gauge, [],
        "Streams whose decoder state the last checkpoint left out (past its 10,000 most recently active): after a restart they start afresh.";
    OtlpExported => "retryscope_otlp_spans_exported_total", Counter, [],
        "Spans exported over OTLP.";
    OtlpDropped => "retryscope_otlp_spans_dropped_total", Counter, [],
        "Spans dropped before export.";
    OtlpFailures => "retryscope_otlp_export_failures_total", Counter, [],
        "Failed OTLP export calls.";
    OtlpReceived => "retryscope_otlp_receiver_requests_total", Counter, ["signal", "protocol", "outcome"],
        "OTLP export requests received (run --otlp-listen, --otlp-grpc-listen), by signal (logs, traces, metrics), protocol (http_json, http_protobuf, grpc) and outcome: accepted, or why not (busy, too_large, malformed, unauthorized, unsupported, spool_error); only accepted requests were acknowledged.";
    OtlpRecords => "retryscope_otlp_receiver_records_total", Counter, ["signal"],
        "Records in accepted OTLP requests: log records, spans, and metric data points (acknowledged and ignored).";
    OtlpQueueRecords => "retryscope_otlp_receiver_queue_records", Gauge, [],
        "OTLP records accepted and waiting for the engine.";
    OtlpQueueBytes => "retryscope_otlp_receiver_queue_bytes", Gauge, [],
        "Bytes of OTLP records accepted and waiting for the engine (bounded; beyond it requests are refused as retryable).";
    OtlpSpoolBytes => "retryscope_otlp_receiver_spool_bytes", Gauge, [],
        "Bytes of the OTLP receiver's write-ahead spool on disk (--data-dir): acknowledged records no checkpoint has released yet.";
    ProxyCuts => "retryscope_proxy_injected_cuts_total", Counter, ["point", "how", "tools"],
        "Streams `retryscope proxy` cut on purpose (--inject), by cut point and how.";
    ProxyUpstreamErrors => "retryscope_proxy_upstream_errors_total", Counter, [],
        "Upstream requests of `retryscope proxy` that failed to connect or broke mid-body.";
    ProxyStreams => "retryscope_proxy_streams_total", Counter, [],
        "Model requests `retryscope proxy` forwarded and tracked (one attempt each).";
    ProxyLatency => "retryscope_proxy_added_latency_seconds", Histogram(PROXY_LATENCY_BUCKETS), [],
        "Time `retryscope proxy` held each upstream chunk of a model stream before forwarding it (framing and the tracker).";
    NatsPartitions => "retryscope_nats_partitions", Gauge, [],
        "Partitions of the events stream (run --nats; 0 otherwise).";
    NatsOwned => "retryscope_nats_partitions_owned", Gauge, [],
        "Partitions this collector owns (run --nats).";
    NatsTakeovers => "retryscope_nats_lease_takeovers_total", Counter, [],
        "Partition leases this collector acquired, free or expired (run --nats).";
    NatsCheckpointLag => "retryscope_nats_checkpoint_lag_messages", Gauge, [],
        "Messages of the owned partitions correlated but not yet covered by a stored checkpoint, just before the last round of checkpoints: what a new owner would replay (run --nats).";
    NatsPublishFailures => "retryscope_nats_findings_publish_failures_total", Counter, [],
        "Findings that could not be published to the findings stream or were not acknowledged (the partition is given up and replayed; run --nats).";
    NatsDeadLetters => "retryscope_nats_dead_letters_total", Counter, [],
        "Findings larger than the NATS server's largest message: written to this collector's findings output only, logged, and the partition moves on (run --nats).";
    NatsHeldLost => "retryscope_nats_held_events_lost_total", Counter, [],
        "Events of turns held to settle (--settle-secs) that a new owner could not read back from the events stream: their messages were gone (the stream's max age, or a purge). They are missing from their turns; logged (run --nats).";
    NatsReleasedEarly => "retryscope_nats_held_turns_released_early_total", Counter, [],
        "Turns held to settle (--settle-secs) released before they were quiet, because a partition's hold was full (200,000 events): a late part of one (another host's half) is correlated after the rest: out of time order, or after the turn closed. Logged (run --nats).";
    ProxyUnobserved => "retryscope_proxy_unobserved_answers_total", Counter, [],
        "Non-streaming answers over the proxy's 8 MiB cap, passed to the client unobserved.";
    ProxyFeedLost => "retryscope_proxy_feed_lost_lines_total", Counter, [],
        "Lines `retryscope proxy` built after its engine had stopped taking them (dropped; their responses were still proxied).";
    ListenerRefused => "retryscope_listener_connections_refused_total", Counter, ["listener", "reason"],
        "Connections a listener (metrics, otlp_http, otlp_grpc, proxy) refused or closed: at accept over a cap (listener_cap, peer_cap), or later for a timeout (handshake_timeout, header_timeout, idle_timeout, body_timeout).";
    ListenerOpen => "retryscope_listener_connections", Gauge, ["listener"],
        "Connections open on a listener (metrics, otlp_http, otlp_grpc, proxy).";
    LabelOverflow => "retryscope_label_overflow_total", Counter, ["label"],
        "Label values replaced by \"other\" because the label reached its cap.";
    BuildInfo => "retryscope_build_info", Gauge, ["version"],
        "Always 1; the version label is the collector's version.";
}

/// The family with this name.
pub fn by_name(name: &str) -> Option<usize> {
    FAMILIES.iter().position(|f| f.name == name)
}
