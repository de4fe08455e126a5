//! Past one machine: retryscope over NATS JetStream.
//!
//! `ship` tails files on each host and publishes every line to `retryscope.events.<partition>`,
//! the partition being a stable hash of the line's turn id ([`partition`]); `run --nats` is a
//! collector that owns some partitions at a time ([`lease`]), correlates them through the one
//! ingest path, checkpoints each partition's correlator state with the stream sequence it
//! covers into a key-value bucket ([`state`]) and publishes findings with deterministic message
//! ids, so a new owner resumes exactly where the old one stopped ([`collect`]).
//!
//! Only JetStream features of server 2.9 are used (async-nats without the `server_2_10`+
//! features): streams, pull consumers, key-value buckets, the duplicate window.

pub mod collect;
pub mod deploy;
mod fault;
pub mod lease;
mod membership;
mod owned;
pub mod partition;
mod partition_source;
pub mod receive;
pub mod ship;
pub mod state;
mod tend;

/// The stream of shipped lines.
pub const EVENTS_STREAM: &str = "RETRYSCOPE_EVENTS";
/// The stream of findings, deduplicated by message id.
pub const FINDINGS_STREAM: &str = "RETRYSCOPE_FINDINGS";
/// Header naming the source stream of a shipped line (`<source id>:<path>`).
pub const STREAM_HEADER: &str = "Retryscope-Stream";
/// Header of a clock message: no line, only its publish time, which advances the partition's
/// clock (see `nats/partition_source.rs`).
pub const TICK_HEADER: &str = "Retryscope-Tick";
/// Header of a batch: how many lines (joined by `\n`) its payload holds. A message without it
/// is one line (shippers before batches).
pub const LINES_HEADER: &str = "Retryscope-Lines";

/// A NATS or JetStream operation failed.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {message}")]
pub struct NatsError {
    /// What was being done.
    pub what: &'static str,
    /// The client's message.
    pub message: String,
}

impl NatsError {
    /// An error while doing `what`.
    pub fn new(what: &'static str, e: impl std::fmt::Display) -> Self {
        NatsError {
            what,
            message: e.to_string(),
        }
    }
}

/// The server's largest message. Read when needed, not at connect: `connect` returns before
/// the connection is made (it retries by itself), and until then the client knows no limit
/// (0), so the server's default (1 MiB) stands in.
pub fn max_payload(client: &async_nats::Client) -> usize {
    match client.server_info().max_payload {
        0 => 1024 * 1024,
        n => n,
    }
}

/// Hand `each` every message a consumer made with `config` (ack none, removed after) on
/// `stream` has waiting when it is made, and no more (nor past one `each` answers `false`
/// to): a consumer says at once how many (none
/// costs one request, not a fetch's expiry), and a fetch that knows how many wait is answered
/// at once, its expiry only ending a request lost in a server restart. A consumer scans the
/// stream, not the server's per-subject index (see `state.rs` on nats-server 2.9).
pub(crate) async fn read_pending(
    stream: &async_nats::jetstream::stream::Stream,
    config: async_nats::jetstream::consumer::pull::Config,
    what: &'static str,
    mut each: impl FnMut(&async_nats::jetstream::Message) -> bool,
) -> Result<(), NatsError> {
    use async_nats::jetstream::consumer::{AckPolicy, PullConsumer, pull};
    use futures_util::StreamExt;
    let reader: PullConsumer = stream
        .create_consumer(pull::Config {
            ack_policy: AckPolicy::None,
            inactive_threshold: std::time::Duration::from_secs(60),
            ..config
        })
        .await
        .map_err(|e| NatsError::new(what, e))?;
    let mut pending = reader.cached_info().num_pending;
    let mut more = true;
    while pending > 0 && more {
        let mut batch = reader
            .fetch()
            .max_messages(usize::try_from(pending).unwrap_or(1_000).min(1_000))
            .expires(std::time::Duration::from_secs(1))
            .messages()
            .await
            .map_err(|e| NatsError::new(what, e))?;
        let mut n = 0u64;
        while let Some(m) = batch.next().await {
            let m = m.map_err(|e| NatsError::new(what, e))?;
            n += 1;
            if more {
                more = each(&m);
            }
        }
        if n == 0 {
            return Err(NatsError::new(
                what,
                format!("{pending} messages could not be read"),
            ));
        }
        pending = pending.saturating_sub(n);
    }
    let name = reader.cached_info().name.clone();
    let _ = stream.delete_consumer(&name).await;
    Ok(())
}

/// CPU work of a partition (correlating a batch, encoding a checkpoint), with one of the
/// instance's `permits` (one per core): on a multi-thread runtime it runs in place of a worker
/// thread that tokio replaces meanwhile, so the instance's lease loop, its connection and the
/// other partitions' tasks are never starved by a partition with a large batch or state.
///
/// The permits keep the threads doing such work to the cores. Without them a collector
/// catching up a backlog ran one per partition (16 on 2 cores), and the connection's task,
/// sharing the cores with them, read replies so late that lease renewals, checkpoint reads
/// and finding acknowledgements timed out and fetches were abandoned half delivered.
pub(crate) async fn cpu<T>(permits: &tokio::sync::Semaphore, f: impl FnOnce() -> T) -> T {
    // Never closed; were it, the work would run without one.
    let _permit = permits.acquire().await;
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// Milliseconds since the epoch, for leases and arrival times.
pub(crate) fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A key-value bucket (history 1, file storage, `deploy.replicas`), opened or created.
///
/// Created as its backing stream directly, with the key-value conventions (`KV_<bucket>`,
/// `$KV.<bucket>.>`, rollup, direct get, discard new): async-nats 0.50's `create_key_value`
/// first asks for the account's info, whose 2.9 reply it cannot parse.
pub async fn kv_bucket(
    js: &async_nats::jetstream::Context,
    bucket: &str,
    deploy: &deploy::Deploy,
) -> Result<async_nats::jetstream::kv::Store, NatsError> {
    use async_nats::jetstream::stream;
    if let Ok(s) = js.get_key_value(bucket).await {
        return Ok(s);
    }
    let created = js
        .create_stream(stream::Config {
            name: format!("KV_{bucket}"),
            subjects: vec![format!("$KV.{bucket}.>")],
            max_messages_per_subject: 1,
            max_message_size: -1,
            storage: stream::StorageType::File,
            allow_rollup: true,
            deny_delete: true,
            allow_direct: true,
            discard: stream::DiscardPolicy::New,
            num_replicas: deploy.replicas.max(1),
            ..Default::default()
        })
        .await;
    let created = created.map(|_| ()).map_err(|e| e.to_string());
    // A peer may have created it at the same time; opening decides (and a refusal to
    // create, e.g. more replicas than servers, is what the error says).
    js.get_key_value(bucket).await.map_err(|e| match &created {
        Err(why) => NatsError::new("creating a key-value bucket", format!("{bucket}: {why}")),
        Ok(()) => NatsError::new("opening a key-value bucket", e),
    })
}
