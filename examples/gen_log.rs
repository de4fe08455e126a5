//! Write a large synthetic native-format log for benchmarks and experiments.
//!
//! ```text
//! cargo run --release --example gen_log -- --events N --out FILE [--seed S] [--retry-rate R] [--preset bench|demo]
//! ```
//!
//! Writes about `N` events from the fleet generator (`retryscope::demo`, bench preset unless
//! told otherwise), then completes the turns still in flight so no turn is cut short, and
//! prints events, bytes, turns and the average line length.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::process::ExitCode;
use std::time::Instant;

use retryscope::demo::{Fleet, FleetConfig};

const USAGE: &str =
    "usage: gen_log --events N --out FILE [--seed S] [--retry-rate R] [--preset bench|demo]";

struct Args {
    events: u64,
    out: String,
    seed: u64,
    retry_rate: Option<f64>,
    demo: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut events = None;
    let mut out = None;
    let mut seed = 1;
    let mut retry_rate = None;
    let mut demo = false;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "-h" || flag == "--help" {
            return Err(USAGE.to_owned());
        }
        let value = args
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        let bad = |what: &str| format!("{flag}: `{value}` is not {what}");
        match flag.as_str() {
            "--events" => events = Some(value.parse::<u64>().map_err(|_| bad("a count"))?),
            "--out" => out = Some(value),
            "--seed" => seed = value.parse::<u64>().map_err(|_| bad("an integer"))?,
            "--retry-rate" => {
                let r = value.parse::<f64>().map_err(|_| bad("a number"))?;
                if !(0.0..=1.0).contains(&r) {
                    return Err(bad("between 0 and 1"));
                }
                retry_rate = Some(r);
            }
            "--preset" => {
                demo = match value.as_str() {
                    "demo" => true,
                    "bench" => false,
                    _ => return Err(bad("`bench` or `demo`")),
                }
            }
            _ => return Err(format!("unknown argument `{flag}`\n{USAGE}")),
        }
    }
    Ok(Args {
        events: events.ok_or_else(|| format!("--events is required\n{USAGE}"))?,
        out: out.ok_or_else(|| format!("--out is required\n{USAGE}"))?,
        seed,
        retry_rate,
        demo,
    })
}

fn run(args: &Args) -> std::io::Result<(u64, u64, u64)> {
    let mut cfg = if args.demo {
        FleetConfig::demo(args.seed)
    } else {
        FleetConfig::bench(args.seed)
    };
    if let Some(r) = args.retry_rate {
        cfg.retry_rate = r;
    }
    let mut fleet = Fleet::new(cfg);
    let mut w = BufWriter::with_capacity(1 << 20, File::create(&args.out)?);
    let mut line = String::with_capacity(4096);
    let mut bytes = 0u64;
    let mut events = 0u64;
    while events < args.events && fleet.next_line(&mut line) {
        line.push('\n');
        w.write_all(line.as_bytes())?;
        bytes += line.len() as u64;
        events += 1;
        line.clear();
    }
    // Finish the turns in flight: every turn in the log is whole.
    let mut tail = CountingWriter {
        inner: &mut w,
        bytes: 0,
    };
    events += fleet.drain(&mut tail)?;
    bytes += tail.bytes;
    w.flush()?;
    Ok((events, bytes, fleet.stats().turns_completed))
}

struct CountingWriter<W> {
    inner: W,
    bytes: u64,
}

impl<W: Write> Write for CountingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(msg) => {
            eprintln!("{msg}");
            return ExitCode::from(2);
        }
    };
    let started = Instant::now();
    match run(&args) {
        Ok((events, bytes, turns)) => {
            let secs = started.elapsed().as_secs_f64();
            let avg = if events == 0 {
                0.0
            } else {
                bytes as f64 / events as f64
            };
            println!("wrote {} to {}", human_bytes(bytes), args.out);
            println!("events: {events}");
            println!("bytes: {bytes}");
            println!("turns: {turns}");
            println!("average line: {avg:.1} bytes (newline included)");
            println!(
                "time: {secs:.2} s ({:.0} events/s, {:.0} MB/s)",
                events as f64 / secs.max(1e-9),
                bytes as f64 / 1e6 / secs.max(1e-9)
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gen_log: {}: {e}", args.out);
            ExitCode::FAILURE
        }
    }
}

fn human_bytes(b: u64) -> String {
    if b >= 1 << 20 {
        format!("{:.1} MiB", b as f64 / f64::from(1 << 20))
    } else {
        format!("{:.1} KiB", b as f64 / 1024.0)
    }
}
