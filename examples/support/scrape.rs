//! What the benchmarks that run `retryscope` as a process share: starting `run`, reading its
//! `/metrics`.
//! Included by path (`#[path = "support/scrape.rs"] mod scrape;`), not an example itself.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;

/// The `/metrics` text served on `127.0.0.1:port`, if it answers.
pub fn scrape(port: u16) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    Some(body)
}

/// The sum of the samples whose line starts with `series` (a name, or a name and `{`).
pub fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(series))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

/// The `retryscope` binary beside the running example (`target/<profile>/retryscope`).
pub fn retryscope_binary() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    exe.parent()
        .and_then(|examples| examples.parent())
        .map(|dir| dir.join("retryscope"))
        .unwrap_or_default()
}

/// `retryscope run` as the benchmarks run it: tailing `target`, metrics on `port`, no findings
/// file, turns kept open an hour and up to 200,000 of them, logging only warnings, with
/// `extra` flags; not yet waited for.
pub fn spawn_run(
    target: &std::ffi::OsStr,
    port: u16,
    extra: &[&str],
) -> std::io::Result<std::process::Child> {
    use std::process::{Command, Stdio};
    Command::new(retryscope_binary())
        .arg("run")
        .arg(target)
        .args(extra)
        .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
        .args(["--findings-out", "", "--idle-timeout-secs", "3600"])
        .args(["--max-open-turns", "200000"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
}
