//! Partitions: which subject a line goes to, and the partition count, fixed when the events
//! stream is created and stored with it (in its description), so every shipper and collector
//! agrees on it whatever flags they were started with.

use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use async_nats::jetstream::{self, stream};

use super::deploy::Deploy;
use super::{EVENTS_STREAM, FINDINGS_STREAM, NatsError};
use retryscope_core::turn_route;

/// Subject prefix of shipped lines.
pub const SUBJECT_PREFIX: &str = "retryscope.events";
const DESCRIPTION_PREFIX: &str = "retryscope events; partitions=";

/// The partition of everything that may feed the session joiner: a shipped line without a
/// turn id (an agent's stream-json, a telemetry outfile: their sessions are only known by
/// decoding them) and a received OTLP session of gemini-cli's family ([`OtlpRoutes`]). A
/// session's two outputs are joined only where both are read, so they meet here (as they
/// meet on one worker of `run --workers`).
pub const JOINED_PARTITION: u32 = 0;

/// The partition of a line: a stable hash of its top-level `turn` ([`JOINED_PARTITION`] for a
/// line without one).
pub fn partition_of(line: &[u8], partitions: u32) -> u32 {
    match turn_route::turn_hash(line) {
        Some(h) => (h % u64::from(partitions.max(1))) as u32,
        None => JOINED_PARTITION,
    }
}

/// Streams remembered as gemini-cli's family, at most (the oldest forgotten first; a
/// forgotten stream's later records are routed by the record alone).
const REMEMBERED_STREAMS: usize = 65_536;

/// Where a received OTLP record goes: a record its decoder gives to the session joiner
/// ([`retryscope_core::decode::otlp::join_route`]), and every later record of a stream that
/// has sent a family event, to [`JOINED_PARTITION`] (where shipped stream-json is read); any
/// other record to its stream's partition ([`partition_of_stream`]), so sessions that are
/// never joined (Claude Code's, Codex's, GenAI conventions) spread over the partitions.
pub struct OtlpRoutes {
    partitions: u32,
    remembered: HashSet<String>,
    order: VecDeque<String>,
}

impl OtlpRoutes {
    /// Routes over `partitions`.
    pub fn new(partitions: u32) -> Self {
        OtlpRoutes {
            partitions: partitions.max(1),
            remembered: HashSet::new(),
            order: VecDeque::new(),
        }
    }

    /// The partition of the record `line` of `stream`.
    pub fn partition(&mut self, stream: &str, line: &[u8]) -> u32 {
        use retryscope_core::decode::otlp::{JoinRoute, join_route};
        if self.remembered.contains(stream) {
            return JOINED_PARTITION;
        }
        match join_route(line) {
            JoinRoute::No => partition_of_stream(stream, self.partitions),
            JoinRoute::Record => JOINED_PARTITION,
            JoinRoute::Stream => {
                if self.order.len() >= REMEMBERED_STREAMS
                    && let Some(old) = self.order.pop_front()
                {
                    self.remembered.remove(&old);
                }
                self.remembered.insert(stream.to_owned());
                self.order.push_back(stream.to_owned());
                JOINED_PARTITION
            }
        }
    }
}

/// The partition of a whole stream (an OTLP session `otlp:<service>/<session>`): a stable
/// hash of its name, so all its records, in order, are read by one owner.
pub fn partition_of_stream(name: &str, partitions: u32) -> u32 {
    (retryscope_core::fasthash::fnv1a(name.as_bytes()) % u64::from(partitions.max(1))) as u32
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

    /// The records of a real capture (the OTLP/JSON bodies an agent exported to the mock
    /// collector of e2e/agents), as the receiver writes them: (stream, line).
    fn captured(agent: &str, case: &str) -> Vec<(String, Vec<u8>)> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/agents")
            .join(agent)
            .join(case)
            .join("otlp");
        let mut bodies: Vec<_> = std::fs::read_dir(&dir)
            .expect("a capture")
            .map(|e| e.expect("entry").path())
            .collect();
        bodies.sort();
        let mut out = Vec::new();
        for body in bodies {
            let name = body.display().to_string();
            let bytes = std::fs::read(&body).expect("body");
            if name.ends_with("-v1-logs.json") {
                crate::source::otlp::json::logs(&bytes, &mut out).expect("logs");
            } else if name.ends_with("-v1-traces.json") {
                crate::source::otlp::json::spans(&bytes, &mut out).expect("spans");
            }
        }
        assert!(!out.is_empty(), "{agent}/{case}: no records");
        out.into_iter().map(|r| (r.stream, r.line)).collect()
    }

    #[test]
    fn gemini_cli_families_records_meet_shipped_stream_json_and_other_agents_spread() {
        let partitions = 64;
        // gemini-cli and its fork Qwen Code: whatever the session's name hashes to, every
        // record the decoder gives the session joiner lands where stream-json is shipped.
        for agent in ["gemini-cli", "qwen-code"] {
            let mut routes = OtlpRoutes::new(partitions);
            let mut joined = 0;
            for (stream, line) in captured(agent, "otlp-after-tool-reset") {
                let p = routes.partition(&stream, &line);
                let by_name = partition_of_stream(&stream, partitions);
                if p == JOINED_PARTITION {
                    joined += 1;
                } else {
                    assert_eq!(p, by_name, "{agent}: {}", String::from_utf8_lossy(&line));
                }
                // Every request, response and error of the family is joined.
                let text = String::from_utf8_lossy(&line);
                if text.contains(".api_request") || text.contains(".api_response") {
                    assert_eq!(p, JOINED_PARTITION, "{agent}: {text}");
                }
            }
            assert!(joined > 0, "{agent}: nothing routed to the join");
        }
        // Agents whose sessions are never joined go by their session's name.
        for agent in ["claude-code", "codex"] {
            let mut routes = OtlpRoutes::new(partitions);
            for (stream, line) in captured(agent, "otlp-clean") {
                assert_eq!(
                    routes.partition(&stream, &line),
                    partition_of_stream(&stream, partitions),
                    "{agent}: {}",
                    String::from_utf8_lossy(&line)
                );
            }
        }
    }

    #[test]
    fn a_fork_is_remembered_from_its_first_family_event_on() {
        let rec = |name: &str| {
            format!(
                r#"{{"otlp":"log","service":"my-fork","scope":"s","body":"{name}","attributes":{{"event.name":"{name}"}}}}"#
            )
            .into_bytes()
        };
        let stream = "otlp:my-fork/s1";
        let by_name = partition_of_stream(stream, 1024);
        assert_ne!(by_name, JOINED_PARTITION, "pick another name");
        let mut routes = OtlpRoutes::new(1024);
        // Before its first family event the decoder does not know the fork: nor do routes.
        assert_eq!(routes.partition(stream, &rec("my_fork.config")), by_name);
        assert_eq!(
            routes.partition(stream, &rec("my_fork.api_request")),
            JOINED_PARTITION
        );
        assert_eq!(
            routes.partition(stream, &rec("my_fork.user_prompt")),
            JOINED_PARTITION,
            "remembered"
        );
        assert_eq!(
            routes.partition("otlp:my-fork/s2", &rec("my_fork.config")),
            partition_of_stream("otlp:my-fork/s2", 1024),
            "per stream, as the decoder"
        );
    }
}
