//! `retryscope check`: correlate whole recorded inputs and summarize them.
//!
//! Inputs are files, directories (every regular file below, in name order) or stdin. One
//! correlator spans all inputs, so a turn split across rotated files is still one turn.
//! Closed turns are handed to a callback as they close (output streams, memory stays bounded);
//! the [`Summary`] accumulates counts, findings and cost.

pub mod files;
pub mod html;
pub mod human;
mod parallel;
pub mod render;

use std::collections::BTreeMap;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use std::sync::Arc;

use crate::correlate::{Correlator, CorrelatorConfig, Output};
use crate::cost::PriceTable;
use crate::decode::{Format, StreamDecoder};
use crate::finding::{FindingKind, Severity};
use crate::input::{Line, LineReader};
use crate::pipeline::{InputCounters, Pipeline};
use crate::report::TurnReport;

/// One input to check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputSpec {
    /// A file or a directory.
    Path(PathBuf),
    /// Standard input.
    Stdin,
}

impl InputSpec {
    /// `-` is stdin, anything else a path.
    pub fn parse(arg: &str) -> Self {
        if arg == "-" {
            InputSpec::Stdin
        } else {
            InputSpec::Path(PathBuf::from(arg))
        }
    }
}

/// A line that could not be used, for the caller to report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadLine {
    /// The input's name.
    pub input: String,
    /// 1-based line number.
    pub line: u64,
    /// Why.
    pub reason: String,
}

/// Totals of a check run (the `{"summary": ...}` line of `--json`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Inputs read.
    pub inputs: u64,
    /// Inputs that could not be read.
    pub unreadable_inputs: Vec<String>,
    /// Turns.
    pub turns: u64,
    /// Turns by status.
    pub turns_by_status: BTreeMap<String, u64>,
    /// Attempts.
    pub attempts: u64,
    /// Attempts by outcome.
    pub attempts_by_outcome: BTreeMap<String, u64>,
    /// Retries.
    pub retries: u64,
    /// Findings by kind.
    pub findings: BTreeMap<String, u64>,
    /// Findings by severity.
    pub findings_by_severity: BTreeMap<String, u64>,
    /// Billed USD.
    pub cost_usd: f64,
    /// USD of abandoned and failed attempts.
    pub wasted_cost_usd: f64,
    /// Attempts whose model has no price (their cost is not in `cost_usd`).
    pub unpriced_attempts: u64,
    /// Events correlated.
    pub events: u64,
    /// Lines read.
    pub lines: u64,
    /// Bad lines (skipped).
    pub bad_lines: u64,
    /// Bad lines by reason.
    pub bad_lines_by_reason: BTreeMap<String, u64>,
    /// Events of unknown types (skipped).
    pub unknown_types: u64,
    /// Unknown fields (ignored).
    pub unknown_fields: u64,
    /// Events out of order.
    pub late_events: u64,
    /// Events for turns already closed (dropped).
    pub after_close_events: u64,
}

impl Summary {
    fn add_turn(&mut self, r: &TurnReport) {
        self.turns += 1;
        *self
            .turns_by_status
            .entry(r.status.as_str().to_owned())
            .or_insert(0) += 1;
        self.attempts += r.attempts.len() as u64;
        for a in &r.attempts {
            *self
                .attempts_by_outcome
                .entry(a.outcome.as_str().to_owned())
                .or_insert(0) += 1;
            if a.cost_usd.is_none() {
                self.unpriced_attempts += 1;
            }
        }
        self.retries += u64::from(r.retries);
        for f in &r.findings {
            *self.findings.entry(f.kind.as_str().to_owned()).or_insert(0) += 1;
            *self
                .findings_by_severity
                .entry(f.severity.as_str().to_owned())
                .or_insert(0) += 1;
        }
        self.cost_usd += r.cost_usd;
        self.wasted_cost_usd += r.wasted_cost_usd;
    }

    fn finish(&mut self, counters: &InputCounters, correlator: &Correlator) {
        self.finish_with(counters, correlator.stats());
    }

    fn finish_with(&mut self, counters: &InputCounters, stats: crate::correlate::CorrelatorStats) {
        self.events = counters.events;
        self.lines = counters.lines;
        self.bad_lines = counters.bad_total();
        self.bad_lines_by_reason = counters.bad_lines.clone();
        self.unknown_types = counters.skips.unknown_types;
        self.unknown_fields = counters.skips.unknown_fields;
        self.late_events = stats.late_events;
        self.after_close_events = stats.after_close_events;
        for kind in FindingKind::ALL {
            self.findings.entry(kind.as_str().to_owned()).or_insert(0);
        }
    }

    /// The most severe finding, if any.
    pub fn max_severity(&self) -> Option<Severity> {
        Severity::ALL.into_iter().rev().find(|s| {
            self.findings_by_severity
                .get(s.as_str())
                .copied()
                .unwrap_or(0)
                > 0
        })
    }
}

/// Expand inputs: directories become their regular files that look like logs (see
/// [`files`]), recursively, in name order.
pub fn expand_inputs(specs: &[InputSpec]) -> Vec<InputSpec> {
    expand_inputs_listing_skipped(specs).0
}

/// [`expand_inputs`], also returning the files of directories skipped as not logs.
pub fn expand_inputs_listing_skipped(specs: &[InputSpec]) -> (Vec<InputSpec>, Vec<PathBuf>) {
    let mut out = Vec::new();
    let mut skipped = Vec::new();
    for spec in specs {
        match spec {
            InputSpec::Path(p) if p.is_dir() => collect_dir(p, &mut out, &mut skipped),
            other => out.push(other.clone()),
        }
    }
    (out, skipped)
}

fn collect_dir(dir: &Path, out: &mut Vec<InputSpec>, skipped: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        out.push(InputSpec::Path(dir.to_path_buf()));
        return;
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for p in paths {
        if p.is_dir() {
            collect_dir(&p, out, skipped);
        } else if p.is_file() {
            if files::is_log_file(&p) {
                out.push(InputSpec::Path(p));
            } else {
                skipped.push(p);
            }
        }
    }
}

/// Total size of the file inputs, for a progress bar.
pub fn total_bytes(inputs: &[InputSpec]) -> u64 {
    inputs
        .iter()
        .filter_map(|i| match i {
            InputSpec::Path(p) => std::fs::metadata(p).ok().map(|m| m.len()),
            InputSpec::Stdin => None,
        })
        .sum()
}

/// Callbacks of a check run.
pub trait CheckObserver {
    /// A turn closed.
    fn turn(&mut self, report: &TurnReport);
    /// A line was skipped.
    fn bad_line(&mut self, bad: &BadLine);
    /// An input could not be read.
    fn unreadable(&mut self, input: &str, error: &io::Error);
    /// Progress: bytes consumed so far across file inputs.
    fn progress(&mut self, _bytes: u64) {}
}

/// Settings of a check run.
#[derive(Debug, Clone)]
pub struct CheckOptions {
    /// Lines longer than this are skipped and counted.
    pub max_line_bytes: usize,
    /// Input format; `Auto` sniffs each input's first bytes.
    pub format: Format,
    /// Shard large native inputs over two worker threads.
    pub parallel: bool,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            max_line_bytes: 1 << 20,
            format: Format::Auto,
            parallel: true,
        }
    }
}

/// Bytes sniffed to detect an input's format.
const SNIFF_BYTES: usize = 64 << 10;

/// How often (in lines) the sequential path lets idle turns time out on its logical clock.
const TICK_EVERY_LINES: u32 = 4096;

fn stream_name(name: &str) -> String {
    std::path::Path::new(name)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| name.to_owned())
}

fn read_head(reader: &mut dyn Read) -> io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(SNIFF_BYTES);
    reader.take(SNIFF_BYTES as u64).read_to_end(&mut head)?;
    Ok(head)
}

fn pick_format(requested: Format, head: &[u8]) -> Format {
    match requested {
        Format::Auto => crate::decode::detect(head),
        explicit => explicit,
    }
}

/// Correlate `inputs` (already expanded) and return the summary.
///
/// Native-format inputs large enough to be worth it are checked by two sharded workers (see
/// `parallel`); everything else, and any run with an idle timeout (whose logical clock must
/// see every event), takes the sequential path. Both give the same reports in the same order.
pub fn check(
    inputs: &[InputSpec],
    cfg: CorrelatorConfig,
    prices: Arc<PriceTable>,
    opts: &CheckOptions,
    observer: &mut dyn CheckObserver,
) -> Summary {
    // Detect every input's format first (files are reopened later; stdin keeps its head).
    let mut prepared: Vec<(String, Format, parallel::Prepared)> = Vec::new();
    let mut unreadable = Vec::new();
    for input in inputs {
        let name = match input {
            InputSpec::Stdin => "<stdin>".to_owned(),
            InputSpec::Path(p) => p.display().to_string(),
        };
        let sniffed = match input {
            InputSpec::Stdin => read_head(&mut io::stdin().lock()).map(|head| {
                let format = pick_format(opts.format, &head);
                (format, parallel::Prepared::Stdin { head })
            }),
            InputSpec::Path(p) => files::open(p).and_then(|mut f| {
                let head = if opts.format == Format::Auto {
                    read_head(&mut f)?
                } else {
                    Vec::new()
                };
                Ok((
                    pick_format(opts.format, &head),
                    parallel::Prepared::File { path: p.clone() },
                ))
            }),
        };
        match sniffed {
            Ok((format, p)) => prepared.push((name, format, p)),
            Err(e) => {
                observer.unreadable(&name, &e);
                unreadable.push(name);
            }
        }
    }
    // Compressed inputs are read as one stream: they cannot be sharded by byte offsets.
    let all_native = prepared.iter().all(|(_, f, p)| {
        *f == Format::Native
            && !matches!(p, parallel::Prepared::File { path } if files::is_gzip(path))
    });
    let mut summary = if opts.parallel
        && all_native
        && cfg.idle_timeout_ms.is_none()
        && parallel::worthwhile(inputs, total_bytes(inputs))
    {
        let names = prepared.iter().map(|(n, _, _)| n.clone()).collect();
        let inputs = prepared.into_iter().map(|(_, _, p)| p).collect();
        parallel::run(inputs, names, cfg, prices, opts.max_line_bytes, observer)
    } else {
        sequential(prepared, Correlator::new(cfg, prices), opts, observer)
    };
    unreadable.extend(std::mem::take(&mut summary.unreadable_inputs));
    summary.unreadable_inputs = unreadable;
    summary
}

fn sequential(
    inputs: Vec<(String, Format, parallel::Prepared)>,
    correlator: Correlator,
    opts: &CheckOptions,
    observer: &mut dyn CheckObserver,
) -> Summary {
    let mut pipeline = Pipeline::new(correlator);
    let mut summary = Summary::default();
    let mut out = Vec::new();
    let mut done_bytes = 0u64;
    for (name, format, prepared) in inputs {
        let reader: Box<dyn Read> = match prepared {
            parallel::Prepared::Stdin { head } => {
                Box::new(io::Cursor::new(head).chain(io::stdin()))
            }
            parallel::Prepared::File { path } => match files::open(&path) {
                Ok(f) => Box::new(f),
                Err(e) => {
                    observer.unreadable(&name, &e);
                    summary.unreadable_inputs.push(name);
                    continue;
                }
            },
        };
        let mut decoder: Option<Box<dyn StreamDecoder>> =
            crate::decode::stream_decoder(format, &stream_name(&name));
        summary.inputs += 1;
        let mut lines = LineReader::new(reader, opts.max_line_bytes);
        let mut since_tick = 0u32;
        loop {
            let line = match lines.next_line() {
                Ok(Some(line)) => line,
                Ok(None) => break,
                Err(e) => {
                    observer.unreadable(&name, &e);
                    summary.unreadable_inputs.push(name.clone());
                    break;
                }
            };
            match line {
                Line::Complete { number, bytes } => {
                    let result = match decoder.as_deref_mut() {
                        Some(d) => pipeline.stream_line(d, bytes, None, &mut out),
                        None if bytes.iter().all(u8::is_ascii_whitespace) => continue,
                        None => pipeline.native_line(bytes, None, &mut out),
                    };
                    if let Err(e) = result {
                        observer.bad_line(&BadLine {
                            input: name.clone(),
                            line: number,
                            reason: e.to_string(),
                        });
                    }
                }
                Line::TooLong { number, len } => {
                    pipeline.too_long();
                    observer.bad_line(&BadLine {
                        input: name.clone(),
                        line: number,
                        reason: format!("too_long: line of {len} bytes skipped"),
                    });
                }
            }
            since_tick += 1;
            if since_tick == TICK_EVERY_LINES {
                since_tick = 0;
                let clock = pipeline.clock_ms();
                pipeline.tick(clock, &mut out);
                observer.progress(done_bytes + lines.consumed());
            }
            if !out.is_empty() {
                drain(&mut out, &mut summary, observer);
            }
        }
        if let Some(d) = decoder.as_deref_mut() {
            pipeline.stream_end(d, None, &mut out);
            drain(&mut out, &mut summary, observer);
        }
        done_bytes += lines.consumed();
        observer.progress(done_bytes);
    }
    pipeline.close_all(&mut out);
    drain(&mut out, &mut summary, observer);
    summary.finish(pipeline.counters(), pipeline.correlator());
    summary
}

fn drain(out: &mut Vec<Output>, summary: &mut Summary, observer: &mut dyn CheckObserver) {
    for o in out.drain(..) {
        if let Output::TurnClosed(report) = o {
            summary.add_turn(&report);
            observer.turn(&report);
        }
    }
}
