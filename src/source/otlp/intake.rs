//! Reading an OTLP request body under the receiver's limits, before anything is decoded: the
//! body-read deadline, the size limit (as sent and decompressed, across every gRPC message of
//! a request), and the memory the request will occupy, charged to the queue's reservation as
//! bytes arrive, as they are inflated, and (from a scan of the body) for what decoding will
//! build, so a request that cannot fit is refused before it is decoded.

use std::io::Read;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;

use super::accept::{Outcome, Rejection};
use super::queue::{Refused, Reservation};

/// The refusal for a reservation that cannot grow.
pub fn refused(e: Refused) -> Rejection {
    let outcome = match e {
        Refused::TooLarge { .. } => Outcome::TooLarge,
        Refused::Spool(_) => Outcome::SpoolError,
        Refused::Full { .. } | Refused::Closed => Outcome::Busy,
    };
    Rejection::new(outcome, e.to_string())
}

fn too_large(limit: usize, what: &str) -> Rejection {
    Rejection::new(
        Outcome::TooLarge,
        format!("the request body is larger than the limit of {limit} bytes ({what})"),
    )
}

/// Why a body could not be read.
pub enum ReadError {
    /// Refused (size, memory, malformed).
    Refused(Rejection),
    /// Not received within the deadline.
    TimedOut(Rejection),
}

/// The whole body, at most `limit` bytes, within `deadline`, each frame charged to `res`.
pub async fn read<B>(
    body: B,
    limit: usize,
    deadline: Duration,
    res: &mut Reservation,
) -> Result<Bytes, ReadError>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    // A body that says its size (`content-length`) gets one exact buffer, not a doubling
    // series: under mimalloc's purge delay each freed step stays resident for a second.
    let hint = http_body::Body::size_hint(&body)
        .exact()
        .and_then(|n| usize::try_from(n).ok())
        .filter(|n| *n <= limit);
    let collect = async {
        let mut body = body;
        let mut out = Vec::new();
        if let Some(n) = hint {
            grow_charged(&mut out, n, limit, res)?;
        }
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| {
                Rejection::new(
                    Outcome::Malformed,
                    format!("cannot read the request body: {e}"),
                )
            })?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            if out.len() + data.len() > limit {
                return Err(too_large(limit, "as sent"));
            }
            // Charged by capacity: what the buffer really holds.
            grow_charged(&mut out, data.len(), limit, res)?;
            out.extend_from_slice(&data);
        }
        Ok(Bytes::from(out))
    };
    match tokio::time::timeout(deadline, collect).await {
        Ok(r) => r.map_err(ReadError::Refused),
        Err(_) => Err(ReadError::TimedOut(Rejection::new(
            Outcome::TooSlow,
            format!(
                "the request body did not arrive within {} ms",
                deadline.as_millis()
            ),
        ))),
    }
}

/// Make room for `n` more bytes in `buf`, charging the new allocation before it is made and
/// giving back the old one after (a reallocation holds both for a moment).
/// The buffer never grows past `max` (the request's limit) by doubling.
fn grow_charged(
    buf: &mut Vec<u8>,
    n: usize,
    max: usize,
    res: &mut Reservation,
) -> Result<(), Rejection> {
    let (len, cap) = (buf.len(), buf.capacity());
    if len + n <= cap {
        return Ok(());
    }
    let new_cap = (2 * cap).max(4096).min(max).max(len + n);
    res.grow(new_cap as u64).map_err(refused)?;
    buf.reserve_exact(new_cap - len);
    res.release(cap as u64);
    Ok(())
}

/// A buffer whose growth (its capacity) is charged to a reservation.
struct Charged<'r> {
    out: Vec<u8>,
    max: usize,
    res: &'r mut Reservation,
}

impl Charged<'_> {
    fn extend(&mut self, data: &[u8]) -> Result<(), Rejection> {
        grow_charged(&mut self.out, data.len(), self.max, self.res)?;
        self.out.extend_from_slice(data);
        Ok(())
    }

    /// Append gzip `data` decompressed, at most `room` bytes of it.
    fn gunzip(&mut self, data: &[u8], room: usize, limit: usize) -> Result<usize, Rejection> {
        // The size the gzip trailer states (ISIZE, mod 2^32; a hint, never trusted beyond
        // the room left): room for it at once instead of a doubling series of buffers.
        if let Some(isize) = data.last_chunk::<4>().map(|b| u32::from_le_bytes(*b)) {
            let want = usize::try_from(isize).unwrap_or(usize::MAX).min(room);
            grow_charged(&mut self.out, want, self.max, self.res)?;
        }
        let mut dec = flate2::read::GzDecoder::new(data);
        let mut chunk = [0u8; 16 * 1024];
        let mut total = 0usize;
        loop {
            let n = dec.read(&mut chunk).map_err(|e| {
                Rejection::new(
                    Outcome::Malformed,
                    format!("the gzip data cannot be decompressed: {e}"),
                )
            })?;
            if n == 0 {
                return Ok(total);
            }
            total += n;
            if total > room {
                return Err(too_large(limit, "decompressed"));
            }
            self.extend(&chunk[..n])?;
        }
    }
}

/// Decompress gzip `data`, at most `limit` bytes out, the buffer charged to `res` as it grows
/// (never more than `limit` + one chunk decompressed).
pub fn gunzip(data: &[u8], limit: usize, res: &mut Reservation) -> Result<Vec<u8>, Rejection> {
    let mut c = Charged {
        out: Vec::new(),
        max: limit,
        res,
    };
    c.gunzip(data, limit, limit)?;
    Ok(c.out)
}

/// The gRPC messages of a body (`grpc-encoding: gzip` decompressed) framed uncompressed,
/// `limit` bytes in all messages together, compressed or not; the output charged to `res` as
/// it grows.
pub fn grpc_frames(
    body: &[u8],
    gzip: bool,
    limit: usize,
    res: &mut Reservation,
) -> Result<Bytes, Rejection> {
    let mut c = Charged {
        out: Vec::new(),
        // The messages and their 5-byte headers (a few messages in practice).
        max: limit.saturating_add(64),
        res,
    };
    let mut plain_total = 0usize;
    let mut rest = body;
    while !rest.is_empty() {
        let bad = || Rejection::new(Outcome::Malformed, "a truncated gRPC message");
        let (head, tail) = rest.split_at_checked(5).ok_or_else(bad)?;
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        let (msg, tail) = tail.split_at_checked(len).ok_or_else(bad)?;
        rest = tail;
        let room = limit.saturating_sub(plain_total);
        let at = c.out.len();
        c.extend(&[0, 0, 0, 0, 0])?;
        let n = match (head[0], gzip) {
            (0, _) => {
                if msg.len() > room {
                    return Err(all_too_large(limit, ""));
                }
                c.extend(msg)?;
                msg.len()
            }
            (1, true) => c.gunzip(msg, room, limit).map_err(|r| {
                if r.outcome == Outcome::TooLarge {
                    all_too_large(limit, " (decompressed)")
                } else {
                    r
                }
            })?,
            _ => {
                return Err(Rejection::new(
                    Outcome::Malformed,
                    "a compressed gRPC message without `grpc-encoding: gzip`",
                ));
            }
        };
        plain_total += n;
        c.out[at + 1..at + 5].copy_from_slice(&(n as u32).to_be_bytes());
    }
    Ok(c.out.into())
}

fn all_too_large(limit: usize, how: &str) -> Rejection {
    Rejection::new(
        Outcome::TooLarge,
        format!("the request's messages together are larger than the limit of {limit} bytes{how}"),
    )
}

/// The bytes decoding a protobuf logs or trace request builds, at most: the message structs
/// of every nested message (counted by walking the wire format, without decoding), a record
/// struct and line per log record or span (the messages three levels down), and the text.
/// The walk stops once the estimate passes `cap` (the request is refused then anyway).
pub fn protobuf_estimate(body: &[u8], cap: u64) -> u64 {
    let mut count = Counts {
        record_cost: (std::mem::size_of::<opentelemetry_proto::tonic::trace::v1::Span>().max(
            std::mem::size_of::<opentelemetry_proto::tonic::logs::v1::LogRecord>(),
        ) + std::mem::size_of::<super::record::Record>()
            + RECORD_LINE_FLOOR) as u64,
        cap,
        ..Counts::default()
    };
    if valid(body) {
        walk(body, 0, true, &mut count);
    }
    2 * body.len() as u64 + count.cost()
}

/// The bytes decoding an OTLP/JSON request builds, at most: a JSON value per token that can
/// start one (`{`, `[`, `,`, `:`), and the text twice (the parsed strings and the lines).
pub fn json_estimate(body: &[u8]) -> u64 {
    let tokens = body
        .iter()
        .filter(|b| matches!(b, b'{' | b'[' | b',' | b':'))
        .count() as u64;
    2 * body.len() as u64 + tokens * JSON_VALUE_COST
}

/// Bytes of a decoded nested message (a `KeyValue` with its `AnyValue`, a scope, ...).
const MESSAGE_COST: u64 = 64;
/// Bytes of a parsed JSON value with its place in a map or array.
const JSON_VALUE_COST: u64 = 96;
/// The shortest JSON line of a record plus its stream name.
const RECORD_LINE_FLOOR: usize = 128;
/// Nesting walked; deeper bytes are charged as if every two were a message.
const MAX_DEPTH: usize = 10;

#[derive(Default)]
struct Counts {
    messages: u64,
    records: u64,
    record_cost: u64,
    cap: u64,
}

impl Counts {
    fn cost(&self) -> u64 {
        self.messages
            .saturating_mul(MESSAGE_COST)
            .saturating_add(self.records.saturating_mul(self.record_cost))
    }
}

/// A field's number, wire type and (length-delimited) payload.
type Field<'a> = (u64, u64, &'a [u8]);

/// One field of a protobuf message: number, wire type, and the payload of a length-delimited
/// field; `None` at the end, `Some(Err)` when the bytes are not a message.
fn next_field<'a>(rest: &mut &'a [u8]) -> Option<Result<Field<'a>, ()>> {
    if rest.is_empty() {
        return None;
    }
    let field = (|| {
        let (key, n) = varint(rest)?;
        let mut r = &rest[n..];
        let (field, wire) = (key >> 3, key & 7);
        if field == 0 {
            return None;
        }
        let payload: &[u8] = match wire {
            0 => {
                let (_, n) = varint(r)?;
                r = &r[n..];
                &[]
            }
            1 | 5 => {
                r = r.get(if wire == 1 { 8 } else { 4 }..)?;
                &[]
            }
            2 => {
                let (len, n) = varint(r)?;
                let end = n.checked_add(usize::try_from(len).ok()?)?;
                let p = r.get(n..end)?;
                r = &r[end..];
                p
            }
            _ => return None,
        };
        *rest = r;
        Some((field, wire, payload))
    })();
    Some(field.ok_or(()))
}

/// Whether `buf` reads as a protobuf message (its fields only, not nested ones).
fn valid(buf: &[u8]) -> bool {
    let mut rest = buf;
    loop {
        match next_field(&mut rest) {
            None => return true,
            Some(Err(())) => return false,
            Some(Ok(_)) => {}
        }
    }
}

/// Count the length-delimited fields of a valid message `buf` (any of which may be a
/// message) and, through those that read as messages, theirs. Records are the fields at the
/// path 1 → 2 → 2 (`resource_logs.scope_logs.log_records`, `resource_spans.scope_spans.spans`).
fn walk(buf: &[u8], depth: usize, on_path: bool, count: &mut Counts) {
    if depth >= MAX_DEPTH {
        count.messages += buf.len() as u64 / 2;
        return;
    }
    let mut rest = buf;
    while let Some(Ok((field, wire, payload))) = next_field(&mut rest) {
        if wire != 2 {
            continue;
        }
        count.messages += 1;
        if on_path && depth == 2 && field == 2 {
            count.records += 1;
        }
        if count.cost() > count.cap {
            return;
        }
        let path = on_path && ((depth == 0 && field == 1) || (depth == 1 && field == 2));
        if valid(payload) {
            walk(payload, depth + 1, path, count);
        }
    }
}

fn varint(buf: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, b) in buf.iter().take(10).enumerate() {
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

#[cfg(test)]
#[path = "intake/tests.rs"]
mod tests;
