//! `retryscope check`: correlate whole recorded inputs and summarize them.
//!
//! Inputs are files, directories (every regular file below, in name order) or stdin. One
//! correlator spans all inputs, so a turn split across rotated files is still one turn.
//! Closed turns are delivered to the caller's [`SinkList`] as they close (the JSON or text
//! report, the HTML page, traces: output streams, memory stays bounded), after the
//! [`Summary`], itself a [`Sink`], which accumulates counts, findings and cost. What concerns
//! the inputs (bad lines, refusals, progress) goes to a [`CheckObserver`].

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

use retryscope_core::correlate::{Correlator, CorrelatorConfig, Output};
use retryscope_core::cost::PriceTable;
use retryscope_core::coverage::{Coverage, InputKind, Sight};
use retryscope_core::decode::{self, BadLineReason, Format};
use retryscope_core::finding::{FindingKind, Severity};
use retryscope_core::ingest::{Ingest, Note, Source};
use retryscope_core::input::{Line, LineReader};
use retryscope_core::pipeline::InputCounters;
use retryscope_core::report::TurnReport;

use crate::engine::{Sink, SinkList, sinks::At};

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
    /// Inputs refused: they borrow a provider format's names without its shape (not decoded).
    #[serde(default)]
    pub refused_inputs: Vec<String>,
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
    /// Events for turns already closed in the same input (dropped).
    pub after_close_events: u64,
    /// Turn ids that closed in one input and came back in a later one (checked as new turns).
    pub reused_turn_ids: u64,
    /// Open turns evicted to bound memory (`--max-open-turns`): closed early, as incomplete.
    pub evicted_turns: u64,
    /// Inputs read, by input kind (what each can show: `coverage`).
    #[serde(default)]
    pub inputs_by_kind: BTreeMap<String, u64>,
    /// What none of the inputs can show, each with what to add to see it. When `cuts` is
    /// here, "no findings" about cut streams means "not seen", not "none happened".
    #[serde(default)]
    pub blind_spots: Vec<BlindSpotLine>,
    #[serde(skip)]
    coverage: Coverage,
}

/// One blind spot of a run's inputs, as the summary reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlindSpotLine {
    /// The input kind that cannot show it.
    pub input_kind: String,
    /// What it cannot show: attempts, cuts, executions, displayed_text.
    pub cannot_show: String,
    /// What to add to see it.
    pub add: String,
}

impl Summary {
    pub(crate) fn add_turn(&mut self, r: &TurnReport) {
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

    /// A stream read as `kind`.
    fn saw_input(&mut self, kind: InputKind) {
        self.coverage.add(kind);
    }

    /// Whether the inputs together can show `sight` (with no input: nothing is shown).
    pub fn can_show(&self, sight: Sight) -> bool {
        self.coverage.sights().has(sight)
    }

    fn finish_with(
        &mut self,
        counters: &InputCounters,
        stats: retryscope_core::correlate::CorrelatorStats,
    ) {
        self.inputs_by_kind = self
            .coverage
            .kinds()
            .map(|k| (k.as_str().to_owned(), self.coverage.streams(k)))
            .collect();
        self.blind_spots = self
            .coverage
            .blind_spots()
            .into_iter()
            .map(|b| BlindSpotLine {
                input_kind: b.kind.as_str().to_owned(),
                cannot_show: b.sight.as_str().to_owned(),
                add: b.advice.to_owned(),
            })
            .collect();
        self.events = counters.events;
        self.lines = counters.lines;
        self.bad_lines = counters.bad_total();
        self.bad_lines_by_reason = counters.bad_lines.clone();
        self.unknown_types = counters.skips.unknown_types;
        self.unknown_fields = counters.skips.unknown_fields;
        self.late_events = stats.late_events;
        self.after_close_events = stats.after_close_events;
        self.reused_turn_ids = stats.reused_turn_ids;
        self.evicted_turns = stats.evicted_turns;
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
///
/// Every directory and file is visited once by its (device, inode): a symlink loop
/// (`sub/up -> ..`, `self -> .`) ends where it starts over, and a file reached through two
/// names (or named twice) is read once.
pub fn expand_inputs(specs: &[InputSpec]) -> Vec<InputSpec> {
    expand_inputs_listing_skipped(specs).0
}

/// [`expand_inputs`], also returning the files of directories skipped as not logs.
pub fn expand_inputs_listing_skipped(specs: &[InputSpec]) -> (Vec<InputSpec>, Vec<PathBuf>) {
    let mut out = Vec::new();
    let mut skipped = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for spec in specs {
        match spec {
            InputSpec::Path(p) if p.is_dir() => collect_dir(p, &mut seen, &mut out, &mut skipped),
            InputSpec::Path(p) => {
                // Unreadable paths are kept, to be reported; a file seen before is skipped.
                if identity(p).is_none_or(|id| seen.insert(id)) {
                    out.push(spec.clone());
                }
            }
            InputSpec::Stdin => out.push(InputSpec::Stdin),
        }
    }
    (out, skipped)
}

/// (device, inode) of what `path` resolves to.
fn identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

fn collect_dir(
    dir: &Path,
    seen: &mut std::collections::HashSet<(u64, u64)>,
    out: &mut Vec<InputSpec>,
    skipped: &mut Vec<PathBuf>,
) {
    if identity(dir).is_some_and(|id| !seen.insert(id)) {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        out.push(InputSpec::Path(dir.to_path_buf()));
        return;
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for p in paths {
        if p.is_dir() {
            collect_dir(&p, seen, out, skipped);
        } else if p.is_file() && identity(&p).is_none_or(|id| seen.insert(id)) {
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

/// What a check run tells about its inputs (closed turns go to its sinks).
pub trait CheckObserver {
    /// A line was skipped.
    fn bad_line(&mut self, bad: &BadLine);
    /// An input could not be read.
    fn unreadable(&mut self, input: &str, error: &io::Error);
    /// An input was refused: it borrows a provider format's names without its shape.
    fn refused(&mut self, _input: &str, _lookalike: &decode::detect::Lookalike) {}
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

/// How often (in lines) the sequential path lets idle turns time out on its logical clock.
const TICK_EVERY_LINES: u32 = 4096;

/// Whether every input is a file in the native format: sharding needs that. Heads are sniffed
/// with the same function the ingest path uses, so both paths agree on each input's format.
fn all_native_files(inputs: &[InputSpec], requested: Format) -> bool {
    inputs.iter().all(|input| match input {
        InputSpec::Stdin => false,
        // Compressed inputs are read as one stream: they cannot be sharded by byte offsets.
        InputSpec::Path(p) if files::is_gzip(p) => false,
        InputSpec::Path(_) if requested == Format::Native => true,
        InputSpec::Path(_) if requested != Format::Auto => false,
        InputSpec::Path(p) => {
            let mut head = Vec::with_capacity(decode::detect::SNIFF_BYTES);
            files::open(p)
                .and_then(|f| {
                    f.take(decode::detect::SNIFF_BYTES as u64)
                        .read_to_end(&mut head)
                })
                .is_ok_and(|_| decode::detect(&head) == Ok(Format::Native))
        }
    })
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
    sinks: &mut SinkList<'_>,
) -> Summary {
    if opts.parallel
        && cfg.idle_timeout_ms.is_none()
        && parallel::worthwhile(inputs, total_bytes(inputs))
        && all_native_files(inputs, opts.format)
    {
        let names = inputs.iter().map(input_name).collect();
        parallel::run(
            inputs,
            names,
            cfg,
            prices,
            opts.max_line_bytes,
            observer,
            sinks,
        )
    } else {
        sequential(inputs, Correlator::new(cfg, prices), opts, observer, sinks)
    }
}

fn input_name(input: &InputSpec) -> String {
    match input {
        InputSpec::Stdin => "<stdin>".to_owned(),
        InputSpec::Path(p) => p.display().to_string(),
    }
}

/// What the ingest path's notes tell the observer: bad lines, refused inputs, and the input
/// kinds sniffed (for the coverage).
#[derive(Default)]
struct Noted {
    bad: Vec<BadLine>,
    refused: Vec<(String, decode::detect::Lookalike)>,
    kinds: Vec<InputKind>,
}

fn collect_bad(note: Note<'_>, noted: &mut Noted) {
    match note {
        // A refused input's lines are counted (`unknown_format`); the refusal says why once.
        Note::Line {
            outcome: Err(e), ..
        } if e.reason == BadLineReason::UnknownFormat => {}
        Note::Line {
            name,
            number,
            outcome: Err(e),
            ..
        } => noted.bad.push(BadLine {
            input: name.to_owned(),
            line: number,
            reason: e.to_string(),
        }),
        Note::Format { name, format, .. } => noted.kinds.extend(InputKind::of(format, name)),
        Note::Refused {
            name, lookalike, ..
        } => noted.refused.push((name.to_owned(), lookalike.clone())),
        _ => {}
    }
}

fn sequential(
    inputs: &[InputSpec],
    correlator: Correlator,
    opts: &CheckOptions,
    observer: &mut dyn CheckObserver,
    sinks: &mut SinkList<'_>,
) -> Summary {
    let mut ingest = Ingest::new(correlator, opts.format);
    // gemini-cli's telemetry and stream-json of one session are joined (held, then merged).
    ingest.join_sessions();
    let mut summary = Summary::default();
    let mut out = Vec::new();
    let mut noted = Noted::default();
    let mut done_bytes = 0u64;
    for input in inputs {
        let name = input_name(input);
        let (source, reader): (Source, Box<dyn Read>) = match input {
            InputSpec::Stdin => (Source::Stdin, files::stdin()),
            InputSpec::Path(path) => match files::open(path) {
                Ok(f) => (Source::File, f),
                Err(e) => {
                    observer.unreadable(&name, &e);
                    summary.unreadable_inputs.push(name);
                    continue;
                }
            },
        };
        let stream = ingest.stream(source, &name);
        summary.inputs += 1;
        ingest.next_input();
        let mut lines = LineReader::new(reader, opts.max_line_bytes);
        let mut since_tick = 0u32;
        loop {
            match lines.next_line() {
                Ok(Some(Line::Complete { number, bytes })) => {
                    ingest.line(stream, Some(number), bytes, None, &mut out, &mut |n| {
                        collect_bad(n, &mut noted)
                    });
                }
                Ok(Some(Line::TooLong { number, len })) => {
                    ingest.too_long(stream, Some(number), len, &mut |n| {
                        collect_bad(n, &mut noted)
                    });
                }
                Ok(None) => break,
                Err(e) => {
                    observer.unreadable(&name, &e);
                    summary.unreadable_inputs.push(name.clone());
                    break;
                }
            }
            since_tick += 1;
            if since_tick == TICK_EVERY_LINES {
                since_tick = 0;
                let clock = ingest.pipeline().clock_ms();
                ingest.tick(clock, &mut out, &mut |n| collect_bad(n, &mut noted));
                observer.progress(done_bytes + lines.consumed());
            }
            report(&mut noted, &mut out, &mut summary, observer, sinks);
        }
        ingest.end(stream, None, &mut out, &mut |n| collect_bad(n, &mut noted));
        report(&mut noted, &mut out, &mut summary, observer, sinks);
        done_bytes += lines.consumed();
        observer.progress(done_bytes);
    }
    // Closed in batches, each reported before the next: the reports of every turn still open
    // at the end never exist at once.
    let noted = std::cell::RefCell::new(noted);
    ingest.close_all_batched(
        CLOSE_BATCH,
        &mut out,
        &mut |n| collect_bad(n, &mut noted.borrow_mut()),
        &mut |o| report(&mut noted.borrow_mut(), o, &mut summary, observer, sinks),
    );
    report(
        &mut noted.borrow_mut(),
        &mut out,
        &mut summary,
        observer,
        sinks,
    );
    summary.finish(ingest.counters(), ingest.correlator());
    summary
}

/// Turns closed at the end of input between two reports.
pub(crate) const CLOSE_BATCH: usize = 1024;

/// Hand refusals and bad lines to the observer, then deliver the outputs.
fn report(
    noted: &mut Noted,
    out: &mut Vec<Output>,
    summary: &mut Summary,
    observer: &mut dyn CheckObserver,
    sinks: &mut SinkList<'_>,
) {
    for (name, lookalike) in noted.refused.drain(..) {
        observer.refused(&name, &lookalike);
        summary.refused_inputs.push(name);
    }
    for b in noted.bad.drain(..) {
        observer.bad_line(&b);
    }
    for k in noted.kinds.drain(..) {
        summary.saw_input(k);
    }
    for o in out.drain(..) {
        deliver(&o, summary, sinks);
    }
}

/// One output to the summary, then to the caller's sinks.
pub(crate) fn deliver(output: &Output, summary: &mut Summary, sinks: &mut SinkList<'_>) {
    summary.deliver(output, None);
    sinks.deliver_one(output, None);
}

/// The summary counts closed turns (their attempts, findings, cost).
impl Sink for Summary {
    fn name(&self) -> &'static str {
        "summary"
    }

    fn deliver(&mut self, output: &Output, _at: Option<At<'_>>) {
        if let Output::TurnClosed(report) = output {
            self.add_turn(report);
        }
    }
}

#[cfg(test)]
mod tests;
