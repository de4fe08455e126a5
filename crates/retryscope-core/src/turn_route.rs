//! Where a native line's turn goes: a light scan for the top-level `turn` (and `ts`) of a JSON
//! object without decoding it, and the stable hash of the turn id that every router uses:
//! `check`'s shard workers and `ship`'s NATS partitions. Escaped and plain spellings of one id
//! hash alike (the hash is over the unescaped id), and so does a turn id as the correlator
//! holds it ([`shard_of_id`]), which is how a restored checkpoint's turns find their shard.

use crate::fasthash;

/// The stable hash of a line's top-level `turn` (`None`: no turn, or an unreadable one).
pub fn turn_hash(line: &[u8]) -> Option<u64> {
    hash_turn_token(top_level(line, false).0?)
}

/// The stable hash of a raw `turn` token (a JSON string with its quotes, or a number).
pub fn hash_turn_token(raw: &[u8]) -> Option<u64> {
    if raw.first() == Some(&b'"') && raw.contains(&b'\\') {
        serde_json::from_slice::<String>(raw)
            .ok()
            .map(|s| fasthash::fnv1a(s.as_bytes()))
    } else if raw.first() == Some(&b'"') && raw.len() >= 2 {
        Some(fasthash::fnv1a(&raw[1..raw.len() - 1]))
    } else {
        Some(fasthash::fnv1a(raw))
    }
}

/// Which of `count` shards owns a native line: by the hash of its top-level `turn`; shard 0
/// when it has none (it reports the line's error).
pub fn shard_of_line(line: &[u8], count: u32) -> u32 {
    match turn_hash(line) {
        Some(hash) => (hash % u64::from(count.max(1))) as u32,
        None => 0,
    }
}

/// Which of `count` shards owns the turn `id` (unescaped, as the correlator holds it): the
/// same shard [`shard_of_line`] sends its lines to.
pub fn shard_of_id(id: &str, count: u32) -> u32 {
    (fasthash::fnv1a(id.as_bytes()) % u64::from(count.max(1))) as u32
}

/// The raw JSON tokens of the top-level `turn` and `ts` values (a string with its quotes, or a
/// number), scanning only as far as needed.
pub fn top_level_turn_and_ts(line: &[u8]) -> (Option<&[u8]>, Option<&[u8]>) {
    top_level(line, true)
}

/// The scan, stopping at `turn` unless `want_ts` (most lines put `ts` after `type`, or have
/// none, so looking for it costs a scan of the whole line).
fn top_level(line: &[u8], want_ts: bool) -> (Option<&[u8]>, Option<&[u8]>) {
    let mut turn = None;
    let mut ts = None;
    let mut i = skip_ws(line, 0);
    if line.get(i) != Some(&b'{') {
        return (None, None);
    }
    i += 1;
    loop {
        i = skip_ws(line, i);
        if line.get(i) != Some(&b'"') {
            break;
        }
        let Some(key_end) = string_end(line, i) else {
            break;
        };
        let key = &line[i + 1..key_end - 1];
        i = skip_ws(line, key_end);
        if line.get(i) != Some(&b':') {
            break;
        }
        i = skip_ws(line, i + 1);
        let Some(value_end) = value_end(line, i) else {
            break;
        };
        match key {
            b"turn" => turn = Some(&line[i..value_end]),
            b"ts" => ts = Some(&line[i..value_end]),
            _ => {}
        }
        if turn.is_some() && (ts.is_some() || !want_ts) {
            break;
        }
        i = skip_ws(line, value_end);
        match line.get(i) {
            Some(b',') => i += 1,
            _ => break,
        }
    }
    (turn, ts)
}

fn skip_ws(line: &[u8], mut i: usize) -> usize {
    while matches!(line.get(i), Some(b' ' | b'\t' | b'\r' | b'\n')) {
        i += 1;
    }
    i
}

/// Index just past the closing quote of the string starting at `i`.
fn string_end(line: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    while j < line.len() {
        match line[j] {
            b'\\' => j += 2,
            b'"' => return Some(j + 1),
            _ => j += 1,
        }
    }
    None
}

/// Index just past the value starting at `i`.
fn value_end(line: &[u8], i: usize) -> Option<usize> {
    match line.get(i)? {
        b'"' => string_end(line, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            while j < line.len() {
                match line[j] {
                    b'"' => {
                        j = string_end(line, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            None
        }
        _ => {
            let mut j = i;
            while j < line.len() && !matches!(line[j], b',' | b'}' | b' ' | b'\t' | b'\r' | b'\n') {
                j += 1;
            }
            Some(j)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaped_and_plain_ids_hash_alike_and_no_turn_is_none() {
        assert_eq!(
            turn_hash(br#"{"turn":"tA","type":"text"}"#),
            turn_hash(br#"{"type":"text","turn":"t\u0041"}"#)
        );
        assert_eq!(turn_hash(br#"{"turn":"tA"}"#), Some(fasthash::fnv1a(b"tA")));
        assert_eq!(turn_hash(br#"{"type":"text"}"#), None);
        assert_eq!(turn_hash(b"not json"), None);
    }
}
