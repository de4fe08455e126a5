//! What holding turns until quiet (`run --nats --settle-secs`, `retryscope_core::reorder`)
//! costs a cluster collector's ingest path, without NATS: the log `bench_nats` ships (the
//! demo fleet), cut into messages of 128 lines and routed by turn to 16 partitions as the
//! shipper does, each line placed (readable again) and arriving at `--rate` events/s on the
//! partition's clock, ticked once a second of it, then drained. Once without a hold and once
//! per `--settle-secs` value; prints ns/event and each hold's cost over none. One thread, no
//! I/O: the differences are the hold's. Asserts nothing.
//!
//! ```sh
//! cargo run --release --example bench_hold -- [--events 3000000] [--rate 600000]
//!     [--settle-secs 1,5] [--repeat 3]
//! ```

use std::sync::Arc;
use std::time::Instant;

use retryscope::demo::{Fleet, FleetConfig};
use retryscope_core::correlate::{Correlator, CorrelatorConfig, Output};
use retryscope_core::cost::PriceTable;
use retryscope_core::decode::Format;
use retryscope_core::ingest::{Ingest, Source};
use retryscope_core::reorder::Place;

/// The binary's allocator, as the collectors run on it.
#[path = "../src/allocator.rs"]
#[allow(dead_code)]
mod allocator;

#[global_allocator]
static GLOBAL: allocator::Allocator = allocator::Allocator;

const PARTITIONS: usize = 16;
const LINES_PER_MESSAGE: usize = 128;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn main() {
    let events: usize = arg("--events")
        .and_then(|v| v.parse().ok())
        .unwrap_or(3_000_000);
    let rate: f64 = arg("--rate")
        .and_then(|v| v.parse().ok())
        .unwrap_or(600_000.0);
    let settles: Vec<i64> = arg("--settle-secs")
        .unwrap_or_else(|| "1,5".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let repeat: usize = arg("--repeat")
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .max(1);
    // Each partition's messages: (arrival ms, lines).
    let mut fleet = Fleet::new(FleetConfig::bench(7));
    let mut lines = Vec::with_capacity(events);
    let mut line = String::new();
    while lines.len() < events && fleet.next_line(&mut line) {
        lines.push(std::mem::take(&mut line));
    }
    let mut parts: Vec<Vec<(i64, Vec<String>)>> = vec![Vec::new(); PARTITIONS];
    let mut open: Vec<Vec<String>> = vec![Vec::new(); PARTITIONS];
    for (i, l) in lines.into_iter().enumerate() {
        let p = retryscope_core::turn_route::shard_of_line(l.as_bytes(), PARTITIONS as u32);
        let p = p as usize;
        open[p].push(l);
        if open[p].len() == LINES_PER_MESSAGE {
            let at = (i as f64 * 1000.0 / rate) as i64;
            parts[p].push((at, std::mem::take(&mut open[p])));
        }
    }
    let end = (events as f64 * 1000.0 / rate) as i64;
    for (p, rest) in open.into_iter().enumerate() {
        if !rest.is_empty() {
            parts[p].push((end, rest));
        }
    }
    println!(
        "{events} events in {PARTITIONS} partitions, messages of {LINES_PER_MESSAGE} lines, \
         arriving at {rate:.0}/s; median of {repeat}"
    );
    let base = median((0..repeat).map(|_| pass(&parts, None)).collect());
    println!(
        "no hold: {:.0} ns/event ({} turns)",
        base.0 * 1e9 / events as f64,
        base.1
    );
    for s in settles {
        let run = median((0..repeat).map(|_| pass(&parts, Some(s * 1000))).collect());
        println!(
            "settle {s} s: {:.0} ns/event ({} turns): the hold costs {:.0} ns/event, {:.0}% over none",
            run.0 * 1e9 / events as f64,
            run.1,
            (run.0 - base.0) * 1e9 / events as f64,
            (run.0 / base.0 - 1.0) * 100.0
        );
    }
}

fn median(mut runs: Vec<(f64, u64)>) -> (f64, u64) {
    runs.sort_by(|a, b| a.0.total_cmp(&b.0));
    runs[runs.len() / 2]
}

/// One pass over every partition's messages, interleaved by arrival as one collector task
/// polls them: seconds taken and turns reported.
fn pass(parts: &[Vec<(i64, Vec<String>)>], settle_ms: Option<i64>) -> (f64, u64) {
    let prices = Arc::new(PriceTable::builtin());
    let mut ingests: Vec<Ingest> = (0..parts.len())
        .map(|_| {
            let c = Correlator::new(CorrelatorConfig::default(), prices.clone());
            let mut i = Ingest::new(c, Format::Native);
            i.join_sessions();
            i.without_origin_lines();
            if let Some(s) = settle_ms {
                i.pipeline_mut().hold_turns(s, None);
            }
            i
        })
        .collect();
    let streams: Vec<_> = ingests
        .iter_mut()
        .map(|i| i.stream(Source::Nats, "host-a:agent.jsonl"))
        .collect();
    let mut ticks = vec![0i64; parts.len()];
    let mut next = vec![0usize; parts.len()];
    let mut out: Vec<Output> = Vec::new();
    let mut turns = 0u64;
    let mut msg = 0u64;
    let mut count = |out: &mut Vec<Output>| {
        turns += out
            .iter()
            .filter(|o| matches!(o, Output::TurnClosed(_)))
            .count() as u64;
        out.clear();
    };
    let started = Instant::now();
    // The partition whose next message arrived first, each time.
    while let Some(p) = (0..parts.len())
        .filter(|&p| next[p] < parts[p].len())
        .min_by_key(|&p| parts[p][next[p]].0)
    {
        let (at, lines) = &parts[p][next[p]];
        next[p] += 1;
        msg += 1;
        for (i, l) in lines.iter().enumerate() {
            ingests[p].place_next_line(Place {
                msg,
                line: i as u32,
            });
            ingests[p].line(
                streams[p],
                None,
                l.as_bytes(),
                Some(*at),
                &mut out,
                &mut |_| {},
            );
        }
        if at - ticks[p] >= 1000 {
            ticks[p] = *at;
            ingests[p].tick(*at, &mut out, &mut |_| {});
        }
        count(&mut out);
    }
    for i in &mut ingests {
        i.close_all(&mut out, &mut |_| {});
        count(&mut out);
    }
    (started.elapsed().as_secs_f64(), turns)
}
