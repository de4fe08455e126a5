//! The fast path of the native decoder: one hand-written pass over the common shape of a
//! native line (an object of known keys with strings, non-negative integers, `null`, and
//! nested values for `args` and unknown keys), filling the same [`Fields`] the serde visitor
//! fills.
//!
//! It never decides anything the serde path would decide differently: whenever a line is not
//! plainly well-formed in the way it understands (invalid UTF-8 anywhere, an escaped key, a
//! `\u` escape, a negative or fractional or very long number, a control character, a `data`
//! envelope, nesting deeper than [`MAX_DEPTH`], any syntax error), it answers `None` and the
//! caller decodes the line with serde, which then produces the result or the exact error
//! message. `tests` in this module check both paths agree on many lines and on every one-byte
//! corruption of them.
//!
//! Measured on the bench log (callgrind, 100k lines, `check --single-thread`): the serde visitor
//! spent ~4,600 instructions per line, most in per-string UTF-8 validation, escape scanning and
//! moves of the wide `Fields` struct; validating the line once and scanning bytes here is the
//! main saving.

use std::borrow::Cow;

use super::Fields;
use crate::event::EffectClass;

/// Nesting accepted inside skipped values (serde's own limit is 128).
const MAX_DEPTH: usize = 64;

/// The line's fields, or `None`: decode it with serde instead.
#[cfg(test)]
pub(super) fn fields(line: &[u8]) -> Option<Fields<'_>> {
    let mut f = Fields::default();
    fill(line, &mut f)?;
    Some(f)
}

/// Fill `f` (fresh) with the line's fields; `None`: decode it with serde instead (`f` is then
/// partly filled, to be dropped). Filling the caller's `Fields` in place, rather than returning
/// one, saves copies of the wide struct (~7% of `check` in memcpy).
pub(super) fn fill<'a>(line: &'a [u8], f: &mut Fields<'a>) -> Option<()> {
    // SIMD validation (the line is mostly string bytes): std's `from_utf8` was ~4% of `check`.
    let text = simdutf8::basic::from_utf8(line).ok()?;
    let mut p = Parser {
        s: text,
        b: text.as_bytes(),
        i: 0,
    };
    p.ws();
    p.eat(b'{')?;
    p.ws();
    if p.peek() == Some(b'}') {
        p.i += 1;
    } else {
        loop {
            let key = p.key()?;
            p.ws();
            p.eat(b':')?;
            p.ws();
            match key {
                "v" => f.version = p.opt_uint()?,
                "turn" => f.turn = p.opt_id()?,
                "type" => f.ty = p.opt_str()?,
                "ts" => f.ts = p.opt_ts()?,
                "attempt" => f.attempt = p.opt_uint()?,
                "model" => f.model = p.opt_str()?,
                "provider" => f.provider = p.opt_str()?,
                "session" => f.session = p.opt_id()?,
                "agent" => f.agent = p.opt_str()?,
                "traceparent" => f.traceparent = p.opt_str()?,
                "request_id" => f.request_id = p.opt_str()?,
                "reason" => f.reason = p.opt_str()?,
                "prefill" => f.prefill = p.opt_str()?,
                "text" => f.text = p.opt_str()?,
                "id" => f.id = p.opt_id()?,
                "name" => f.name = p.opt_str()?,
                "args" => f.args = Some(p.raw()?),
                "effect_key" => f.effect_key = p.opt_str()?,
                "step" => f.step = p.opt_uint()?.and_then(|v| i64::try_from(v).ok()),
                "effect" => f.effect = p.opt_effect()?,
                "status" => f.status = p.opt_str()?,
                "message" => f.message = p.opt_str()?,
                "code" => f.code = p.opt_id()?,
                "signal" => f.signal = p.opt_str()?,
                // Provider envelopes keep a `RawValue`: left to serde.
                "data" => return None,
                "input_tokens" => f.input_tokens = p.opt_uint()?,
                "output_tokens" => f.output_tokens = p.opt_uint()?,
                "cached_input_tokens" => f.cached_input_tokens = p.opt_uint()?,
                "cache_write_tokens" => f.cache_write_tokens = p.opt_uint()?,
                "reasoning_tokens" => f.reasoning_tokens = p.opt_uint()?,
                // Any other key goes to the serde visitor, which knows every field of the
                // format and counts the unknown ones: a field added there can never be
                // silently dropped here (the proxy's `wire_only` once was).
                _ => return None,
            }
            p.ws();
            match p.next()? {
                b',' => p.ws(),
                b'}' => break,
                _ => return None,
            }
        }
    }
    p.ws();
    (p.i == p.b.len()).then_some(())
}

const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;

/// The index of the first `"`, `\\` or control character, eight bytes at a time (strings are
/// short, so this beats a SIMD search's set-up).
#[inline]
fn special(bytes: &[u8]) -> Option<usize> {
    let mut words = bytes.chunks_exact(8);
    let mut at = 0;
    for w in &mut words {
        let mut buf = [0u8; 8];
        buf.copy_from_slice(w);
        let x = u64::from_le_bytes(buf);
        let quote = x ^ (LO * u64::from(b'"'));
        let slash = x ^ (LO * u64::from(b'\\'));
        // Per byte: zero (a quote or backslash), or below 0x20. The lowest flagged byte is
        // exact (borrows only flag bytes above a true one).
        let m = (quote.wrapping_sub(LO) & !quote
            | slash.wrapping_sub(LO) & !slash
            | x.wrapping_sub(LO * 0x20) & !x)
            & HI;
        if m != 0 {
            return Some(at + (m.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    words
        .remainder()
        .iter()
        .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
        .map(|p| at + p)
}

struct Parser<'a> {
    s: &'a str,
    b: &'a [u8],
    i: usize,
}

impl<'a> Parser<'a> {
    #[inline]
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    #[inline]
    fn next(&mut self) -> Option<u8> {
        let c = self.peek()?;
        self.i += 1;
        Some(c)
    }

    #[inline]
    fn eat(&mut self, c: u8) -> Option<()> {
        (self.next()? == c).then_some(())
    }

    #[inline]
    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    /// A string's body after its opening quote up to (not including) the closing quote or the
    /// first backslash; `None` at a control character or the end of the line.
    #[inline]
    fn plain_run(&mut self) -> Option<usize> {
        let start = self.i;
        let n = special(&self.b[start..])?;
        if self.b[start + n] < 0x20 {
            return None;
        }
        self.i = start + n;
        Some(start)
    }

    /// A key: a string without escapes.
    #[inline]
    fn key(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let start = self.plain_run()?;
        let end = self.i;
        self.eat(b'"')?;
        self.s.get(start..end)
    }

    /// A string value: borrowed when it has no escapes, unescaped (and owned) otherwise.
    fn string(&mut self) -> Option<Cow<'a, str>> {
        self.eat(b'"')?;
        let start = self.plain_run()?;
        if self.peek()? == b'"' {
            let end = self.i;
            self.i += 1;
            return Some(Cow::Borrowed(self.s.get(start..end)?));
        }
        let mut owned = String::with_capacity(self.i - start + 16);
        owned.push_str(self.s.get(start..self.i)?);
        loop {
            match self.next()? {
                b'"' => return Some(Cow::Owned(owned)),
                b'\\' => owned.push(match self.next()? {
                    b'"' => '"',
                    b'\\' => '\\',
                    b'/' => '/',
                    b'b' => '\u{8}',
                    b'f' => '\u{c}',
                    b'n' => '\n',
                    b'r' => '\r',
                    b't' => '\t',
                    // `\u` escapes (surrogate pairs, lone surrogates): left to serde.
                    _ => return None,
                }),
                _ => {
                    self.i -= 1;
                    let run = self.plain_run()?;
                    owned.push_str(self.s.get(run..self.i)?);
                }
            }
        }
    }

    #[inline]
    fn null(&mut self) -> Option<bool> {
        if self.b[self.i..].starts_with(b"null") {
            self.i += 4;
            Some(true)
        } else {
            Some(false)
        }
    }

    fn opt_str(&mut self) -> Option<Option<Cow<'a, str>>> {
        if self.null()? {
            return Some(None);
        }
        self.string().map(Some)
    }

    /// The digits of a non-negative integer of at most 18 digits (below 2^63, so it reads
    /// the same as `u64` and `i64`), without a fraction or exponent.
    fn digits(&mut self) -> Option<&'a str> {
        let start = self.i;
        while let Some(b'0'..=b'9') = self.peek() {
            self.i += 1;
        }
        let n = self.i - start;
        if n == 0 || n > 18 || (n > 1 && self.b[start] == b'0') {
            return None;
        }
        if let Some(b'.' | b'e' | b'E') = self.peek() {
            return None;
        }
        self.s.get(start..self.i)
    }

    fn opt_uint(&mut self) -> Option<Option<u64>> {
        if self.null()? {
            return Some(None);
        }
        self.digits()?.parse().ok().map(Some)
    }

    /// An id: a string, or an integer kept as its digits.
    fn opt_id(&mut self) -> Option<Option<Cow<'a, str>>> {
        match self.peek()? {
            b'"' => self.string().map(Some),
            b'0'..=b'9' => self.digits().map(|d| Some(Cow::Borrowed(d))),
            _ if self.null()? => Some(None),
            _ => None,
        }
    }

    fn opt_ts(&mut self) -> Option<Option<i64>> {
        match self.peek()? {
            b'"' => {
                let s = self.string()?;
                crate::rfc3339::parse_ms(&s).map(Some)
            }
            _ if self.null()? => Some(None),
            _ => self.digits()?.parse().ok().map(Some),
        }
    }

    fn opt_effect(&mut self) -> Option<Option<EffectClass>> {
        if self.null()? {
            return Some(None);
        }
        match self.string()?.as_ref() {
            "read" => Some(Some(EffectClass::Read)),
            "write" => Some(Some(EffectClass::Write)),
            _ => None,
        }
    }

    /// A value's raw text, validated.
    fn raw(&mut self) -> Option<&'a str> {
        let start = self.i;
        self.skip_value(0)?;
        self.s.get(start..self.i)
    }

    /// Skip one JSON value, validating it as strictly as serde does.
    fn skip_value(&mut self, depth: usize) -> Option<()> {
        match self.peek()? {
            b'"' => self.skip_string(),
            b'{' => {
                if depth >= MAX_DEPTH {
                    return None;
                }
                self.i += 1;
                self.ws();
                if self.peek()? == b'}' {
                    self.i += 1;
                    return Some(());
                }
                loop {
                    self.skip_string()?;
                    self.ws();
                    self.eat(b':')?;
                    self.ws();
                    self.skip_value(depth + 1)?;
                    self.ws();
                    match self.next()? {
                        b',' => self.ws(),
                        b'}' => return Some(()),
                        _ => return None,
                    }
                }
            }
            b'[' => {
                if depth >= MAX_DEPTH {
                    return None;
                }
                self.i += 1;
                self.ws();
                if self.peek()? == b']' {
                    self.i += 1;
                    return Some(());
                }
                loop {
                    self.skip_value(depth + 1)?;
                    self.ws();
                    match self.next()? {
                        b',' => self.ws(),
                        b']' => return Some(()),
                        _ => return None,
                    }
                }
            }
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.skip_number(),
            _ => None,
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        if self.b[self.i..].starts_with(word) {
            self.i += word.len();
            Some(())
        } else {
            None
        }
    }

    fn skip_string(&mut self) -> Option<()> {
        self.eat(b'"')?;
        loop {
            self.plain_run()?;
            match self.next()? {
                b'"' => return Some(()),
                _ => match self.next()? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {}
                    b'u' => {
                        for _ in 0..4 {
                            if !self.next()?.is_ascii_hexdigit() {
                                return None;
                            }
                        }
                    }
                    _ => return None,
                },
            }
        }
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`
    fn skip_number(&mut self) -> Option<()> {
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.next()? {
            b'0' => {}
            b'1'..=b'9' => self.skip_digits(),
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            self.one_digit()?;
            self.skip_digits();
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.i += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.i += 1;
            }
            self.one_digit()?;
            self.skip_digits();
        }
        // serde reads `01` as an error ("invalid number"); so does this (the next byte must
        // end the number).
        match self.peek() {
            Some(b'0'..=b'9') => None,
            _ => Some(()),
        }
    }

    fn one_digit(&mut self) -> Option<()> {
        self.next()?.is_ascii_digit().then_some(())
    }

    fn skip_digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.i += 1;
        }
    }
}

#[cfg(test)]
mod tests;
