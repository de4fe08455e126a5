//! `--record DIR`: a session on disk, in a form `retryscope check` reads.
//!
//! Owns: the recording's layout. `DIR/proxy-<start>.jsonl` holds every native line the proxy
//! hands the pipeline (turns, attempts, each raw stream chunk in a `provider_chunk` envelope,
//! cuts, executions read from the next request), so `retryscope check DIR` re-correlates the
//! session exactly; `DIR/requests/<turn>.<attempt>.http` holds each attempt's request as sent
//! (method, path, headers, body), with secrets replaced by `[redacted]` by the rules of
//! `redact.rs` (headers and parameters by name and by value, keys of known shape in bodies and
//! in the event lines written). `check` skips the `.http` files (their first line is not JSON).
//! A recording is never overwritten: a name met again gets a numbered suffix.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use http::HeaderMap;

use super::attempts::AttemptRef;
use super::feed::{LineSink, Offer};

/// `path?query` with secret parameters redacted.
pub fn redact_query(path_and_query: &str) -> String {
    super::redact::query(path_and_query)
}

/// Where requests are written.
pub struct Recorder {
    requests: PathBuf,
}

impl Recorder {
    /// Create `dir/requests/`.
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        let requests = dir.join("requests");
        std::fs::create_dir_all(&requests)?;
        Ok(Recorder { requests })
    }

    /// The session's event file in `dir` for a proxy started at `start_ms`.
    pub fn events_path(dir: &Path, start_ms: i64) -> PathBuf {
        dir.join(format!("proxy-{start_ms}.jsonl"))
    }

    /// Save an attempt's request, secrets redacted. Failures are logged, never fatal.
    pub fn request(
        &self,
        a: &AttemptRef,
        method: &http::Method,
        path_and_query: &str,
        headers: &HeaderMap,
        body: &[u8],
    ) {
        let name: String = format!("{}.{}.http", a.turn, a.attempt)
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '#') {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let mut text = format!("{method} {} HTTP/1.1\r\n", redact_query(path_and_query));
        for (k, v) in headers {
            let raw = String::from_utf8_lossy(v.as_bytes());
            let value = super::redact::header_value(k.as_str(), &raw);
            text.push_str(&format!("{k}: {value}\r\n"));
        }
        text.push_str("\r\n");
        let mut bytes = text.into_bytes();
        bytes.extend_from_slice(&super::redact::body(body));
        if let Err(e) = write_new(&self.requests, &name, &bytes) {
            tracing::warn!(error = %e, "proxy: cannot record a request");
        }
    }
}

/// Write `bytes` to `dir/name`, never over an existing file: a name taken already (a turn id
/// met twice) gets `.2`, `.3`, ... before its extension, so no recorded request is lost.
fn write_new(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let (stem, ext) = name.rsplit_once('.').unwrap_or((name, ""));
    for n in 1..=1_000u32 {
        let candidate = if n == 1 {
            name.to_owned()
        } else {
            format!("{stem}.{n}.{ext}")
        };
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(dir.join(&candidate))
        {
            Ok(mut f) => return f.write_all(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AlreadyExists,
        format!("{name}: a thousand recordings of this name already"),
    ))
}

/// A line sink that also appends every line to a file (the recording), then passes it on.
/// A line is written when the next sink takes it (or is gone), so the file has the order the
/// engine sees.
pub struct Tee {
    file: Mutex<BufWriter<File>>,
    next: Box<dyn LineSink>,
    failed: bool,
}

impl Tee {
    /// Append to `path` (created) and pass lines to `next`.
    pub fn new(path: &Path, next: Box<dyn LineSink>) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(Tee {
            file: Mutex::new(BufWriter::new(file)),
            next,
            failed: false,
        })
    }
}

impl Tee {
    fn record(&mut self, redacted: &[u8]) {
        if let Ok(mut f) = self.file.lock() {
            let r = f
                .write_all(redacted)
                .and_then(|()| f.write_all(b"\n"))
                .and_then(|()| f.flush());
            if let Err(e) = r {
                if !self.failed {
                    tracing::warn!(error = %e, "proxy: cannot write the recording");
                }
                self.failed = true;
            }
        }
    }
}

impl LineSink for Tee {
    fn line(&mut self, line: Vec<u8>) {
        let redacted = super::redact::body(&line).into_owned();
        self.record(&redacted);
        self.next.line(line);
    }

    fn offer(&mut self, line: Vec<u8>) -> Offer {
        let redacted = super::redact::body(&line).into_owned();
        match self.next.offer(line) {
            Offer::Full(line) => Offer::Full(line),
            taken_or_lost => {
                self.record(&redacted);
                taken_or_lost
            }
        }
    }

    fn closed(&self) -> bool {
        self.next.closed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_query_parameters_are_redacted() {
        assert_eq!(
            redact_query("/v1beta/models/m:streamGenerateContent?alt=sse&key=AIzaSECRET"),
            "/v1beta/models/m:streamGenerateContent?alt=sse&key=[redacted]"
        );
        assert_eq!(redact_query("/v1/messages"), "/v1/messages");
    }

    #[test]
    fn recorded_requests_have_no_secrets() {
        let dir = tempfile::tempdir().expect("tempdir");
        let rec = Recorder::open(dir.path()).expect("open");
        let mut h = HeaderMap::new();
        h.insert("x-api-key", "sk-ant-SECRET".parse().expect("v"));
        h.insert("authorization", "Bearer sk-SECRET".parse().expect("v"));
        h.insert("x-goog-api-key", "AIzaSECRET".parse().expect("v"));
        h.insert("content-type", "application/json".parse().expect("v"));
        let a = AttemptRef {
            turn: "px-1#2".to_owned(),
            attempt: 1,
            api: super::super::history::Api::Anthropic,
        };
        rec.request(
            &a,
            &http::Method::POST,
            "/v1/messages?key=SECRET",
            &h,
            b"{\"model\":\"m\"}",
        );
        let text =
            std::fs::read_to_string(dir.path().join("requests/px-1#2.1.http")).expect("read");
        assert!(!text.contains("SECRET"), "{text}");
        assert!(text.contains("content-type: application/json"));
        assert!(text.ends_with("{\"model\":\"m\"}"));
        // The same attempt name again (issue 21: two calls once shared a turn id) is kept
        // beside the first, not over it.
        rec.request(&a, &http::Method::POST, "/v1/messages", &h, b"second");
        let again =
            std::fs::read_to_string(dir.path().join("requests/px-1#2.1.2.http")).expect("read");
        assert!(again.ends_with("second"));
        let first =
            std::fs::read_to_string(dir.path().join("requests/px-1#2.1.http")).expect("read");
        assert_eq!(first, text);
    }
}
