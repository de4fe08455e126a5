//! Sharded `check` for native-format inputs: two workers each correlate the turns whose id
//! hashes to them, and the calling thread merges their results back into the exact order a
//! single correlator would produce.
//!
//! Both workers read every input file themselves (from the page cache; no copies between
//! threads). Each finds a line's top-level `turn` with a light scan, fully decodes only its own
//! lines, and tags what it produces with the global line number (a turn closed by `turn_end`,
//! a bad line) or, for turns still open at end of input, the line that opened them.
//! Merging by those tags reproduces the single-threaded output order. Turns are independent in
//! the correlator, so results do not depend on which worker took which turn.
//!
//! Memory: `max_open_turns` is split between the workers (as `run --workers` does), and the
//! turns still open at the end are closed and sent in batches, merged as they come (each
//! worker's come in opening order): the reports of every open turn never exist at once.

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, sync_channel};

use super::{BadLine, CheckObserver, InputSpec, Summary};
use crate::engine::SinkList;
use retryscope_core::correlate::{Correlator, CorrelatorConfig, CorrelatorStats, Output};
use retryscope_core::cost::PriceTable;
use retryscope_core::decode::Format;
use retryscope_core::ingest::{Ingest, Note, Source};
use retryscope_core::input::{Line, LineReader};
use retryscope_core::pipeline::InputCounters;
use retryscope_core::report::TurnReport;
use retryscope_core::turn_route;

/// Workers; fixed (not the core count) so that results never depend on the machine.
const SHARDS: usize = 2;
/// Global lines per result batch (the same boundaries in every worker).
/// 2,048: results in flight (thousands of evicted turns' reports per batch under a full
/// `--max-open-turns`) stay a small part of the memory the open turns take.
const BATCH_LINES: u64 = 2048;

enum Item {
    Turn(Box<TurnReport>),
    Bad {
        input: usize,
        line: u64,
        reason: String,
    },
    Unreadable {
        input: usize,
        message: String,
    },
}

struct Batch {
    /// (phase, sequence, item): phase 0 in-stream by line, phase 1 end-of-input by opening line.
    items: Vec<(u8, u64, Item)>,
}

struct Final {
    counters: InputCounters,
    stats: CorrelatorStats,
    opened: u64,
}

enum Message {
    Batch(Batch),
    Done(Box<Final>),
}

/// Run the sharded check over files. `names[i]` names input `i` in messages.
pub(super) fn run(
    inputs: &[InputSpec],
    names: Vec<String>,
    cfg: CorrelatorConfig,
    prices: Arc<PriceTable>,
    max_line_bytes: usize,
    observer: &mut dyn CheckObserver,
    sinks: &mut SinkList<'_>,
) -> Summary {
    let paths: Arc<Vec<Option<std::path::PathBuf>>> = Arc::new(
        inputs
            .iter()
            .map(|p| match p {
                InputSpec::Path(path) => Some(path.clone()),
                InputSpec::Stdin => None,
            })
            .collect(),
    );
    let progress = Arc::new(AtomicU64::new(0));
    let mut cfg = cfg;
    cfg.max_open_turns = cfg.max_open_turns.div_ceil(SHARDS).max(1);
    let mut result_rxs = Vec::new();
    let mut workers = Vec::new();
    for shard in 0..SHARDS {
        // Two batches in flight per worker: each can hold thousands of evicted turns' reports.
        let (tx, rx) = sync_channel::<Message>(2);
        result_rxs.push(rx);
        let cfg = cfg.clone();
        let prices = prices.clone();
        let paths = paths.clone();
        let progress = progress.clone();
        workers.push(std::thread::spawn(move || {
            let correlator = Correlator::new(cfg, prices);
            worker(shard, &paths, max_line_bytes, tx, correlator, &progress)
        }));
    }

    let mut summary = Summary::default();
    let mut counters = InputCounters::default();
    let mut stats = CorrelatorStats::default();
    let mut finals = 0;
    let mut opened = 0;
    // Per worker: its end-of-input turns not yet merged (in opening order), whether it has
    // begun sending them (its in-stream results are all in), and whether it has finished.
    let mut tails: Vec<VecDeque<(u64, Item)>> = (0..SHARDS).map(|_| VecDeque::new()).collect();
    let mut at_end = [false; SHARDS];
    let mut ended = [false; SHARDS];
    loop {
        let mut merged: Vec<(u64, Item)> = Vec::new();
        for (w, rx) in result_rxs.iter().enumerate() {
            if ended[w] {
                continue;
            }
            match rx.recv() {
                Ok(Message::Batch(b)) => {
                    for (phase, seq, item) in b.items {
                        if phase == 0 {
                            merged.push((seq, item));
                        } else {
                            at_end[w] = true;
                            tails[w].push_back((seq, item));
                        }
                    }
                }
                Ok(Message::Done(f)) => {
                    counters.add(&f.counters);
                    stats.add(&f.stats);
                    opened = opened.max(f.opened);
                    finals += 1;
                    ended[w] = true;
                }
                Err(_) => ended[w] = true,
            }
        }
        merged.sort_by_key(|(seq, _)| *seq);
        for (_, item) in merged {
            emit(item, &names, &mut summary, observer, sinks);
        }
        // End-of-input turns once every worker's in-stream results are in: a two-way merge
        // that emits a turn only when no worker can still send one opened before it.
        if (0..SHARDS).all(|w| at_end[w] || ended[w]) {
            loop {
                let next = (0..SHARDS)
                    .filter_map(|w| tails[w].front().map(|(seq, _)| (*seq, w)))
                    .min();
                let Some((_, w)) = next else { break };
                let blocked = (0..SHARDS).any(|v| v != w && !ended[v] && tails[v].is_empty());
                if blocked {
                    break;
                }
                if let Some((_, item)) = tails[w].pop_front() {
                    emit(item, &names, &mut summary, observer, sinks);
                }
            }
        }
        observer.progress(progress.load(Ordering::Relaxed));
        if ended.iter().all(|e| *e) {
            break;
        }
    }
    for w in workers {
        let _ = w.join();
    }
    summary.inputs = opened;
    // Sharding reads native inputs only.
    for _ in 0..opened {
        summary.saw_input(retryscope_core::coverage::InputKind::Native);
    }
    if finals < SHARDS {
        summary
            .unreadable_inputs
            .push("<internal error: a check worker stopped early>".to_owned());
    }
    summary.finish_with(&counters, stats);
    summary
}

/// Hand one merged result to the observer.
fn emit(
    item: Item,
    names: &[String],
    summary: &mut Summary,
    observer: &mut dyn CheckObserver,
    sinks: &mut SinkList<'_>,
) {
    match item {
        Item::Turn(report) => super::deliver(&Output::TurnClosed(report), summary, sinks),
        Item::Bad {
            input,
            line,
            reason,
        } => observer.bad_line(&BadLine {
            input: names.get(input).cloned().unwrap_or_default(),
            line,
            reason,
        }),
        Item::Unreadable { input, message } => {
            let name = names.get(input).cloned().unwrap_or_default();
            observer.unreadable(&name, &io::Error::other(message));
            summary.unreadable_inputs.push(name);
        }
    }
}

/// The turns closed at end of input in `out`, tagged with the line that opened them.
fn closed_at_end(out: &mut Vec<Output>) -> Vec<(u8, u64, Item)> {
    out.drain(..)
        .filter_map(|o| match o {
            Output::TurnClosed(report) => Some((1, report.opened_seq, Item::Turn(report))),
            _ => None,
        })
        .collect()
}

/// One worker: reads every input, correlates the lines of its shard, and sends a batch of
/// tagged results per `BATCH_LINES` global lines (the same boundaries in both workers).
fn worker(
    shard: usize,
    paths: &[Option<std::path::PathBuf>],
    max_line_bytes: usize,
    results: SyncSender<Message>,
    correlator: Correlator,
    progress: &AtomicU64,
) {
    // Only native lines reach the workers (see `check`), read through the one ingest path.
    let mut ingest = Ingest::new(correlator, Format::Native);
    let mut out: Vec<Output> = Vec::new();
    let mut items: Vec<(u8, u64, Item)> = Vec::new();
    let mut global: u64 = 0;
    let mut clock: i64 = 0;
    let mut opened = 0;
    let mut done_bytes = 0u64;
    let flush = |items: &mut Vec<(u8, u64, Item)>| -> bool {
        results
            .send(Message::Batch(Batch {
                items: std::mem::take(items),
            }))
            .is_ok()
    };
    for (input, path) in paths.iter().enumerate() {
        let Some(path) = path else { continue };
        let file = match std::fs::File::open(path) {
            Ok(f) => f,
            Err(e) => {
                if shard == 0 {
                    items.push((
                        0,
                        global,
                        Item::Unreadable {
                            input,
                            message: e.to_string(),
                        },
                    ));
                }
                continue;
            }
        };
        opened += 1;
        let name = path.display().to_string();
        let stream = ingest.stream(Source::File, &name);
        ingest.next_input();
        let mut lines = LineReader::new(file, max_line_bytes);
        loop {
            let line = match lines.next_line() {
                Ok(Some(line)) => line,
                Ok(None) => break,
                Err(e) => {
                    if shard == 0 {
                        items.push((
                            0,
                            global,
                            Item::Unreadable {
                                input,
                                message: e.to_string(),
                            },
                        ));
                    }
                    break;
                }
            };
            global += 1;
            match line {
                Line::Complete { number, bytes } => {
                    let (owner, ts) = if bytes.iter().all(u8::is_ascii_whitespace) {
                        (usize::MAX, None)
                    } else {
                        route(bytes)
                    };
                    // Every worker sees every line's time, so an event without `ts` gets the
                    // same stand-in time (the latest seen) as on the single-threaded path.
                    if let Some(ts) = ts {
                        clock = clock.max(ts);
                    }
                    if owner == shard {
                        ingest.pipeline_mut().set_sequence_hint(global);
                        ingest.line(
                            stream,
                            Some(number),
                            bytes,
                            Some(clock),
                            &mut out,
                            &mut |n| push_bad(&mut items, global, input, n),
                        );
                        for o in out.drain(..) {
                            if let Output::TurnClosed(report) = o {
                                items.push((0, global, Item::Turn(report)));
                            }
                        }
                    }
                }
                Line::TooLong { number, len } => {
                    if shard == 0 {
                        ingest.too_long(stream, Some(number), len, &mut |n| {
                            push_bad(&mut items, global, input, n)
                        });
                    }
                }
            }
            if global.is_multiple_of(BATCH_LINES) {
                if shard == 0 {
                    progress.store(done_bytes + lines.consumed(), Ordering::Relaxed);
                }
                if !flush(&mut items) {
                    return;
                }
            }
        }
        done_bytes += lines.consumed();
    }
    if !flush(&mut items) {
        return;
    }
    ingest.close_all_batched(super::CLOSE_BATCH, &mut out, &mut |_| {}, &mut |o| {
        let _ = results.send(Message::Batch(Batch {
            items: closed_at_end(o),
        }));
    });
    let _ = results.send(Message::Batch(Batch {
        items: closed_at_end(&mut out),
    }));
    let _ = results.send(Message::Done(Box::new(Final {
        counters: ingest.counters().clone(),
        stats: ingest.correlator().stats(),
        opened,
    })));
}

/// The worker that owns a line (by a fixed hash of its top-level `turn`; worker 0 when the
/// line has none, so that it reports the error) and the line's `ts`, if it has a valid one.
fn route(line: &[u8]) -> (usize, Option<i64>) {
    let (hash, ts) = turn_route::turn_hash_and_ts(line);
    match hash {
        Some(hash) => ((hash % SHARDS as u64) as usize, ts),
        None => (0, ts),
    }
}

/// A bad line from the ingest path's note, tagged with the global line it was read at.
fn push_bad(items: &mut Vec<(u8, u64, Item)>, global: u64, input: usize, note: Note<'_>) {
    if let Note::Line {
        number,
        outcome: Err(e),
        ..
    } = note
    {
        let reason = e.to_string();
        items.push((
            0,
            global,
            Item::Bad {
                input,
                line: number,
                reason,
            },
        ));
    }
}

/// Whether the inputs suit the sharded path: files only (each worker reads them), and enough
/// of them to pay for the threads.
pub(super) fn worthwhile(inputs: &[InputSpec], total_bytes: u64) -> bool {
    inputs.iter().all(|i| matches!(i, InputSpec::Path(_))) && total_bytes >= (8 << 20)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_top_level_turn_only() {
        let cases: [(&[u8], Option<&[u8]>); 7] = [
            (br#"{"turn":"t1","type":"text"}"#, Some(br#""t1""#)),
            (
                br#"{ "type" : "x", "args": {"turn": "nested"}, "turn" : "real" }"#,
                Some(br#""real""#),
            ),
            (
                br#"{"text":"a \"turn\":\"fake\"","turn":"ok"}"#,
                Some(br#""ok""#),
            ),
            (br#"{"turn":42,"type":"text"}"#, Some(b"42")),
            (br#"{"type":"text"}"#, None),
            (b"not json", None),
            (br#"{"a":[1,{"b":"]"}],"turn":"x\"y"}"#, Some(br#""x\"y""#)),
        ];
        for (line, want) in cases {
            assert_eq!(
                turn_route::top_level_turn_and_ts(line).0,
                want,
                "{}",
                String::from_utf8_lossy(line)
            );
        }
    }

    #[test]
    fn escaped_and_plain_spellings_of_one_turn_share_a_shard() {
        let plain = route(br#"{"turn":"tA","type":"text"}"#).0;
        let escaped = route(br#"{"turn":"t\u0041","type":"text"}"#).0;
        assert_eq!(plain, escaped);
    }

    #[test]
    fn ts_is_read_like_the_decoder_reads_it() {
        assert_eq!(route(br#"{"ts":1000,"turn":"a"}"#).1, Some(1000));
        assert_eq!(
            route(br#"{"turn":"a","ts":"1970-01-01T00:00:01.5Z"}"#).1,
            Some(1500)
        );
        assert_eq!(route(br#"{"turn":"a","ts":"yesterday"}"#).1, None);
        assert_eq!(route(br#"{"turn":"a","text":"x"}"#).1, None);
    }
}
