//! Command-line parsing and the subcommands' glue. Exit codes: 0 fine, 1 findings at or above
//! `--fail-on`, 2 unusable arguments or unreadable input.

mod check_cmd;
mod collect_cmd;
mod common;
mod limits_args;
mod nats_args;
mod proxy_cmd;
mod run_cmd;
mod ship_cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Watch LLM agent clients that stream and retry model turns: abandoned attempts, tools run
/// from them, duplicate effects, spliced text, and what every retry cost.
#[derive(Debug, Parser)]
#[command(
    name = "retryscope",
    version,
    about,
    long_about = None,
    after_help = "Exit status: 0 fine; 1 `check` found something at or above --fail-on; 2 unusable \
arguments, configuration or input."
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Correlate recorded logs offline and report turns, findings and cost.
    Check(check_cmd::CheckArgs),
    /// Tail agent logs (or stdin, or a demo fleet) and serve Prometheus metrics live.
    Run(Box<run_cmd::RunArgs>),
    /// Tail agent logs and publish their lines to NATS JetStream, partitioned by turn id.
    Ship(ship_cmd::ShipArgs),
    /// Sit between an agent and its model provider: see every attempt on the wire, and cut
    /// streams on purpose (docs/proxy.md).
    Proxy(Box<proxy_cmd::ProxyArgs>),
    /// Check a `run` configuration file without running.
    Validate(run_cmd::ValidateArgs),
}

/// Logs to stderr only (no operational span export); `RUST_LOG` overrides `default_level`.
/// `run` installs its subscriber itself, inside its runtime (see `retryscope::telemetry`).
fn init_logging(default_level: &str) {
    // A guard without an exporter holds nothing; an already installed subscriber is fine.
    let _ = retryscope::telemetry::init_with_level(default_level, None);
}

/// Parse arguments and run.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let result = match cli.command {
        Command::Check(args) => {
            init_logging("warn");
            check_cmd::run(args)
        }
        Command::Run(args) => run_cmd::run(*args),
        Command::Validate(args) => run_cmd::validate(args),
        Command::Proxy(args) => proxy_cmd::run(*args),
        Command::Ship(args) => {
            init_logging("info");
            ship_cmd::run(args)
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("retryscope: error: {}", error_chain(&e));
            ExitCode::from(2)
        }
    }
}

/// The error and its causes, each said once: library errors often include their source's
/// text in their own message, which `{:#}` would repeat
/// (`No such file or directory (os error 2): No such file or directory (os error 2)`).
fn error_chain(e: &anyhow::Error) -> String {
    let mut msg = e.to_string();
    for cause in e.chain().skip(1) {
        let text = cause.to_string();
        if !msg.contains(&text) {
            msg.push_str(": ");
            msg.push_str(&text);
        }
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_chain_says_each_cause_once() {
        let io = std::io::Error::from(std::io::ErrorKind::NotFound);
        let text = io.to_string();
        let e = anyhow::Error::new(std::io::Error::new(
            io.kind(),
            format!("cannot read x: {text}"),
        ))
        .context("loading --prices");
        assert_eq!(
            error_chain(&e),
            format!("loading --prices: cannot read x: {text}")
        );
        let e = anyhow::anyhow!("inner").context("outer");
        assert_eq!(error_chain(&e), "outer: inner");
    }
}
