//! A collector partition's hold (turns held until quiet, `retryscope_core::reorder`) with its
//! lines placed, so that they are held undecoded and decoded at their turn's release, against
//! the same hold of lines that cannot be read again (their events decoded at once and held
//! whole): the same reports and findings in the same order, counters, metric values and bad
//! lines (with their numbers), hostile lines among them; and a checkpoint taken mid-hold,
//! its references read back, resumes to the same.

use super::*;
use retryscope_core::reorder::{HoldSnapshot, Place, TurnHold};

/// Lines per message, as a shipper batches them.
const PER_MESSAGE: usize = 64;

/// Settle time of the hold.
const SETTLE_MS: i64 = 2_000;

/// The demo fleet's log with hostile lines among it, each shaped like the lines held
/// undecoded (the common key order, a plain id, an integer `ts`) or nearly.
fn log() -> Vec<String> {
    let mut fleet = Fleet::new(FleetConfig::bench(11));
    let mut lines = Vec::new();
    let mut line = String::new();
    while lines.len() < 12_000 && fleet.next_line(&mut line) {
        lines.push(std::mem::take(&mut line));
    }
    let ts = 1_794_477_600_000i64;
    let hostile = [
        // Cut off after its `ts`: not JSON.
        format!(r#"{{"v":1,"turn":"h1","type":"text","ts":{ts},"attempt":0,"text":"#),
        // An attempt number out of range: a bad value.
        format!(r#"{{"v":1,"turn":"h1","type":"text","ts":{ts},"attempt":99999999,"text":"x"}}"#),
        // `type` given twice, the second a provider chunk's.
        format!(
            r#"{{"v":1,"turn":"h2","type":"text","ts":{ts},"attempt":0,"text":"x","type":"provider_chunk"}}"#
        ),
        // `turn` given twice: decoded with the second.
        format!(r#"{{"turn":"h3","type":"text","ts":{ts},"attempt":0,"text":"x","turn":"h4"}}"#),
        // A type this version does not know: skipped.
        format!(r#"{{"v":1,"turn":"h5","type":"mystery","ts":{ts}}}"#),
        // Control characters and an escaped id: read at once.
        format!(
            "{{\"turn\":\"h\\u0006\",\"type\":\"text\",\"ts\":{ts},\"attempt\":0,\"text\":\"\u{7}\"}}"
        ),
        // A `ts` past 2100: a bad value, read at once.
        r#"{"turn":"h7","type":"text","ts":99999999999999,"attempt":0,"text":"x"}"#.to_string(),
        // A well-formed turn of the common shape.
        format!(r#"{{"v":1,"turn":"h8","type":"turn_start","ts":{ts}}}"#),
        format!(r#"{{"v":1,"turn":"h8","type":"turn_end","ts":{ts}}}"#),
        // A turn of provider chunks (a tool call streamed, no finish), then its
        // `turn_end` of the common shape: read at once, it flushes the chunks' decoder.
        format!(
            r#"{{"turn":"h9","attempt":0,"ts":{ts},"type":"provider_chunk","provider":"openai.chat","data":{{"id":"c1","created":1770000000,"model":"gpt-4o","choices":[{{"index":0,"delta":{{"role":"assistant","content":"Refunding."}}}}]}}}}"#
        ),
        format!(
            r#"{{"turn":"h9","attempt":0,"ts":{ts},"type":"provider_chunk","provider":"openai.chat","data":{{"id":"c1","created":1770000000,"model":"gpt-4o","choices":[{{"index":0,"delta":{{"tool_calls":[{{"index":0,"id":"call_1","type":"function","function":{{"name":"refund","arguments":"{{\"order\":1}}"}}}}]}}}}]}}}}"#
        ),
        format!(r#"{{"turn":"h9","type":"turn_end","ts":{ts}}}"#),
        // An Anthropic stream cut off before `message_stop`, then its `turn_end`: flushing
        // the decoder bills what the attempt used before the turn closes. Held undecoded,
        // the turn_end would close the turn first, and the usage would come after it.
        format!(
            r#"{{"turn":"h10","attempt":0,"ts":{ts},"type":"provider_chunk","provider":"anthropic","data":{{"type":"message_start","message":{{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"usage":{{"input_tokens":1200,"output_tokens":1}}}}}}}}"#
        ),
        format!(
            r#"{{"turn":"h10","attempt":0,"ts":{ts},"type":"provider_chunk","provider":"anthropic","data":{{"type":"content_block_start","index":0,"content_block":{{"type":"text","text":""}}}}}}"#
        ),
        format!(
            r#"{{"turn":"h10","attempt":0,"ts":{ts},"type":"provider_chunk","provider":"anthropic","data":{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":"Refunding order 1"}}}}}}"#
        ),
        format!(r#"{{"v":1,"turn":"h10","type":"turn_end","ts":{ts}}}"#),
    ];
    for (i, h) in hostile.into_iter().enumerate() {
        lines.insert(500 + i * 700, h);
    }
    lines
}

/// The place of line `i`: message `i / PER_MESSAGE + 1`, line `i % PER_MESSAGE`.
fn place(i: usize) -> Place {
    Place {
        msg: (i / PER_MESSAGE) as u64 + 1,
        line: (i % PER_MESSAGE) as u32,
    }
}

/// What a run gave: outputs in order, counters, bad lines (number and reason), metrics.
#[derive(Debug, PartialEq)]
struct Gave {
    outputs: Vec<String>,
    counters: InputCounters,
    bad: Vec<(u64, String)>,
    values: BTreeMap<String, String>,
}

/// Feed lines `range` of `log` to a partition's ingest path holding turns, a message at a
/// time at its arrival time, ticking once a second of it; `placed` places each line.
fn feed(
    ingest: &mut ShardedIngest,
    log: &[String],
    range: std::ops::Range<usize>,
    placed: bool,
    metrics: &Metrics,
    gave: &mut (Vec<String>, Vec<(u64, String)>),
) {
    let mut out = Vec::new();
    let (outputs, bad) = gave;
    let mut note = |n: Note<'_>| {
        if let Note::Line {
            number,
            outcome: Err(e),
            ..
        } = &n
        {
            bad.push((*number, e.reason.as_str().to_string()));
        }
        Ingested(n).emit(metrics);
    };
    let id = ingest.stream(Source::Nats, "host-a:agent.jsonl");
    for (i, line) in log.iter().enumerate().take(range.end).skip(range.start) {
        let now = 1_794_477_600_000i64 + (i / PER_MESSAGE) as i64 * 100;
        if placed {
            ingest.place_next_line(place(i));
        }
        ingest.line(id, None, line.as_bytes(), Some(now), &mut out, &mut note);
        if i % PER_MESSAGE == PER_MESSAGE - 1 && (i / PER_MESSAGE) % 10 == 9 {
            ingest.tick(now, &mut out, &mut note);
        }
        for o in out.drain(..) {
            metrics.observe(&o);
            outputs.push(match &o {
                Output::TurnClosed(r) => serde_json::to_string(r).unwrap(),
                Output::Finding(f, _) => serde_json::to_string(f).unwrap(),
                Output::Retry { reason, .. } => format!("retry {reason:?}"),
            });
        }
    }
    ingest.flush(&mut out);
}

fn partition(
    metrics: &Arc<Metrics>,
    restored: Option<Restored>,
    held: Option<HoldSnapshot>,
) -> ShardedIngest {
    let mut ingest = start(1, restored, metrics);
    assert!(ingest.hold_turns(SETTLE_MS, held));
    ingest
}

fn finish(
    mut ingest: ShardedIngest,
    metrics: &Metrics,
    mut gave: (Vec<String>, Vec<(u64, String)>),
) -> Gave {
    let mut out = Vec::new();
    ingest.close_all(&mut out, &mut |n| {
        if let Note::Line {
            number,
            outcome: Err(e),
            ..
        } = &n
        {
            gave.1.push((*number, e.reason.as_str().to_string()));
        }
        Ingested(n).emit(metrics)
    });
    ingest.flush(&mut out);
    for o in out.drain(..) {
        metrics.observe(&o);
        gave.0.push(match &o {
            Output::TurnClosed(r) => serde_json::to_string(r).unwrap(),
            Output::Finding(f, _) => serde_json::to_string(f).unwrap(),
            Output::Retry { reason, .. } => format!("retry {reason:?}"),
        });
    }
    let mut state = ingest.checkpoint(&mut out).expect("one thread");
    assert!(state.held.is_none(), "nothing held at the end");
    gave.1.sort();
    Gave {
        outputs: gave.0,
        counters: std::mem::take(&mut state.counters),
        bad: gave.1,
        values: values(metrics),
    }
}

fn whole_run(placed: bool) -> Gave {
    let log = log();
    let metrics = Arc::new(Metrics::new(MetricsConfig::default()).unwrap());
    let mut ingest = partition(&metrics, None, None);
    let mut gave = Default::default();
    feed(&mut ingest, &log, 0..log.len(), placed, &metrics, &mut gave);
    finish(ingest, &metrics, gave)
}

#[test]
fn lines_held_undecoded_give_what_events_held_decoded_give() {
    let undecoded = whole_run(true);
    let decoded = whole_run(false);
    assert!(
        undecoded.outputs.len() > 300,
        "{} outputs",
        undecoded.outputs.len()
    );
    assert_eq!(undecoded.counters, decoded.counters);
    assert_eq!(undecoded.bad, decoded.bad, "the same bad lines, by number");
    assert!(
        decoded.bad.len() >= 5,
        "the hostile lines are bad lines: {:?}",
        decoded.bad
    );
    assert_eq!(undecoded.values, decoded.values, "the same metric values");
    assert!(
        undecoded.outputs == decoded.outputs,
        "the same reports and findings, in the same order"
    );
}

#[test]
fn a_checkpoint_of_lines_held_undecoded_resumes_to_the_same() {
    let log = log();
    let reference = whole_run(true);
    for cut in [PER_MESSAGE * 40, PER_MESSAGE * 93 + 17] {
        let metrics = Arc::new(Metrics::new(MetricsConfig::default()).unwrap());
        let mut ingest = partition(&metrics, None, None);
        let mut gave = Default::default();
        feed(&mut ingest, &log, 0..cut, true, &metrics, &mut gave);
        let mut out = Vec::new();
        let state = ingest.checkpoint(&mut out).expect("one thread");
        assert!(out.is_empty());
        // Through JSON, as stored; then killed.
        let json = serde_json::to_string(&state.held).unwrap();
        let streams = state.streams.states.clone();
        let snapshot = metrics.snapshot();
        drop(ingest);
        let mut held: Option<HoldSnapshot> = serde_json::from_str(&json).unwrap();
        let h = held.as_mut().expect("turns held at the cut");
        assert!(h.ref_count() > 100, "held by reference: {}", h.ref_count());
        assert!(
            json.contains("\"deferred\""),
            "lines held undecoded say so in the checkpoint"
        );
        let lost = h.resolve(|p| {
            let i = (p.msg as usize - 1) * PER_MESSAGE + p.line as usize;
            (p.line < PER_MESSAGE as u32 && i < cut).then(|| log[i].as_bytes())
        });
        assert_eq!(lost, 0);
        let metrics = Arc::new(Metrics::new(MetricsConfig::default()).unwrap());
        metrics.restore(&snapshot).unwrap();
        let restored = Restored {
            correlator: state.correlator,
            counters: state.counters,
            clock_ms: state.clock_ms,
            joined: Default::default(),
            streams,
        };
        let mut ingest = partition(&metrics, Some(restored), held);
        feed(&mut ingest, &log, cut..log.len(), true, &metrics, &mut gave);
        let resumed = finish(ingest, &metrics, gave);
        assert_eq!(resumed.counters, reference.counters, "cut {cut}");
        assert_eq!(resumed.values, reference.values, "cut {cut}");
        // A new owner numbers the lines it reads from where it started; the lines held
        // across the cut keep the numbers they were read with.
        let mut bad: Vec<(u64, String)> = reference
            .bad
            .iter()
            .map(|(n, r)| (if *n > cut as u64 { n - cut as u64 } else { *n }, r.clone()))
            .collect();
        bad.sort();
        assert_eq!(resumed.bad, bad, "cut {cut}");
        assert!(
            resumed.outputs == reference.outputs,
            "cut {cut}: same outputs"
        );
    }
}

/// A hold past its bound releases its quietest turns before they are quiet: counted in
/// `retryscope_nats_held_turns_released_early_total` (in the partition's metrics, which
/// travel in its checkpoint), and nothing is lost: every line is decoded and correlated.
#[test]
fn a_full_hold_counts_the_turns_it_releases_early() {
    let mut fleet = Fleet::new(FleetConfig::bench(3));
    let mut log = Vec::new();
    let mut line = String::new();
    while log.len() < TurnHold::MAX_EVENTS + 20_000 && fleet.next_line(&mut line) {
        log.push(std::mem::take(&mut line));
    }
    let metrics = Arc::new(Metrics::new(MetricsConfig::default()).unwrap());
    let mut ingest = partition(&metrics, None, None);
    let mut out = Vec::new();
    let mut note = |n: Note<'_>| Ingested(n).emit(&metrics);
    let id = ingest.stream(Source::Nats, "host-a:agent.jsonl");
    // All within the settle time: only the bound releases anything.
    let now = 1_794_477_600_000i64;
    for (i, line) in log.iter().enumerate() {
        ingest.place_next_line(place(i));
        ingest.line(id, None, line.as_bytes(), Some(now), &mut out, &mut note);
    }
    ingest.tick(now, &mut out, &mut note);
    let early = value(&metrics, "retryscope_nats_held_turns_released_early_total");
    let turns_out = out
        .iter()
        .filter(|o| matches!(o, Output::TurnClosed(_)))
        .count() as f64;
    assert!(early > 0.0, "turns released early are counted");
    assert!(early <= turns_out, "{early} counted, {turns_out} closed");
    let gave = finish(ingest, &metrics, Default::default());
    assert_eq!(gave.counters.lines, log.len() as u64);
    assert_eq!(
        gave.counters.events,
        log.len() as u64,
        "every line correlated"
    );
    assert!(gave.bad.is_empty());
}

fn value(metrics: &Metrics, name: &str) -> f64 {
    let text = String::from_utf8(metrics.render().1).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0.0)
}
