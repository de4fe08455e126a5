//! Reading whole inputs line by line with a bounded line length.
//!
//! `LineReader` splits any `Read` into lines (without `\n` or a trailing `\r`), keeps at most
//! `max_line_bytes` of one line in memory, and skips longer lines to their newline, reporting
//! them as [`Line::TooLong`] so the caller can count them. Used by `check`.
//!
//! `LineSplitter` does the same for bytes pushed as they arrive (a live pipe read in
//! whatever pieces the kernel hands over), and gives up its held partial line on request
//! ([`LineSplitter::take_partial`]): a writer that stops without a newline, with the pipe
//! still open, is not left unread.

use std::io::{self, Read};

use memchr::memchr;

/// One item from a [`LineReader`].
#[derive(Debug, PartialEq, Eq)]
pub enum Line<'a> {
    /// A complete line (the last line of the input may lack its newline).
    Complete {
        /// 1-based line number.
        number: u64,
        /// The bytes, without the line ending.
        bytes: &'a [u8],
    },
    /// A line longer than the limit, skipped.
    TooLong {
        /// 1-based line number.
        number: u64,
        /// Its full length in bytes.
        len: u64,
    },
}

/// Splits a reader into bounded lines.
#[derive(Debug)]
pub struct LineReader<R> {
    reader: R,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    eof: bool,
    line_no: u64,
    max_line_bytes: usize,
    /// Bytes consumed so far (for progress).
    consumed: u64,
    /// Bytes of an over-long line skipped so far, while skipping.
    skipping: Option<u64>,
}

const CHUNK: usize = 1 << 20;

impl<R: Read> LineReader<R> {
    /// A reader that keeps at most `max_line_bytes` of one line.
    pub fn new(reader: R, max_line_bytes: usize) -> Self {
        let max_line_bytes = max_line_bytes.max(1);
        LineReader {
            reader,
            buf: vec![0; CHUNK.max(max_line_bytes + 1)],
            start: 0,
            end: 0,
            eof: false,
            line_no: 0,
            max_line_bytes,
            consumed: 0,
            skipping: None,
        }
    }

    /// Bytes consumed so far.
    pub fn consumed(&self) -> u64 {
        self.consumed
    }

    /// The next line, or `None` at end of input.
    pub fn next_line(&mut self) -> io::Result<Option<Line<'_>>> {
        loop {
            let window = &self.buf[self.start..self.end];
            if let Some(pos) = memchr(b'\n', window) {
                let line_start = self.start;
                self.start += pos + 1;
                self.consumed += pos as u64 + 1;
                self.line_no += 1;
                if let Some(skipped) = self.skipping.take() {
                    return Ok(Some(Line::TooLong {
                        number: self.line_no,
                        len: skipped + pos as u64,
                    }));
                }
                if pos > self.max_line_bytes {
                    return Ok(Some(Line::TooLong {
                        number: self.line_no,
                        len: pos as u64,
                    }));
                }
                let mut bytes = &self.buf[line_start..line_start + pos];
                if let [rest @ .., b'\r'] = bytes {
                    bytes = rest;
                }
                return Ok(Some(Line::Complete {
                    number: self.line_no,
                    bytes,
                }));
            }
            let pending = self.end - self.start;
            if pending > self.max_line_bytes || (self.skipping.is_some() && pending > 0) {
                // Over-long: drop what we have and keep skipping to the newline.
                *self.skipping.get_or_insert(0) += pending as u64;
                self.consumed += pending as u64;
                self.start = 0;
                self.end = 0;
            }
            if self.eof {
                if self.start == self.end {
                    if let Some(skipped) = self.skipping.take() {
                        self.line_no += 1;
                        return Ok(Some(Line::TooLong {
                            number: self.line_no,
                            len: skipped,
                        }));
                    }
                    return Ok(None);
                }
                let line_start = self.start;
                let len = self.end - self.start;
                self.start = self.end;
                self.consumed += len as u64;
                self.line_no += 1;
                let mut bytes = &self.buf[line_start..line_start + len];
                if let [rest @ .., b'\r'] = bytes {
                    bytes = rest;
                }
                return Ok(Some(Line::Complete {
                    number: self.line_no,
                    bytes,
                }));
            }
            // Make room: move the partial line to the front, then read more.
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if self.end == self.buf.len() {
                self.buf.resize(self.buf.len() * 2, 0);
            }
            let n = loop {
                match self.reader.read(&mut self.buf[self.end..]) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
            };
            if n == 0 {
                self.eof = true;
            }
            self.end += n;
        }
    }
}

/// Splits bytes pushed in arbitrary pieces into bounded lines, with [`LineReader`]'s rules
/// (no `\n` or trailing `\r`; a line over `max_line_bytes` is skipped and reported by its
/// length). Holds at most `max_line_bytes + 1` bytes of one partial line.
#[derive(Debug)]
pub struct LineSplitter {
    partial: Vec<u8>,
    max_line_bytes: usize,
    /// Bytes of an over-long line skipped so far, while skipping.
    skipping: Option<u64>,
    line_no: u64,
}

impl LineSplitter {
    /// A splitter that keeps at most `max_line_bytes` of one line.
    pub fn new(max_line_bytes: usize) -> Self {
        LineSplitter {
            partial: Vec::new(),
            max_line_bytes: max_line_bytes.max(1),
            skipping: None,
            line_no: 0,
        }
    }

    /// Split `bytes`, the input's next piece: each line it completes goes to `on_line`; what
    /// follows its last newline is held.
    pub fn push(&mut self, mut bytes: &[u8], on_line: &mut impl FnMut(Line<'_>)) {
        while let Some(pos) = memchr(b'\n', bytes) {
            let (head, rest) = (&bytes[..pos], &bytes[pos + 1..]);
            bytes = rest;
            self.line_no += 1;
            let number = self.line_no;
            if let Some(skipped) = self.skipping.take() {
                on_line(Line::TooLong {
                    number,
                    len: skipped + head.len() as u64,
                });
                continue;
            }
            let whole = self.partial.len() + head.len();
            if whole > self.max_line_bytes {
                self.partial.clear();
                on_line(Line::TooLong {
                    number,
                    len: whole as u64,
                });
                continue;
            }
            let line: &[u8] = if self.partial.is_empty() {
                head
            } else {
                self.partial.extend_from_slice(head);
                &self.partial
            };
            on_line(Line::Complete {
                number,
                bytes: line.strip_suffix(b"\r").unwrap_or(line),
            });
            self.partial.clear();
        }
        match &mut self.skipping {
            Some(skipped) => *skipped += bytes.len() as u64,
            None if self.partial.len() + bytes.len() > self.max_line_bytes => {
                self.skipping = Some((self.partial.len() + bytes.len()) as u64);
                self.partial.clear();
            }
            None => self.partial.extend_from_slice(bytes),
        }
    }

    /// Whether a partial line (or an over-long one being skipped) is held.
    pub fn holds_partial(&self) -> bool {
        !self.partial.is_empty() || self.skipping.is_some()
    }

    /// Give up the held partial line as a line of its own (the input ended, or stayed quiet
    /// with one held): whatever completes it later is the next line.
    pub fn take_partial(&mut self, on_line: &mut impl FnMut(Line<'_>)) {
        if !self.holds_partial() {
            return;
        }
        self.line_no += 1;
        let number = self.line_no;
        match self.skipping.take() {
            Some(len) => on_line(Line::TooLong { number, len }),
            None => {
                let line = &self.partial[..];
                on_line(Line::Complete {
                    number,
                    bytes: line.strip_suffix(b"\r").unwrap_or(line),
                });
            }
        }
        self.partial.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(input: &[u8], max: usize) -> Vec<String> {
        let mut r = LineReader::new(input, max);
        let mut out = Vec::new();
        while let Some(line) = r.next_line().unwrap() {
            out.push(match line {
                Line::Complete { number, bytes } => {
                    format!("{number}:{}", String::from_utf8_lossy(bytes))
                }
                Line::TooLong { number, len } => format!("{number}:TOO_LONG({len})"),
            });
        }
        assert_eq!(r.consumed(), input.len() as u64);
        out
    }

    #[test]
    fn splits_lines_crlf_and_unterminated_tail() {
        assert_eq!(
            collect(b"a\r\nbb\n\nccc", 10),
            vec!["1:a", "2:bb", "3:", "4:ccc"]
        );
    }

    #[test]
    fn skips_over_long_lines_and_goes_on() {
        let mut input = b"ok\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', 3 * CHUNK + 7));
        input.extend(b"\nnext\n");
        input.extend(std::iter::repeat_n(b'y', 20));
        assert_eq!(
            collect(&input, 10),
            vec![
                "1:ok".to_string(),
                format!("2:TOO_LONG({})", 3 * CHUNK + 7),
                "3:next".to_string(),
                "4:TOO_LONG(20)".to_string()
            ]
        );
    }

    #[test]
    fn line_exactly_at_limit_is_kept() {
        assert_eq!(
            collect(b"12345\n123456\n", 5),
            vec!["1:12345", "2:TOO_LONG(6)"]
        );
    }

    fn split(pieces: &[&[u8]], max: usize) -> Vec<String> {
        let mut s = LineSplitter::new(max);
        let mut out = Vec::new();
        let mut on = |line: Line<'_>| {
            out.push(match line {
                Line::Complete { number, bytes } => {
                    format!("{number}:{}", String::from_utf8_lossy(bytes))
                }
                Line::TooLong { number, len } => format!("{number}:TOO_LONG({len})"),
            })
        };
        for p in pieces {
            s.push(p, &mut on);
        }
        s.take_partial(&mut on);
        out
    }

    #[test]
    fn the_splitter_reads_what_the_reader_reads_whatever_the_pieces() {
        let mut input = b"ok\r\n\nlong ".to_vec();
        input.extend(std::iter::repeat_n(b'x', 40));
        input.extend(b"\nnext\nexactly10c\nelevenchars\ntail\r");
        let whole = collect(&input, 10);
        for size in [1, 2, 3, 7, 10, 11, 64] {
            let pieces: Vec<&[u8]> = input.chunks(size).collect();
            assert_eq!(split(&pieces, 10), whole, "pieces of {size}");
        }
    }

    #[test]
    fn a_partial_line_taken_is_delivered_once_and_what_follows_is_the_next_line() {
        let mut s = LineSplitter::new(100);
        let mut out = Vec::new();
        let mut on = |line: Line<'_>| out.push(format!("{line:?}"));
        s.push(b"a\nda", &mut on);
        assert!(s.holds_partial());
        s.take_partial(&mut on);
        assert!(!s.holds_partial());
        s.take_partial(&mut on);
        s.push(b"ta\n", &mut on);
        assert_eq!(
            out,
            vec![
                "Complete { number: 1, bytes: [97] }",
                "Complete { number: 2, bytes: [100, 97] }",
                "Complete { number: 3, bytes: [116, 97] }",
            ]
        );
    }
}
