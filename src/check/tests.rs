//! `check` delivers every closed turn to its sinks, after the summary, in the same order on
//! the sequential and the sharded path.

use super::*;

/// What a sink was given: each closed turn's id and finding count, in order.
#[derive(Default)]
struct Recorded(Vec<(String, usize)>);

impl Sink for Recorded {
    fn name(&self) -> &'static str {
        "recorded"
    }
    fn deliver(&mut self, output: &Output, _at: Option<At<'_>>) {
        if let Output::TurnClosed(r) = output {
            self.0.push((r.turn.clone(), r.findings.len()));
        }
    }
}

struct Quiet;

impl CheckObserver for Quiet {
    fn bad_line(&mut self, _bad: &BadLine) {}
    fn unreadable(&mut self, _input: &str, _error: &io::Error) {}
}

fn bookstore() -> Vec<InputSpec> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/bookstore");
    ["naive.jsonl", "reset.jsonl", "reset-late-exec.jsonl"]
        .iter()
        .map(|f| InputSpec::Path(dir.join(f)))
        .collect()
}

fn through(
    inputs: &[InputSpec],
    path: impl FnOnce(&[InputSpec], &mut SinkList<'_>) -> Summary,
) -> (Summary, Recorded, Recorded) {
    let (mut first, mut second) = (Recorded::default(), Recorded::default());
    let summary = {
        let mut sinks = SinkList::new();
        sinks.push(Box::new(&mut first));
        sinks.push(Box::new(&mut second));
        path(inputs, &mut sinks)
    };
    (summary, first, second)
}

#[test]
fn every_closed_turn_reaches_every_sink_in_order_on_both_paths() {
    let inputs = bookstore();
    let cfg = CorrelatorConfig::default();
    let prices = Arc::new(PriceTable::builtin());
    let opts = CheckOptions {
        parallel: false,
        ..CheckOptions::default()
    };
    let (seq, a, b) = through(&inputs, |i, sinks| {
        sequential(
            i,
            Correlator::new(cfg.clone(), prices.clone()),
            &opts,
            &mut Quiet,
            sinks,
        )
    });
    assert!(seq.turns >= 3, "the bookstore has a turn per file");
    assert_eq!(
        a.0.len() as u64,
        seq.turns,
        "the summary counted what the sinks got"
    );
    assert_eq!(a.0, b.0, "both sinks got the same outputs");
    let findings: usize = a.0.iter().map(|(_, n)| n).sum();
    assert!(findings > 0);
    assert_eq!(findings as u64, seq.findings.values().sum::<u64>());

    let names = inputs.iter().map(input_name).collect();
    let (par, c, _) = through(&inputs, |i, sinks| {
        parallel::run(
            i,
            names,
            cfg.clone(),
            prices.clone(),
            1 << 20,
            &mut Quiet,
            sinks,
        )
    });
    assert_eq!(
        c.0, a.0,
        "the sharded path delivers the same turns in the same order"
    );
    assert_eq!(par.turns, seq.turns);
    assert_eq!(par.findings, seq.findings);
}
