//! Streams read whole (agents' and providers' own formats, OTLP sessions) against one
//! thread: each reaches one worker only and is decoded there, and a checkpoint resumes their
//! open turns and held gemini-cli events on the worker that reads them, with any count.

use super::*;
use retryscope_core::ingest::{StreamId, StreamState};

/// A committed fixture's text.
fn fixture(rel: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The OTLP receiver's streams (`otlp:<service>/<session>`, one record a line) for the
/// committed captures of `agents` (`tests/fixtures/agents/<agent>/otlp-after-tool-reset/otlp`).
fn otlp_streams(agents: &[&str]) -> Vec<Input> {
    let mut out: Vec<Input> = Vec::new();
    for agent in agents {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/agents")
            .join(agent)
            .join("otlp-after-tool-reset/otlp");
        let mut bodies: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        bodies.sort();
        for path in bodies {
            let body = std::fs::read(&path).unwrap();
            let name = path.to_string_lossy();
            let mut records = Vec::new();
            if name.contains("-v1-logs") {
                crate::source::otlp::json::logs(&body, &mut records).unwrap();
            } else if name.contains("-v1-traces") {
                crate::source::otlp::json::spans(&body, &mut records).unwrap();
            }
            for r in records {
                let line = String::from_utf8(r.line).unwrap();
                match out.iter_mut().find(|i| i.name == r.stream) {
                    Some(input) => input.lines.push(line),
                    None => out.push(Input {
                        source: Source::Otlp,
                        name: r.stream,
                        format: Some(Format::Otlp),
                        lines: vec![line],
                    }),
                }
            }
        }
    }
    assert!(out.len() >= agents.len(), "a stream per agent at least");
    out
}

/// Streams that are read whole: OTLP sessions of three agents (forced format), and files of
/// agents' and providers' own formats (sniffed), gemini-cli's two outputs of one session
/// among them: its stream-json here, joined with its OTLP records, and the telemetry outfile
/// and stream-json of another session. Their names are such that, routed by name, each
/// session's two streams would be read by different workers (with 2 and with 3): only the
/// joined route brings them together.
pub(super) fn whole_streams() -> Vec<Input> {
    let mut out = otlp_streams(&["gemini-cli", "claude-code", "codex"]);
    for (name, rel) in [
        (
            "/logs/gemini-otlp-c.stream.jsonl",
            "tests/fixtures/agents/gemini-cli/otlp-after-tool-reset/stream.jsonl",
        ),
        (
            "/logs/gemini-c/telemetry.log",
            "tests/fixtures/agents/gemini-cli/after-tool-reset/telemetry.log",
        ),
        (
            "/logs/gemini-c/stream.jsonl",
            "tests/fixtures/agents/gemini-cli/after-tool-reset/stream.jsonl",
        ),
        (
            "/logs/claude.stream.jsonl",
            "tests/fixtures/agents/claude-code/after-tool-reset/stream.jsonl",
        ),
        (
            "/logs/codex.exec.jsonl",
            "tests/fixtures/agents/codex/after-tool-reset/exec.jsonl",
        ),
        (
            "/logs/acp.jsonl",
            "tests/fixtures/providers/acp/message-id-change.jsonl",
        ),
        (
            "/logs/responses.chunks.txt",
            "tests/fixtures/providers/openai-responses/error-nested-then-retry.chunks.txt",
        ),
    ] {
        out.push(file(name, &fixture(rel)));
    }
    out
}

/// Stream `input` opened as the engine opens it.
fn open(ingest: &mut ShardedIngest, input: &Input) -> StreamId {
    match input.format {
        Some(format) => ingest.stream_as(input.source, &input.name, format),
        None => ingest.stream(input.source, &input.name),
    }
}

/// Lines of stream `id` handed to each worker so far.
fn lines_sent(ingest: &ShardedIngest, id: StreamId) -> Vec<u64> {
    let Mode::Workers(w) = &ingest.mode else {
        panic!("one thread");
    };
    w.lines_sent
        .iter()
        .map(|m| m.get(&id.index()).copied().unwrap_or(0))
        .collect()
}

/// Events each worker correlated, as of its last batch.
fn events_by_worker(ingest: &ShardedIngest) -> Vec<u64> {
    let Mode::Workers(w) = &ingest.mode else {
        panic!("one thread");
    };
    w.stats
        .lock()
        .unwrap()
        .iter()
        .map(|(s, _)| s.events)
        .collect()
}

fn routing_known(ingest: &ShardedIngest, id: StreamId) -> bool {
    let Mode::Workers(w) = &ingest.mode else {
        panic!("one thread");
    };
    w.streams
        .get(&id.index())
        .is_some_and(|s| s.routing.is_some())
}

/// Issue 22: every worker decoded every provider and OTLP stream (each correlating only its
/// own turns), so an OTLP receiver with 2 workers was 6 times slower than with one.
#[test]
fn a_stream_read_whole_reaches_one_worker_only_and_is_decoded_there() {
    let now = Some(1_794_477_600_000i64);
    for (workers, join_otlp) in [(2, true), (3, true), (3, false)] {
        let mut decoded = 0;
        for input in whole_streams() {
            let what = format!("{} ({workers} workers, join_otlp {join_otlp})", input.name);
            let metrics = Arc::new(Metrics::new(MetricsConfig::default()).unwrap());
            let mut ingest = ShardedIngest::start(
                workers,
                cfg(),
                Arc::new(PriceTable::builtin()),
                Format::Auto,
                join_otlp,
                None,
                metrics.clone(),
            )
            .expect("workers start");
            let note = &mut |n: Note<'_>| Ingested(n).emit(&metrics);
            let mut out = Vec::new();
            let id = open(&mut ingest, &input);
            // A sniffed stream's first lines go to every worker (each sniffs alike) until
            // worker 0 tells its format; a forced one is routed from its first line.
            let mut head = 0;
            while !routing_known(&ingest, id) && head < input.lines.len() {
                ingest.line(id, None, input.lines[head].as_bytes(), now, &mut out, note);
                ingest.flush(&mut out);
                head += 1;
            }
            assert!(
                input.format.is_none() || head == 0,
                "{what}: forced, known at once"
            );
            let before = lines_sent(&ingest, id);
            for line in &input.lines[head..] {
                ingest.line(id, None, line.as_bytes(), now, &mut out, note);
            }
            ingest.close_all(&mut out, note);
            ingest.flush(&mut out);

            let joined = input.name.ends_with("stream.jsonl")
                || input.name.ends_with("telemetry.log")
                || (input.source == Source::Otlp && join_otlp);
            let route = if joined {
                turn_route::joined_route()
            } else {
                turn_route::stream_route(&input.name)
            };
            let owner = turn_route::shard_of_route(route, workers as u32) as usize;
            let rest = (input.lines.len() - head) as u64;
            let after: Vec<u64> = lines_sent(&ingest, id)
                .iter()
                .zip(&before)
                .map(|(a, b)| a - b)
                .collect();
            let mut want = vec![0; workers];
            want[owner] = rest;
            assert!(rest > 0, "{what}: lines after the format is known");
            assert_eq!(after, want, "{what}: its lines reach worker {owner} only");
            // Correlated on its worker only (some OTLP streams carry no event at all).
            let mut events = events_by_worker(&ingest);
            decoded += u64::from(events[owner] > 0);
            events[owner] = 0;
            assert_eq!(events, vec![0; workers], "{what}: events elsewhere");
        }
        assert!(decoded > 8, "streams with events: {decoded}");
    }
}

/// What a run that is checkpointed after line `half` of every stream and resumed (its state
/// through the checkpoint's JSON form, as on disk) produces: reports and findings, counters,
/// metric values.
fn resumed(
    streams: &[Input],
    half: usize,
    first: usize,
    second: usize,
) -> (Seen, InputCounters, BTreeMap<String, String>) {
    let n = longest(streams);
    let metrics = Arc::new(Metrics::new(MetricsConfig::default()).unwrap());
    let mut seen = Seen::default();
    let mut ingest = start(first, None, &metrics);
    feed(&mut ingest, streams, 0..half, &metrics, &mut seen);
    let mut out = Vec::new();
    let state = ingest.checkpoint(&mut out).expect("no worker died");
    seen.take(&mut out, &metrics);
    let json = serde_json::to_string(&(
        &state.correlator,
        &state.counters,
        &state.joined,
        &state.streams.states,
    ))
    .unwrap();
    let snapshot = metrics.snapshot();
    drop(ingest);

    type Parts = (
        CorrelatorSnapshot,
        InputCounters,
        Option<JoinerSnapshot>,
        Vec<StreamState>,
    );
    let (correlator, counters, joined, decoders): Parts = serde_json::from_str(&json).unwrap();
    let metrics = Arc::new(Metrics::new(MetricsConfig::default()).unwrap());
    metrics.restore(&snapshot).unwrap();
    let restored = Restored {
        correlator,
        counters,
        clock_ms: state.clock_ms,
        joined: joined.unwrap_or_default(),
        streams: decoders,
    };
    let mut ingest = start(second, Some(restored), &metrics);
    ingest.flush(&mut Vec::new());
    feed(&mut ingest, streams, half..n, &metrics, &mut seen);
    let counters = ingest.checkpoint(&mut Vec::new()).expect("alive").counters;
    finish(&mut ingest, &metrics, &mut seen);
    (seen.sorted(), counters, values(&metrics))
}

#[test]
fn whole_streams_resume_on_the_worker_that_reads_them_with_any_worker_count() {
    let mut streams = streams();
    streams.extend(whole_streams());
    // Checkpoints mid-input: early ones cut the OTLP sessions and the agents' files in the
    // middle (their open turns get more events after the restart, from the worker that reads
    // the stream); at 2,500 the gemini-cli telemetry outfile is half read and its session's
    // events are held for the join.
    assert!(
        streams
            .iter()
            .any(|i| i.lines.len() > 2500 && i.name.ends_with(".log"))
    );
    for half in [5, 12, 30, 2500] {
        let (one, one_counters, one_values) = resumed(&streams, half, 1, 1);
        assert!(one.turns.len() > 200 && !one.findings.is_empty());
        for (first, second) in [(2, 3), (3, 1), (1, 2), (2, 2)] {
            let (seen, counters, values) = resumed(&streams, half, first, second);
            let what = format!("checkpoint at {half}: {first} workers, then {second}");
            assert_eq!(seen.turns.len(), one.turns.len(), "{what}: turns");
            assert!(
                seen == one,
                "{what}: same reports and findings as one worker"
            );
            assert_eq!(counters, one_counters, "{what}: counters");
            assert_eq!(values, one_values, "{what}: metric values");
        }
    }
}

/// Streams read whole (OTLP sessions, agents' own outputs, provider streams), checkpointed
/// at any of several lines and resumed with 1 or 2 workers: their decoders resume where
/// they were and the lines held while a format is sniffed are held again (the checkpoint
/// keeps both), so the turns, findings and reports are a run's that never stopped. Before, a
/// resumed Codex or gemini-cli stream named its next turn `codex#2` / `gemini-cli#2` instead
/// of its thread's or session's id, and a stream still being sniffed lost its first lines.
#[test]
fn whole_streams_resumed_decode_as_if_they_had_never_stopped() {
    let mut streams = whole_streams();
    // An SSE stream that opens with keep-alive comments: still sniffed after several lines
    // (modelled on proxies that ping before the first event).
    let sse = fixture("tests/fixtures/providers/anthropic/duplicate-message-start.sse");
    streams.push(file(
        "/logs/pinged.sse",
        &format!(": ping\n\n: ping\n\n: ping\n\n{sse}"),
    ));
    let never_stopped = {
        let metrics = Arc::new(Metrics::new(MetricsConfig::default()).unwrap());
        let mut seen = Seen::default();
        let mut ingest = start(1, None, &metrics);
        feed(
            &mut ingest,
            &streams,
            0..longest(&streams),
            &metrics,
            &mut seen,
        );
        finish(&mut ingest, &metrics, &mut seen);
        seen.sorted()
    };
    assert!(!never_stopped.findings.is_empty());
    for half in [1, 2, 3, 5, 8, 12, 30, 2500] {
        for (first, second) in [(1, 1), (2, 1), (1, 2)] {
            let (seen, _, _) = resumed(&streams, half, first, second);
            let what = format!("checkpoint at {half}: {first} workers, then {second}");
            assert_eq!(seen.turns.len(), never_stopped.turns.len(), "{what}: turns");
            assert!(seen == never_stopped, "{what}: as if never stopped");
        }
    }
}
