//! Memory per open turn in `retryscope check` (issue 24): a log of never-ending turns (each a
//! `turn_start`, an `attempt_start` and a tool call, no text; modelled on the agents' lines),
//! more of them than `--max-open-turns` keeps, checked by the real binary with its default
//! sharded engine and with `--single-thread`. Prints the peak RSS (GNU time's `%M`) and the
//! bytes per open turn (peak minus the peak of checking one turn, divided by the turns held
//! open), and the slope between the cap and half of it (what one more open turn costs, without
//! the fixed costs a one-turn run does not have). Prints figures; asserts nothing.
//!
//! ```sh
//! cargo build --release --example bench_open_turns && \
//!   target/release/examples/bench_open_turns [--turns 400000] [--cap 100000]
//! ```
//! `RETRYSCOPE_BIN=path` measures another build of the binary (an older one, for comparison).

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn binary() -> PathBuf {
    if let Some(b) = std::env::var_os("RETRYSCOPE_BIN") {
        return PathBuf::from(b);
    }
    let exe = std::env::current_exe().expect("exe");
    // target/<profile>/examples/bench_open_turns → target/<profile>/retryscope
    exe.parent()
        .and_then(Path::parent)
        .map(|d| d.join("retryscope"))
        .expect("target dir")
}

fn write_log(path: &Path, turns: usize) {
    let mut w = BufWriter::new(std::fs::File::create(path).expect("create"));
    for i in 0..turns {
        let a = i % 8;
        let ts = 1_700_000_000_000u64 + i as u64;
        writeln!(
            w,
            r#"{{"turn":"agent-{a}-{i}","type":"turn_start","ts":{ts},"model":"gpt-4.1","provider":"openai","agent":"agent-{a}"}}"#
        )
        .expect("write");
        writeln!(
            w,
            r#"{{"turn":"agent-{a}-{i}","type":"attempt_start","attempt":0,"ts":{}}}"#,
            ts + 1
        )
        .expect("write");
        writeln!(
            w,
            r#"{{"turn":"agent-{a}-{i}","type":"tool_call","attempt":0,"id":"call_{i}","name":"lookup_order","args":{{"order":"ORD-{i}"}},"ts":{}}}"#,
            ts + 2
        )
        .expect("write");
    }
    w.flush().expect("flush");
}

/// Peak RSS (KiB) and wall time of `retryscope check --json ARGS FILE`: the child's maximum
/// resident set as the kernel reports it at exit (GNU time's `%M`; sampling VmHWM could miss
/// the last milliseconds, where the turns open at the end are closed).
fn peak_of(args: &[&str], file: &Path) -> (u64, Duration) {
    let start = Instant::now();
    let out = Command::new("/usr/bin/time")
        .args(["-f", "peak-rss-kib %M"])
        .arg(binary())
        .args(["check", "--json"])
        .args(args)
        .arg(file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("GNU time (/usr/bin/time) and the binary (cargo build --release)");
    let took = start.elapsed();
    let text = String::from_utf8_lossy(&out.stderr);
    let kib = text
        .lines()
        .filter_map(|l| l.strip_prefix("peak-rss-kib "))
        .filter_map(|v| v.trim().parse().ok())
        .next_back()
        .unwrap_or_else(|| panic!("no peak RSS in: {text}"));
    (kib, took)
}

fn main() {
    let mut turns = 400_000usize;
    let mut cap = 100_000usize;
    let args: Vec<String> = std::env::args().collect();
    for w in args.windows(2) {
        match w[0].as_str() {
            "--turns" => turns = w[1].parse().expect("--turns N"),
            "--cap" => cap = w[1].parse().expect("--cap N"),
            _ => {}
        }
    }
    let dir = tempfile::tempdir().expect("tmp");
    let log = dir.path().join("open.jsonl");
    let one = dir.path().join("one.jsonl");
    write_log(&log, turns);
    write_log(&one, 1);
    let bytes = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
    println!(
        "{turns} never-ending turns ({:.0} MB), --max-open-turns {cap}: {} held open at a time",
        bytes as f64 / 1e6,
        cap.min(turns)
    );
    let cap_s = cap.to_string();
    let half_s = (cap / 2).to_string();
    let (base, _) = peak_of(&[], &one);
    for (what, single) in [("sharded (default)", false), ("--single-thread", true)] {
        let args = |cap: &str| {
            let mut v = vec!["--max-open-turns".to_owned(), cap.to_owned()];
            if single {
                v.push("--single-thread".to_owned());
            }
            v
        };
        let full = args(&cap_s);
        let (peak, took) = peak_of(&full.iter().map(String::as_str).collect::<Vec<_>>(), &log);
        let half = args(&half_s);
        let (peak_half, _) = peak_of(&half.iter().map(String::as_str).collect::<Vec<_>>(), &log);
        let held = cap.min(turns) as f64;
        let per_turn = (peak.saturating_sub(base) as f64 * 1024.0) / held;
        // The slope between two caps: what one more open turn costs, without fixed costs
        // (threads, buffers) that a one-turn run does not have.
        let slope =
            (peak.saturating_sub(peak_half) as f64 * 1024.0) / (held - (cap / 2).min(turns) as f64);
        println!(
            "check --json {what}: peak RSS {:.1} MiB (one turn: {:.1} MiB; half the cap: {:.1} MiB) in {:.1} s: {per_turn:.0} bytes per open turn, {slope:.0} bytes per added open turn",
            peak as f64 / 1024.0,
            base as f64 / 1024.0,
            peak_half as f64 / 1024.0,
            took.as_secs_f64()
        );
    }
}
