//! Posting to an OTLP/HTTP receiver as a real agent does, and the real agents' captured
//! request bodies (`tests/fixtures/agents/<agent>/<scenario>/otlp/`, as they came), also as
//! the lines the receiver writes for them (the input `check`, `run` and `ship` read as a file).
//! Included with `#[path]` by the test binaries that use them.
#![allow(dead_code)] // each test binary uses a different part of it

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Send a raw HTTP/1.1 request (`head` ends with the blank line); returns status, head, body.
pub fn request(port: u16, head: &str, body: &[u8]) -> Option<(u16, String, Vec<u8>)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.write_all(head.as_bytes()).ok()?;
    s.write_all(body).ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).ok()?;
    let split = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&buf[..split]).into_owned();
    let status = head.get(9..12)?.parse().ok()?;
    let mut body = buf[split + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = unchunk(&body);
    }
    Some((status, head, body))
}

fn unchunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = b.windows(2).position(|w| w == b"\r\n") {
        let n = usize::from_str_radix(std::str::from_utf8(&b[..eol]).unwrap_or("0").trim(), 16)
            .unwrap_or(0);
        if n == 0 {
            break;
        }
        out.extend_from_slice(&b[eol + 2..eol + 2 + n]);
        b = &b[eol + 4 + n..];
    }
    out
}

/// POST to the OTLP/HTTP listener; `chunked` sends the body in 4 KiB chunks (as gemini-cli
/// does), else with a content-length.
pub fn post(
    port: u16,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    chunked: bool,
) -> (u16, String, Vec<u8>) {
    let mut head = format!("POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    let mut wire = Vec::new();
    if chunked {
        head.push_str("Transfer-Encoding: chunked\r\n\r\n");
        for c in body.chunks(4096) {
            wire.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
            wire.extend_from_slice(c);
            wire.extend_from_slice(b"\r\n");
        }
        wire.extend_from_slice(b"0\r\n\r\n");
    } else {
        head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
        wire.extend_from_slice(body);
    }
    request(port, &head, &wire).expect("an HTTP answer")
}

/// gemini-cli's capture of `scenario`: (signal, body) in the order they were sent.
pub fn capture(scenario: &str) -> Vec<(String, Vec<u8>)> {
    capture_in(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/agents/gemini-cli")
            .join(scenario),
    )
}

/// The capture in `dir/otlp/` (`<n>-v1-<signal>.json`): (signal, body) in the order sent.
pub fn capture_in(dir: &Path) -> Vec<(String, Vec<u8>)> {
    bodies(dir)
        .into_iter()
        .map(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            let signal = name
                .split("-v1-")
                .nth(1)
                .unwrap_or("")
                .trim_end_matches(".json")
                .to_owned();
            (signal, std::fs::read(&p).expect("body"))
        })
        .collect()
}

/// The lines the OTLP receiver writes for the capture in `dir/otlp/` (its log records and
/// spans; metrics are acknowledged and dropped), concatenated.
pub fn receiver_lines(dir: &Path) -> Vec<u8> {
    let mut text = Vec::new();
    for (signal, body) in capture_in(dir) {
        let mut recs = Vec::new();
        let converted = match signal.as_str() {
            "logs" => retryscope::source::otlp::json::logs(&body, &mut recs),
            "traces" => retryscope::source::otlp::json::spans(&body, &mut recs),
            _ => continue,
        };
        converted.unwrap_or_else(|e| panic!("{}: {signal}: {e}", dir.display()));
        for r in recs {
            text.extend_from_slice(&r.line);
            text.push(b'\n');
        }
    }
    text
}

/// `dir/otlp/*.json`, sorted (their names start with the order they were sent in).
fn bodies(dir: &Path) -> Vec<PathBuf> {
    let dir = dir.join("otlp");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
}
