//! Sharded ingest against one thread: the same reports, findings, counters and metric values
//! (native logs, provider streams, and the streams of `tests/whole.rs`: OTLP sessions, agents'
//! files, a gemini-cli session's joined outputs); a checkpoint taken with shards resumes
//! (with another worker count) losing and doubling nothing; a dead worker is reported.

mod held;
mod whole;

use std::collections::BTreeMap;

use super::*;
use crate::demo::{Fleet, FleetConfig};
use crate::internal_events::{Ingested, InternalEvent};
use crate::sink::metrics::MetricsConfig;

/// One input of a test run: a stream's source, name, forced format (`None`: sniffed) and lines.
struct Input {
    source: Source,
    name: String,
    format: Option<Format>,
    lines: Vec<String>,
}

fn file(name: &str, text: &str) -> Input {
    Input {
        source: Source::File,
        name: name.to_owned(),
        format: None,
        lines: text.lines().map(str::to_owned).collect(),
    }
}

/// Streams of a small fleet: two native logs (demo fleet, interleaved turns, retries, tool
/// calls), with bad lines, blank lines and an over-long line mixed in, and two recorded
/// provider streams (each read whole by one worker).
fn streams() -> Vec<Input> {
    let mut out = Vec::new();
    for seed in [1, 2] {
        let mut fleet = Fleet::new(FleetConfig::bench(seed));
        let mut lines = Vec::new();
        let mut line = String::new();
        for i in 0..6_000 {
            line.clear();
            fleet.next_line(&mut line);
            lines.push(line.trim_end().to_owned());
            match i % 997 {
                3 => lines.push("{not json".to_owned()),
                5 => lines.push(String::new()),
                7 => lines.push(r#"{"type":"text","text":"no turn"}"#.to_owned()),
                11 => lines.push(r#"{"turn":"t","type":"telepathy"}"#.to_owned()),
                13 => lines.push(format!(
                    r#"{{"turn":"big","type":"text","text":"{}"}}"#,
                    "x".repeat(5000)
                )),
                _ => {}
            }
        }
        let mut rest = Vec::new();
        fleet.drain(&mut rest).unwrap();
        lines.extend(String::from_utf8(rest).unwrap().lines().map(str::to_owned));
        out.push(Input {
            source: Source::File,
            name: format!("/logs/agent-{seed}.jsonl"),
            format: None,
            lines,
        });
    }
    for (name, text) in [
        (
            "/logs/chat.sse",
            include_str!("../../../tests/fixtures/providers/openai-chat/id-change-splice.sse"),
        ),
        (
            "/logs/anthropic.sse",
            include_str!("../../../tests/fixtures/providers/anthropic/duplicate-message-start.sse"),
        ),
    ] {
        out.push(file(name, text));
    }
    out
}

/// What a run produced, in a comparable form.
#[derive(Debug, Default, PartialEq)]
struct Seen {
    turns: Vec<String>,
    findings: Vec<String>,
    retries: usize,
}

impl Seen {
    fn take(&mut self, out: &mut Vec<Output>, metrics: &Metrics) {
        for o in out.drain(..) {
            metrics.observe(&o);
            match &o {
                Output::TurnClosed(r) => self.turns.push(serde_json::to_string(r).unwrap()),
                Output::Finding(f, _) => self.findings.push(serde_json::to_string(f).unwrap()),
                Output::Retry { .. } => self.retries += 1,
            }
        }
    }

    fn sorted(mut self) -> Seen {
        self.turns.sort();
        self.findings.sort();
        self
    }
}

fn cfg() -> CorrelatorConfig {
    CorrelatorConfig {
        idle_timeout_ms: Some(3_600_000),
        ..CorrelatorConfig::default()
    }
}

fn start(workers: usize, restored: Option<Restored>, metrics: &Arc<Metrics>) -> ShardedIngest {
    ShardedIngest::start(
        workers,
        cfg(),
        Arc::new(PriceTable::builtin()),
        Format::Auto,
        true,
        restored,
        metrics.clone(),
    )
    .expect("workers start")
}

/// Feed lines `from..to` of every stream (round-robin, 50 lines at a time, as a tailer
/// would), ticking and delivering like the engine loop.
fn feed(
    ingest: &mut ShardedIngest,
    streams: &[Input],
    range: std::ops::Range<usize>,
    metrics: &Metrics,
    seen: &mut Seen,
) {
    let mut out = Vec::new();
    let note = &mut |n: Note<'_>| Ingested(n).emit(metrics);
    let mut at = range.start;
    while at < range.end {
        // Arrival times and ticks follow the position in the input, so a resumed run sees
        // the same ones.
        let now = 1_794_477_600_000i64 + (at / 50) as i64 * 10;
        for input in streams {
            let id = match input.format {
                Some(format) => ingest.stream_as(input.source, &input.name, format),
                None => ingest.stream(input.source, &input.name),
            };
            for line in input.lines.iter().take(range.end.min(at + 50)).skip(at) {
                if line.len() > 4096 {
                    ingest.too_long(id, None, line.len() as u64, note);
                } else {
                    ingest.line(id, None, line.as_bytes(), Some(now), &mut out, note);
                }
            }
        }
        at += 50;
        if at.is_multiple_of(1000) {
            ingest.settle_idle(Some(now), &mut out, note);
            ingest.release_joined(10, &mut out);
            ingest.tick(now, &mut out, note);
        }
        ingest.flush(&mut out);
        seen.take(&mut out, metrics);
        metrics.set_correlator_stats(&ingest.stats(), ingest.open_turns());
    }
}

fn finish(ingest: &mut ShardedIngest, metrics: &Metrics, seen: &mut Seen) {
    let mut out = Vec::new();
    ingest.close_all(&mut out, &mut |n| Ingested(n).emit(metrics));
    ingest.flush(&mut out);
    seen.take(&mut out, metrics);
    metrics.set_correlator_stats(&ingest.stats(), ingest.open_turns());
}

/// Metric values by series, with float sums rounded (shards add costs in another order).
fn values(metrics: &Metrics) -> BTreeMap<String, String> {
    let text = String::from_utf8(metrics.render().1).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("retryscope_build_info"))
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(k, v)| {
            let v: f64 = v.parse().unwrap();
            (k.to_owned(), format!("{v:.9e}"))
        })
        .collect()
}

fn longest(streams: &[Input]) -> usize {
    streams.iter().map(|i| i.lines.len()).max().unwrap_or(0)
}

#[test]
fn sharded_run_gives_the_single_thread_reports_findings_counters_and_metrics() {
    let mut streams = streams();
    streams.extend(whole::whole_streams());
    let n = longest(&streams);
    let mut results = Vec::new();
    for workers in [1, 2, 3] {
        let metrics = Arc::new(Metrics::new(MetricsConfig::default()).unwrap());
        let mut ingest = start(workers, None, &metrics);
        assert_eq!(ingest.workers(), workers);
        let mut seen = Seen::default();
        feed(&mut ingest, &streams, 0..n, &metrics, &mut seen);
        let state = ingest.checkpoint(&mut Vec::new()).expect("no worker died");
        finish(&mut ingest, &metrics, &mut seen);
        results.push((
            seen.sorted(),
            values(&metrics),
            state.counters,
            ingest.stats(),
        ));
    }
    let (one, one_metrics, one_counters, one_stats) = &results[0];
    assert!(one.turns.len() > 200, "{} turns", one.turns.len());
    assert!(!one.findings.is_empty() && one.retries > 0);
    assert!(one_counters.bad_total() > 10 && one_counters.skips.unknown_types > 0);
    assert!(
        one_metrics
            .get("retryscope_events_decoded_total{source=\"file\"}")
            .is_some_and(|v| v != "0.000000000e0")
    );
    for (seen, metrics, counters, stats) in &results[1..] {
        assert_eq!(seen.turns.len(), one.turns.len());
        assert!(seen == one, "same reports and findings");
        assert_eq!(counters, one_counters);
        assert_eq!(stats, one_stats);
        assert_eq!(metrics, one_metrics);
    }
}

#[test]
fn checkpoint_with_shards_resumes_with_another_worker_count_losing_and_doubling_nothing() {
    let streams = streams();
    let n = longest(&streams);
    let half = n / 100 * 50;

    let metrics = Arc::new(Metrics::new(MetricsConfig::default()).unwrap());
    let mut reference = Seen::default();
    let mut ingest = start(1, None, &metrics);
    feed(&mut ingest, &streams, 0..n, &metrics, &mut reference);
    finish(&mut ingest, &metrics, &mut reference);
    let reference_values = values(&metrics);

    // First run: two workers, a checkpoint mid-input (through its JSON form, as on disk).
    let metrics = Arc::new(Metrics::new(MetricsConfig::default()).unwrap());
    let mut seen = Seen::default();
    let mut ingest = start(2, None, &metrics);
    feed(&mut ingest, &streams, 0..half, &metrics, &mut seen);
    let mut out = Vec::new();
    let state = ingest.checkpoint(&mut out).expect("no worker died");
    seen.take(&mut out, &metrics);
    let open = state.correlator.open_turns();
    assert!(open > 0, "the checkpoint holds open turns");
    let json = serde_json::to_string(&(&state.correlator, &state.counters)).unwrap();
    let snapshot = metrics.snapshot();
    drop(ingest); // killed: nothing after the checkpoint survives

    // Second run: three workers, resumed.
    let (correlator, counters): (CorrelatorSnapshot, InputCounters) =
        serde_json::from_str(&json).unwrap();
    let metrics = Arc::new(Metrics::new(MetricsConfig::default()).unwrap());
    metrics.restore(&snapshot).unwrap();
    let restored = Restored {
        correlator,
        counters,
        clock_ms: state.clock_ms,
        joined: Default::default(),
        streams: Vec::new(),
    };
    let mut ingest = start(3, Some(restored), &metrics);
    assert_eq!(ingest.open_turns(), 0, "stats come with the first batch");
    ingest.flush(&mut Vec::new());
    feed(&mut ingest, &streams, half..n, &metrics, &mut seen);
    finish(&mut ingest, &metrics, &mut seen);

    let seen = seen.sorted();
    let reference = reference.sorted();
    assert_eq!(
        seen.turns.len(),
        reference.turns.len(),
        "no turn lost or doubled"
    );
    assert!(seen == reference, "same reports and findings, each once");
    let resumed_values = values(&metrics);
    for key in [
        "retryscope_turns_total",
        "retryscope_findings_total",
        "retryscope_retries_total",
    ] {
        let pick = |m: &BTreeMap<String, String>| -> Vec<(String, String)> {
            m.iter()
                .filter(|(k, _)| k.starts_with(key))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        assert_eq!(pick(&resumed_values), pick(&reference_values), "{key}");
    }
}

#[test]
fn a_dead_worker_is_reported_with_its_panic_and_refuses_every_checkpoint_after() {
    let streams = streams();
    let metrics = Arc::new(Metrics::new(MetricsConfig::default()).unwrap());
    let mut ingest = ShardedIngest::start_faulty(
        2,
        cfg(),
        Arc::new(PriceTable::builtin()),
        Format::Auto,
        true,
        None,
        metrics.clone(),
        None,
    )
    .expect("workers start");
    let mut seen = Seen::default();
    feed(&mut ingest, &streams, 0..200, &metrics, &mut seen);
    assert_eq!(ingest.alive(), Ok(()));
    let before = ingest.checkpoint(&mut Vec::new());
    assert!(before.is_ok(), "a checkpoint while every worker lives");
    drop(ingest);

    let mut ingest = ShardedIngest::start_faulty(
        2,
        cfg(),
        Arc::new(PriceTable::builtin()),
        Format::Auto,
        true,
        None,
        metrics.clone(),
        Some(fault::PanicAfter {
            worker: 1,
            lines: 100,
            spawn_fails: false,
        }),
    )
    .expect("workers start");
    let mut seen = Seen::default();
    // Every call after the panic goes on (the engine stops at its next `alive` check).
    feed(&mut ingest, &streams, 0..200, &metrics, &mut seen);
    let dead = ingest.alive().expect_err("worker 1 died");
    assert_eq!(dead.worker, 1);
    assert!(dead.panic.contains(fault::ENV), "{dead}");
    assert!(dead.to_string().contains("ingest worker 1"), "{dead}");
    assert_eq!(ingest.checkpoint(&mut Vec::new()).err(), Some(dead.clone()));
    // Later calls neither hang nor change the report.
    feed(&mut ingest, &streams, 200..400, &metrics, &mut seen);
    assert_eq!(ingest.checkpoint(&mut Vec::new()).err(), Some(dead));
}

#[test]
fn workers_that_cannot_start_stop_the_engine_instead_of_dropping_the_restored_turns() {
    // Before, a refused thread made the engine fall back to one thread without the restored
    // state: the checkpoint's open turns were lost on the next checkpoint.
    let streams = streams();
    let metrics = Arc::new(Metrics::new(MetricsConfig::default()).unwrap());
    let mut first = start(2, None, &metrics);
    let mut seen = Seen::default();
    feed(&mut first, &streams, 0..200, &metrics, &mut seen);
    let state = first.checkpoint(&mut Vec::new()).expect("checkpoint");
    assert!(
        state.correlator.open_turns() > 0,
        "turns are open at the checkpoint"
    );
    let restored = Restored {
        correlator: state.correlator,
        counters: state.counters,
        clock_ms: state.clock_ms,
        joined: state.joined.unwrap_or_default(),
        streams: state.streams.states,
    };
    let failed = ShardedIngest::start_faulty(
        2,
        cfg(),
        Arc::new(PriceTable::builtin()),
        Format::Auto,
        true,
        Some(restored),
        metrics.clone(),
        Some(fault::PanicAfter {
            worker: 1,
            lines: 0,
            spawn_fails: true,
        }),
    );
    let Err(e) = failed else {
        panic!("the engine must not start without its workers")
    };
    assert_eq!(e.count, 2);
    assert!(e.to_string().contains("checkpoint is untouched"), "{e}");
}
