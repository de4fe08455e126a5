//! What the benchmarks that run `retryscope` as a process share: reading its `/metrics`.
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
