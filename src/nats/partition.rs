//! Partitions: which subject a line goes to, and the partition count, fixed when the events
//! stream is created and stored with it (in its description), so every shipper and collector
//! agrees on it whatever flags they were started with.

use std::time::Duration;

use async_nats::jetstream::{self, stream};

use super::deploy::Deploy;
use super::{EVENTS_STREAM, FINDINGS_STREAM, NatsError};
use retryscope_core::turn_route;

/// Subject prefix of shipped lines.
pub const SUBJECT_PREFIX: &str = "retryscope.events";
const DESCRIPTION_PREFIX: &str = "retryscope events; partitions=";

/// The partition of a line: a stable hash of its top-level `turn` (partition 0 for a line
/// without one, so it is still correlated and reported somewhere).
pub fn partition_of(line: &[u8], partitions: u32) -> u32 {
    match turn_route::turn_hash(line) {
        Some(h) => (h % u64::from(partitions.max(1))) as u32,
        None => 0,
    }
}

/// The subject of partition `p`.
pub fn subject(p: u32) -> String {
    format!("{SUBJECT_PREFIX}.{p}")
}

/// The partition count stored in a stream description.
pub fn parse_description(description: &str) -> Option<u32> {
    description
        .strip_prefix(DESCRIPTION_PREFIX)?
        .trim()
        .parse()
        .ok()
        .filter(|n| *n > 0)
}

/// The events stream, created with `requested` partitions if it does not exist; returns the
/// partition count the stream was created with (which wins over `requested`).
pub async fn ensure_events_stream(
    js: &jetstream::Context,
    requested: u32,
    duplicate_window: Duration,
    deploy: &Deploy,
) -> Result<u32, NatsError> {
    if let Ok(mut s) = js.get_stream(EVENTS_STREAM).await {
        return stored_partitions(&mut s).await;
    }
    let created = js
        .create_stream(stream::Config {
            name: EVENTS_STREAM.to_string(),
            description: Some(format!("{DESCRIPTION_PREFIX}{}", requested.max(1))),
            subjects: vec![format!("{SUBJECT_PREFIX}.>")],
            duplicate_window,
            storage: stream::StorageType::File,
            num_replicas: deploy.replicas.max(1),
            max_age: deploy.events_max_age,
            ..Default::default()
        })
        .await;
    match created {
        Ok(mut s) => stored_partitions(&mut s).await,
        // Another shipper created it first: its count wins.
        Err(why) => {
            let mut s = js.get_stream(EVENTS_STREAM).await.map_err(|_| {
                NatsError::new(
                    "creating the events stream",
                    format!("{EVENTS_STREAM}: {why}"),
                )
            })?;
            stored_partitions(&mut s).await
        }
    }
}

async fn stored_partitions(s: &mut stream::Stream) -> Result<u32, NatsError> {
    let info = s
        .info()
        .await
        .map_err(|e| NatsError::new("reading the events stream", e))?;
    info.config
        .description
        .as_deref()
        .and_then(parse_description)
        .ok_or_else(|| {
            NatsError::new(
                "reading the events stream",
                "its description does not carry a partition count (not made by retryscope?)",
            )
        })
}

/// The findings stream: findings published with deterministic ids, so a replay after failover
/// inside `duplicate_window` is dropped by the server.
pub async fn ensure_findings_stream(
    js: &jetstream::Context,
    duplicate_window: Duration,
    deploy: &Deploy,
) -> Result<(), NatsError> {
    if js.get_stream(FINDINGS_STREAM).await.is_ok() {
        return Ok(());
    }
    let created = js
        .create_stream(stream::Config {
            name: FINDINGS_STREAM.to_string(),
            subjects: vec!["retryscope.findings.>".to_string()],
            duplicate_window,
            storage: stream::StorageType::File,
            num_replicas: deploy.replicas.max(1),
            max_age: deploy.findings_max_age,
            ..Default::default()
        })
        .await;
    match created {
        Ok(_) => Ok(()),
        // A peer starting at the same time created it first (the server then calls our
        // identical request "a different configuration"): opening decides.
        Err(e) => js
            .get_stream(FINDINGS_STREAM)
            .await
            .map(|_| ())
            .map_err(|_| {
                NatsError::new(
                    "creating the findings stream",
                    format!("{FINDINGS_STREAM}: {e}"),
                )
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn description_round_trips_and_rejects_others() {
        assert_eq!(
            parse_description(&format!("{DESCRIPTION_PREFIX}16")),
            Some(16)
        );
        assert_eq!(parse_description(&format!("{DESCRIPTION_PREFIX}0")), None);
        assert_eq!(parse_description("something else"), None);
    }

    #[test]
    fn a_turn_always_lands_in_one_partition() {
        let a = partition_of(br#"{"turn":"t-1","type":"turn_start"}"#, 8);
        let b = partition_of(br#"{"type":"tool_call","turn":"t-1","ts":5}"#, 8);
        assert_eq!(a, b);
        assert!(a < 8);
        assert_eq!(partition_of(b"garbage", 8), 0);
    }
}
