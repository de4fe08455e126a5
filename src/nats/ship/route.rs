//! Which partitions a shipped file's lines go to, decided once per file from its format and
//! kept in the shipper's checkpoint, so that a stream is never split between partitions; and
//! standard input's (`ship -`), decided the same way from the head of the pipe.
//!
//! A collector can read a stream only where all of it arrives: a provider's SSE, an agent's
//! own output or a telemetry file is decoded with state carried from line to line. Native
//! lines carry their turn id, so each goes to its turn's partition ([`FileRoute::ByTurn`]);
//! a file that may feed the gemini-cli session joiner (gemini-cli's and its forks' telemetry
//! and stream-json, Claude Code's shape) goes to [`JOINED_PARTITION`], where the other
//! output of its session is read too ([`FileRoute::Joined`]); any other format goes whole to
//! the partition its identity hashes to ([`FileRoute::Stream`]), so provider streams and
//! agents' files spread over the partitions instead of all landing on partition 0.
//!
//! The format is read off the head of the file on disk (the file the tailer reads, checked
//! by device and inode) with the core's own sniffing (`decode::detect::sniff`, the one the
//! collector's ingest path uses). While a young file's head does not decide yet, its lines
//! wait, at most [`HOLD`]; then the best guess decides. A file shipped before routes were
//! kept (a checkpoint without them) stays on partition 0, where its earlier lines went.
//! Standard input has no file to read again: [`PipeRoute`] keeps the first bytes read from
//! the pipe as its head, and the same decision ([`route_of_head`]) and wait apply; its
//! identity is `<source id>:stdin`, and having no checkpoint, its route is decided afresh
//! by every shipper.

use std::collections::HashMap;
use std::io::Read as _;
use std::path::Path;
use std::time::{Duration, Instant};

use retryscope_core::decode::{self, Format};
use retryscope_core::ingest::feeds_joiner;

use super::super::partition::{JOINED_PARTITION, partition_of, partition_of_stream};
use crate::source::file::FileCheckpoint;

/// How long a file's lines wait for its head to decide its format.
pub(in crate::nats) const HOLD: Duration = Duration::from_secs(2);

/// Where a file's lines go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub(in crate::nats) enum FileRoute {
    /// Native: each line to the partition of its top-level `turn` (partition 0 without one).
    ByTurn,
    /// May feed the session joiner: all to [`JOINED_PARTITION`].
    Joined,
    /// Any other format: all to the partition of the file's identity.
    Stream,
}

/// A file's route, as the checkpoint keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(in crate::nats) struct Routed {
    pub(in crate::nats) dev: u64,
    pub(in crate::nats) ino: u64,
    pub(in crate::nats) route: FileRoute,
}

/// The routes of the files being shipped.
#[derive(Debug, Default)]
pub(in crate::nats) struct Routes {
    decided: HashMap<(u64, u64), FileRoute>,
    /// Files whose head has not decided yet: since when their lines wait.
    waiting: HashMap<(u64, u64), Instant>,
    /// The partition of each [`FileRoute::Stream`] file, once computed (the source id and the
    /// partition count do not change while a shipper runs).
    stream_partition: HashMap<(u64, u64), u32>,
}

impl Routes {
    /// The routes of a checkpoint. Its files without one were shipped before routes were kept,
    /// to partition 0, and stay there; one with nothing shipped yet is decided afresh.
    pub(in crate::nats) fn restore(routed: &[Routed], files: &[FileCheckpoint]) -> Self {
        let mut decided: HashMap<(u64, u64), FileRoute> =
            routed.iter().map(|r| ((r.dev, r.ino), r.route)).collect();
        for f in files.iter().filter(|f| f.offset > 0) {
            decided.entry((f.dev, f.ino)).or_insert(FileRoute::Joined);
        }
        Routes {
            decided,
            ..Routes::default()
        }
    }

    /// The route of the file `(dev, ino)` at `path`, deciding it from the file's head if it
    /// has none yet; `None` while its lines should wait.
    pub(in crate::nats) fn decide(
        &mut self,
        path: &Path,
        dev: u64,
        ino: u64,
        now: Instant,
    ) -> Option<FileRoute> {
        if let Some(route) = self.decided.get(&(dev, ino)) {
            return Some(*route);
        }
        let since = *self.waiting.entry((dev, ino)).or_insert(now);
        let route = sniff_file(path, dev, ino, now.duration_since(since) >= HOLD)?;
        self.waiting.remove(&(dev, ino));
        self.decided.insert((dev, ino), route);
        Some(route)
    }

    /// The partition of `line` of the file `(dev, ino)` (decided), shipped by `source_id`.
    pub(in crate::nats) fn partition(
        &mut self,
        dev: u64,
        ino: u64,
        line: &[u8],
        source_id: &str,
        partitions: u32,
    ) -> u32 {
        let route = self.decided.get(&(dev, ino)).copied();
        partition_by(route, line, partitions, || {
            *self.stream_partition.entry((dev, ino)).or_insert_with(|| {
                partition_of_stream(&format!("{source_id}/{dev}.{ino}"), partitions)
            })
        })
    }

    /// The routes to checkpoint: those of `files` (the others' files are gone).
    pub(in crate::nats) fn saved(&mut self, files: &[FileCheckpoint]) -> Vec<Routed> {
        let tracked: std::collections::HashSet<(u64, u64)> =
            files.iter().map(|f| (f.dev, f.ino)).collect();
        self.decided.retain(|id, _| tracked.contains(id));
        self.waiting.retain(|id, _| tracked.contains(id));
        self.stream_partition.retain(|id, _| tracked.contains(id));
        let mut v: Vec<Routed> = self
            .decided
            .iter()
            .map(|(&(dev, ino), &route)| Routed { dev, ino, route })
            .collect();
        v.sort_by_key(|r| (r.dev, r.ino));
        v
    }
}

/// The route the head of the file at `path` says, if that file is still `(dev, ino)` and its
/// head decides (or `force`: the best guess).
fn sniff_file(path: &Path, dev: u64, ino: u64, force: bool) -> Option<FileRoute> {
    let mut head = Vec::with_capacity(decode::detect::SNIFF_BYTES);
    let same = std::fs::File::open(path).ok().and_then(|f| {
        use std::os::unix::fs::MetadataExt;
        let meta = f.metadata().ok()?;
        (meta.dev() == dev && meta.ino() == ino).then_some(f)
    });
    match same {
        Some(f) => {
            f.take(decode::detect::SNIFF_BYTES as u64)
                .read_to_end(&mut head)
                .ok()?;
        }
        // Renamed or replaced meanwhile: its lines were partition 0's before routes existed,
        // and stay safe there.
        None if force => return Some(FileRoute::Joined),
        None => return None,
    }
    route_of_head(&head, force)
}

/// The route the head of a stream says, once it decides (or `force`: the best guess).
fn route_of_head(head: &[u8], force: bool) -> Option<FileRoute> {
    decode::detect::sniff(head, force).map(route_of)
}

/// The partition of `line` of a stream routed `route` (`None`: not decided, as by turn), of
/// which `stream` is the partition of its identity.
fn partition_by(
    route: Option<FileRoute>,
    line: &[u8],
    partitions: u32,
    stream: impl FnOnce() -> u32,
) -> u32 {
    match route {
        Some(FileRoute::Joined) => JOINED_PARTITION,
        Some(FileRoute::Stream) => stream(),
        Some(FileRoute::ByTurn) | None => partition_of(line, partitions),
    }
}

/// The route of standard input, decided from the first bytes read from the pipe as a file's
/// is from the head of the file.
#[derive(Debug)]
pub(in crate::nats) struct PipeRoute {
    /// The partition of the pipe's identity (`<source id>:stdin`), for [`FileRoute::Stream`].
    stream_partition: u32,
    /// The first bytes read, up to the sniffing budget.
    head: Vec<u8>,
    /// Since when lines wait for the head to decide.
    since: Option<Instant>,
    decided: Option<FileRoute>,
}

impl PipeRoute {
    /// The route of the pipe known as `identity` (its stream name in the messages).
    pub(in crate::nats) fn new(identity: &str, partitions: u32) -> Self {
        PipeRoute {
            stream_partition: partition_of_stream(identity, partitions),
            head: Vec::new(),
            since: None,
            decided: None,
        }
    }

    /// Bytes as read from the pipe, at `now`: the head, until the route is decided.
    pub(in crate::nats) fn read(&mut self, bytes: &[u8], now: Instant) {
        if self.decided.is_some() || bytes.is_empty() {
            return;
        }
        self.since.get_or_insert(now);
        let room = decode::detect::SNIFF_BYTES.saturating_sub(self.head.len());
        self.head.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    /// The route, deciding it once the head says (or after [`HOLD`], or at the pipe's `end`:
    /// the best guess); `None` while lines should wait.
    pub(in crate::nats) fn decide(&mut self, now: Instant, end: bool) -> Option<FileRoute> {
        if self.decided.is_none() {
            let waited = self
                .since
                .is_some_and(|since| now.duration_since(since) >= HOLD);
            self.decided = route_of_head(&self.head, end || waited);
            if self.decided.is_some() {
                self.head = Vec::new();
            }
        }
        self.decided
    }

    /// The partition of `line` (as by turn until the route is decided).
    pub(in crate::nats) fn partition(&self, line: &[u8], partitions: u32) -> u32 {
        partition_by(self.decided, line, partitions, || self.stream_partition)
    }
}

/// The route of a stream sniffed as `sniffed`.
fn route_of(sniffed: Result<Format, decode::detect::Lookalike>) -> FileRoute {
    match sniffed {
        Ok(Format::Native) => FileRoute::ByTurn,
        Ok(format) if feeds_joiner(format, true) => FileRoute::Joined,
        Ok(_) => FileRoute::Stream,
        // A look-alike is refused by the collector wherever it is read.
        Err(_) => FileRoute::Joined,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo(rel: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
    }

    fn route_of_file(path: &Path) -> Option<FileRoute> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(path).expect("fixture");
        Routes::default().decide(path, meta.dev(), meta.ino(), Instant::now())
    }

    #[test]
    fn each_format_has_its_route() {
        let cases = [
            ("examples/bookstore/naive.jsonl", FileRoute::ByTurn),
            (
                "tests/fixtures/recorded/anthropic-sdk-python__basic_response.sse",
                FileRoute::Stream,
            ),
            (
                "tests/fixtures/providers/openai-chat/id-change-splice.sse",
                FileRoute::Stream,
            ),
            (
                "tests/fixtures/agents/gemini-cli/after-tool-reset/telemetry.log",
                FileRoute::Joined,
            ),
            (
                "tests/fixtures/agents/gemini-cli/after-tool-reset/stream.jsonl",
                FileRoute::Joined,
            ),
            (
                "tests/fixtures/agents/claude-code/after-tool-reset/stream.jsonl",
                FileRoute::Joined,
            ),
            (
                "tests/fixtures/agents/codex/after-tool-reset/exec.jsonl",
                FileRoute::Stream,
            ),
        ];
        for (rel, want) in cases {
            let path = repo(rel);
            if !path.exists() {
                panic!("fixture {rel} is gone: pick another of its format");
            }
            assert_eq!(route_of_file(&path), Some(want), "{rel}");
        }
    }

    #[test]
    fn a_pipe_is_routed_as_a_file_of_its_format() {
        for rel in [
            "examples/bookstore/naive.jsonl",
            "tests/fixtures/providers/openai-chat/id-change-splice.sse",
            "tests/fixtures/agents/gemini-cli/after-tool-reset/stream.jsonl",
            "tests/fixtures/agents/claude-code/after-tool-reset/stream.jsonl",
            "tests/fixtures/agents/codex/after-tool-reset/exec.jsonl",
        ] {
            let path = repo(rel);
            let bytes = std::fs::read(&path).expect("fixture");
            let mut pipe = PipeRoute::new("h:stdin", 16);
            let t0 = Instant::now();
            // As reads return it: a few bytes at a time, deciding after each read.
            let mut route = None;
            for chunk in bytes.chunks(97) {
                pipe.read(chunk, t0);
                route = route.or(pipe.decide(t0, false));
            }
            let route = route.or(pipe.decide(t0, true));
            assert_eq!(route, route_of_file(&path), "{rel}");
        }
        // Its partitions: a stream's all on its identity's; what feeds the joiner on 0; native
        // lines by turn.
        let mut pipe = PipeRoute::new("h:stdin", 16);
        let sse = std::fs::read(repo(
            "tests/fixtures/providers/openai-chat/id-change-splice.sse",
        ))
        .expect("fixture");
        pipe.read(&sse, Instant::now());
        assert_eq!(pipe.decide(Instant::now(), true), Some(FileRoute::Stream));
        let stream = partition_of_stream("h:stdin", 16);
        for line in [&b"data: [DONE]"[..], br#"{"turn":"t-7","type":"text"}"#] {
            assert_eq!(pipe.partition(line, 16), stream);
        }
        let line = br#"{"turn":"t-7","type":"text"}"#;
        let mut native = PipeRoute::new("h:stdin", 16);
        native.read(line, Instant::now());
        native.read(b"\n", Instant::now());
        assert_eq!(native.decide(Instant::now(), true), Some(FileRoute::ByTurn));
        assert_eq!(native.partition(line, 16), partition_of(line, 16));
        let mut joined = PipeRoute::new("h:stdin", 16);
        joined.decided = Some(FileRoute::Joined);
        assert_eq!(joined.partition(line, 16), JOINED_PARTITION);
    }

    #[test]
    fn a_pipe_waits_for_its_head_then_the_best_guess_decides() {
        let mut pipe = PipeRoute::new("h:stdin", 16);
        let t0 = Instant::now();
        // An SSE event's name alone does not say whose stream it is yet.
        pipe.read(b"event: message_start\n", t0);
        assert_eq!(pipe.decide(t0, false), None);
        assert_eq!(pipe.decide(t0 + HOLD / 2, false), None);
        let route = pipe.decide(t0 + HOLD, false);
        assert!(route.is_some(), "decided once it has waited {HOLD:?}");
        // Decided once: what is read later does not change it.
        pipe.read(
            b"{\"turn\":\"t\",\"type\":\"turn_start\",\"v\":1}\n",
            t0 + HOLD,
        );
        assert_eq!(pipe.decide(t0 + 2 * HOLD, true), route);
        // The end of the pipe decides at once.
        let mut ended = PipeRoute::new("h:stdin", 16);
        ended.read(b"event: message_start\n", t0);
        assert!(ended.decide(t0, true).is_some());
    }

    #[test]
    fn a_young_file_waits_for_its_head_then_the_best_guess_decides() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("young.sse");
        // An SSE event's name alone does not say whose stream it is yet.
        std::fs::write(&path, "event: message_start\n").expect("write");
        let meta = std::fs::metadata(&path).expect("meta");
        let mut routes = Routes::default();
        let t0 = Instant::now();
        assert_eq!(routes.decide(&path, meta.dev(), meta.ino(), t0), None);
        let later = t0 + HOLD;
        let route = routes.decide(&path, meta.dev(), meta.ino(), later);
        assert!(route.is_some(), "decided once it has waited {HOLD:?}");
        // Decided once: the file's later lines go where its first went.
        std::fs::write(&path, "{\"turn\":\"t\",\"type\":\"turn_start\",\"v\":1}\n").expect("w");
        assert_eq!(
            routes.decide(&path, meta.dev(), meta.ino(), later + HOLD),
            route
        );
    }

    #[test]
    fn a_stream_goes_whole_to_one_partition_and_routes_survive_a_checkpoint() {
        let mut routes = Routes::default();
        routes.decided.insert((1, 10), FileRoute::Stream);
        routes.decided.insert((1, 11), FileRoute::Joined);
        routes.decided.insert((1, 12), FileRoute::ByTurn);
        let parts: std::collections::HashSet<u32> = (0..50)
            .map(|i| routes.partition(1, 10, format!("data: {i}").as_bytes(), "h", 16))
            .collect();
        assert_eq!(parts.len(), 1, "one partition for all of a stream's lines");
        // Streams spread: some file identity lands off partition 0.
        let spread: std::collections::HashSet<u32> = (0..64u64)
            .map(|ino| {
                let mut r = Routes::default();
                r.decided.insert((1, ino), FileRoute::Stream);
                r.partition(1, ino, b"data: {}", "h", 16)
            })
            .collect();
        assert!(spread.len() > 8, "{spread:?}");
        assert_eq!(routes.partition(1, 11, b"data: {}", "h", 16), 0);
        let line = br#"{"turn":"t-7","type":"text"}"#;
        assert_eq!(
            routes.partition(1, 12, line, "h", 16),
            partition_of(line, 16)
        );

        let cp = |ino, offset| FileCheckpoint {
            path: format!("/f{ino}").into(),
            dev: 1,
            ino,
            fingerprint: 0,
            fingerprint_len: 0,
            offset,
        };
        // File 12 is gone; 13 was shipped before routes were kept; 14 had nothing shipped.
        let files = [cp(10, 5), cp(11, 5), cp(13, 99), cp(14, 0)];
        let saved = routes.saved(&files);
        assert_eq!(saved.len(), 2);
        let back = Routes::restore(&saved, &files);
        assert_eq!(back.decided.get(&(1, 10)), Some(&FileRoute::Stream));
        assert_eq!(back.decided.get(&(1, 11)), Some(&FileRoute::Joined));
        assert_eq!(back.decided.get(&(1, 13)), Some(&FileRoute::Joined));
        assert_eq!(
            back.decided.get(&(1, 14)),
            None,
            "decided afresh from its head"
        );
    }
}
