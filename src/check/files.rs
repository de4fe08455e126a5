//! Files for `check`: opening them (gzip-compressed logs are decompressed on the fly, known by
//! their magic bytes, whatever their name) and deciding which files of a directory are logs.
//!
//! A file named on the command line is always read. A file found by walking a directory is
//! read only when its content starts like a log: its first line (after decompression and
//! leading whitespace) is a JSON object on one line (`{"...`: native events, provider chunks,
//! gemini-cli records) or a server-sent-events field (`data:`, `event:`, `id:`, `retry:` or a
//! `:` comment), or it is gemini-cli's telemetry outfile (pretty-printed objects that name its
//! records). Everything else (source code, Markdown, pretty-printed JSON such as schemas,
//! images) is skipped and listed, so `check examples/` reads the logs and not the `.rs` files.
//! A file named on the command line that does not start like a log is refused with the reason
//! ([`not_a_log`]) unless its format is given.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use flate2::read::MultiGzDecoder;

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Bytes of a file's start looked at to decide whether it is a log.
const HEAD_BYTES: u64 = 4096;

/// Whether the file starts with the gzip magic bytes.
pub fn is_gzip(path: &Path) -> bool {
    let mut magic = [0u8; 2];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && magic == GZIP_MAGIC
}

/// Open a file for reading lines: gzip (all members) is decompressed.
pub fn open(path: &Path) -> io::Result<Box<dyn Read + Send>> {
    if is_gzip(path) {
        Ok(Box::new(MultiGzDecoder::new(io::BufReader::new(
            File::open(path)?,
        ))))
    } else {
        Ok(Box::new(File::open(path)?))
    }
}

/// Standard input for reading lines: gzip is decompressed when it starts with the magic bytes.
pub fn stdin() -> Box<dyn Read + Send> {
    let mut reader = io::BufReader::new(io::stdin());
    let gzip = io::BufRead::fill_buf(&mut reader).is_ok_and(|b| b.starts_with(&GZIP_MAGIC));
    if gzip {
        Box::new(MultiGzDecoder::new(reader))
    } else {
        Box::new(reader)
    }
}

/// Whether `head` (a file's first bytes, decompressed) starts like a log. Empty is a log (one
/// just created).
pub fn looks_like_log(head: &[u8]) -> bool {
    let head = head.strip_prefix(b"\xef\xbb\xbf").unwrap_or(head);
    let start = head.iter().position(|b| !b.is_ascii_whitespace());
    let Some(start) = start else {
        return true;
    };
    let rest = &head[start..];
    let first_line = rest.split(|&b| b == b'\n').next().unwrap_or(rest);
    if first_line.first() == Some(&b'{') {
        // A JSON object on one line, not the `{` of a pretty-printed document.
        return first_line[1..].iter().any(|b| !b.is_ascii_whitespace());
    }
    [&b"data:"[..], b"event:", b"id:", b"retry:", b":"]
        .iter()
        .any(|field| first_line.starts_with(field))
}

/// Whether `head` starts like a log or is gemini-cli's pretty-printed telemetry outfile (its
/// records named in the first bytes: the format sniffer decides it before the input ends).
fn starts_like_log(head: &[u8]) -> bool {
    looks_like_log(head)
        || matches!(
            retryscope_core::decode::detect::sniff(head, false),
            Some(Ok(retryscope_core::decode::Format::GeminiCliTelemetry))
        )
}

fn head_of(path: &Path) -> Option<Vec<u8>> {
    let mut head = Vec::new();
    match open(path).and_then(|r| r.take(HEAD_BYTES).read_to_end(&mut head)) {
        Ok(_) => Some(head),
        // A gzip stream cut inside the first 4 KiB still says what it is by what came out.
        Err(_) if !head.is_empty() => Some(head),
        Err(_) => None,
    }
}

/// Whether a file found in a directory should be read (see the module docs). Unreadable files
/// are kept, so that `check` reports them rather than skipping them silently.
pub fn is_log_file(path: &Path) -> bool {
    head_of(path).is_none_or(|head| starts_like_log(&head))
}

/// Why a file named on the command line is not read as a log: `None` when it starts like one
/// (or cannot be read: that is reported as unreadable), else the reason, quoting its first line.
pub fn not_a_log(path: &Path) -> Option<String> {
    let head = head_of(path)?;
    if starts_like_log(&head) {
        return None;
    }
    let text = String::from_utf8_lossy(&head);
    let first = text
        .trim_start_matches('\u{feff}')
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let quoted: String = first.chars().take(60).collect();
    let more = if first.chars().count() > 60 {
        "…"
    } else {
        ""
    };
    Some(format!(
        "its first line is neither a JSON object on one line nor a server-sent event \
         (`{quoted}{more}`)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn logs_and_non_logs_by_content() {
        assert!(looks_like_log(b"{\"turn\":\"t1\",\"type\":\"text\"}\n"));
        assert!(looks_like_log(b"\n  {\"a\":1}\n"));
        assert!(looks_like_log(b"event: message_start\ndata: {}\n"));
        assert!(looks_like_log(b"data: {\"id\":1}\n"));
        assert!(looks_like_log(b": keep-alive\n"));
        assert!(looks_like_log(b""));
        assert!(!looks_like_log(b"//! A Rust module.\nuse std::io;\n"));
        assert!(!looks_like_log(b"# Title\n"));
        assert!(!looks_like_log(b"{\n  \"$schema\": \"x\"\n}\n"));
        assert!(!looks_like_log(b"\x89PNG\r\n"));
        // gemini-cli's telemetry outfile: pretty-printed records that name themselves.
        assert!(starts_like_log(
            b"{\n  \"attributes\": {\n    \"event.name\": \"gemini_cli.api_request\"\n  }\n}\n"
        ));
        assert!(!starts_like_log(b"{\n  \"$schema\": \"x\"\n}\n"));
    }

    #[test]
    fn gzip_is_opened_by_its_magic_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl.gz");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(b"{\"turn\":\"t\",\"type\":\"turn_start\"}\n")
            .unwrap();
        std::fs::write(&path, gz.finish().unwrap()).unwrap();
        assert!(is_gzip(&path));
        let mut text = String::new();
        open(&path).unwrap().read_to_string(&mut text).unwrap();
        assert_eq!(text, "{\"turn\":\"t\",\"type\":\"turn_start\"}\n");
        assert!(is_log_file(&path));
    }
}
