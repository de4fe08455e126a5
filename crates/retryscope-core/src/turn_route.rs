//! Where a line goes when several shards share the input (the live engine's workers, `check`'s
//! shard workers, `ship`'s NATS partitions).
//!
//! Owns: the light scan for a native line's top-level `turn` (and `ts`) without decoding it,
//! and the stable hash of the turn id that every router uses. Escaped and plain spellings of
//! one id hash alike (the hash is over the unescaped id), and so does a turn id as the
//! correlator holds it (`shard_of_id`), which is how a restored checkpoint's turns find
//! their shard.
//!
//! Also the routes of whole streams ([`Routing`]): a stream that is not native (a provider's
//! SSE, an agent's own format, an OTLP session) is read by one shard only, the one its
//! route hashes to: [`stream_route`] of its name, or [`joined_route`] for every stream that
//! feeds the gemini-cli session joiner (a session's telemetry and stream-json come on
//! different streams and must meet in one joiner). Each turn keeps the route of the feed
//! that opened it (0: native lines, routed by the id), so [`shard_of_turn`] puts a restored
//! turn back where its next events will go, whatever the shard count.

use crate::event::TimestampMs;
use crate::fasthash;

/// The stable hash of a line's top-level `turn` (`None`: no turn, or an unreadable one).
pub fn turn_hash(line: &[u8]) -> Option<u64> {
    hash_turn_token(top_level(line, false).0?)
}

/// The stable hash of a raw `turn` token (a JSON string with its quotes, or a number).
pub(crate) fn hash_turn_token(raw: &[u8]) -> Option<u64> {
    match raw {
        [b'"', inner @ .., b'"'] => {
            // One pass: hash, and unescape through serde at the first backslash.
            let mut hash = fasthash::Fnv1a::new();
            for &b in inner {
                if b == b'\\' {
                    return serde_json::from_slice::<String>(raw)
                        .ok()
                        .map(|s| fasthash::fnv1a(s.as_bytes()));
                }
                hash.write_byte(b);
            }
            Some(hash.finish())
        }
        _ => Some(fasthash::fnv1a(raw)),
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
pub(crate) fn shard_of_id(id: &str, count: u32) -> u32 {
    (fasthash::fnv1a(id.as_bytes()) % u64::from(count.max(1))) as u32
}

/// A route: which feed a stream's lines, or a turn's events, come through (0: native lines,
/// routed by turn id). Sixteen bits: a route only picks one of a few shards (`route % count`),
/// and it keeps an open turn's state within its 256-byte allocation.
pub type Route = u16;

/// How a stream's lines are shared among shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Routing {
    /// Native lines: each goes to the shard of its own turn ([`shard_of_line`]).
    ByTurn,
    /// Every line to the one shard of this route ([`shard_of_route`]): the stream's decoder
    /// state needs them all, in order.
    Whole(Route),
}

/// The route of a stream that is read whole: the stable hash of its name (never 0, which
/// stands for native lines in a turn's route).
pub fn stream_route(name: &str) -> Route {
    fold(fasthash::fnv1a(name.as_bytes()))
}

/// A stable 64-bit hash folded to a route, never 0.
fn fold(hash: u64) -> Route {
    let folded = hash ^ (hash >> 16) ^ (hash >> 32) ^ (hash >> 48);
    (folded as Route).max(1)
}

/// The route of every stream that feeds the gemini-cli session joiner, and of the turns the
/// joiner releases: one shard holds the joiner's whole state.
pub fn joined_route() -> Route {
    fold(fasthash::fnv1a(b"gemini-cli session join"))
}

/// Which of `count` shards reads the streams of `route`.
pub fn shard_of_route(route: Route, count: u32) -> u32 {
    u32::from(route) % count.max(1)
}

/// Which of `count` shards owns the turn `id` that was opened through `route` (0: by native
/// lines, routed by the id; else the route of the stream or joined path that feeds it).
pub fn shard_of_turn(id: &str, route: Route, count: u32) -> u32 {
    if route == 0 {
        shard_of_id(id, count)
    } else {
        shard_of_route(route, count)
    }
}

/// One of several ingest paths that share the same input (the live engine's workers): native
/// lines are decoded by the shard of their turn, a whole stream by the shard of its route,
/// and lines that no turn owns (a native line without one, a line too long while a stream's
/// format is unknown) are counted by shard 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// This shard, from 0.
    pub index: u32,
    /// How many shards share the input.
    pub count: u32,
}

impl Shard {
    /// Whether this shard counts what no turn or stream owns (shard 0 does).
    pub(crate) fn primary(self) -> bool {
        self.index == 0
    }

    /// Whether this shard reads the streams of `route`.
    pub(crate) fn owns_route(self, route: Route) -> bool {
        shard_of_route(route, self.count) == self.index
    }
}

/// The stable hash of a line's top-level `turn` and its `ts` read as the decoder reads it:
/// what `check`'s shard workers need of every line. Lines in the canonical key order are read
/// in one pass (the id hashed while it is scanned, the digits of `ts` summed while they are
/// found); any other line gives exactly what [`top_level_turn_and_ts`], `hash_turn_token`
/// and the native decoder's `ts_token` give.
pub fn turn_hash_and_ts(line: &[u8]) -> (Option<u64>, Option<TimestampMs>) {
    if let Some(found) = canonical_hashed(line) {
        return found;
    }
    let (turn, ts) = top_level(line, true);
    (
        turn.and_then(hash_turn_token),
        ts.and_then(crate::decode::native::ts_token),
    )
}

/// [`turn_hash_and_ts`] for a canonical line with a plain id and integer `ts`; `None` for
/// anything else.
fn canonical_hashed(line: &[u8]) -> Option<(Option<u64>, Option<TimestampMs>)> {
    let mut i = canonical_turn(line)? + 1;
    let mut hash = fasthash::Fnv1a::new();
    loop {
        match *line.get(i)? {
            b'"' => break,
            b'\\' => return None,
            b => hash.write_byte(b),
        }
        i += 1;
    }
    let mut j = canonical_ts(line, i + 1)?;
    // Plain integer milliseconds as `ts_token` reads them: 1 to 18 digits, no leading zero.
    let first = j;
    let mut ms: TimestampMs = 0;
    while let Some(&b) = line.get(j) {
        let digit = b.wrapping_sub(b'0');
        if digit > 9 {
            break;
        }
        ms = ms.wrapping_mul(10).wrapping_add(TimestampMs::from(digit));
        j += 1;
    }
    let digits = j - first;
    if !(1..=18).contains(&digits)
        || (digits > 1 && line[first] == b'0')
        || !matches!(line.get(j), Some(b',' | b'}'))
    {
        return None;
    }
    Some((Some(hash.finish()), Some(ms)))
}

/// The raw JSON tokens of the top-level `turn` and `ts` values (a string with its quotes, or a
/// number), scanning only as far as needed.
pub fn top_level_turn_and_ts(line: &[u8]) -> (Option<&[u8]>, Option<&[u8]>) {
    top_level(line, true)
}

/// The scan, stopping at `turn` unless `want_ts` (most lines put `ts` after `type`, or have
/// none, so looking for it costs a scan of the whole line).
fn top_level(line: &[u8], want_ts: bool) -> (Option<&[u8]>, Option<&[u8]>) {
    if let Some((turn, ts)) = canonical(line, want_ts) {
        return (Some(turn), ts);
    }
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

/// JSON whitespace.
const fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn skip_ws(line: &[u8], mut i: usize) -> usize {
    while line.get(i).is_some_and(|&b| is_ws(b)) {
        i += 1;
    }
    i
}

/// Index just past the closing quote of the string starting at `i` (the opening quote).
/// Eight bytes at a time: this scan runs on every line in every `check` worker.
fn string_end(line: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    loop {
        j = quote_or_backslash(line, j)?;
        if line[j] == b'"' {
            return Some(j + 1);
        }
        j += 2;
    }
}

/// Index of the first `"` or `\\` at or after `j`.
fn quote_or_backslash(line: &[u8], mut j: usize) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    const QUOTES: u64 = u64::from_ne_bytes([b'"'; 8]);
    const BACKSLASHES: u64 = u64::from_ne_bytes([b'\\'; 8]);
    // A byte of `w` is zero → its high bit is set in `zero_bytes(w)` (bits above a true zero
    // byte may be set too, so only the lowest set bit is trusted).
    let zero_bytes = |w: u64| w.wrapping_sub(ONES) & !w & HIGHS;
    while let Some(chunk) = line.get(j..j + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let w = u64::from_le_bytes(word);
        let hits = zero_bytes(w ^ QUOTES) | zero_bytes(w ^ BACKSLASHES);
        if hits != 0 {
            return Some(j + (hits.trailing_zeros() / 8) as usize);
        }
        j += 8;
    }
    line.get(j..)?
        .iter()
        .position(|&b| b == b'"' || b == b'\\')
        .map(|k| j + k)
}

/// Where a canonical line's `turn` string starts (its opening quote): after `{"v":1,"turn":`
/// or `{"turn":`.
fn canonical_turn(line: &[u8]) -> Option<usize> {
    [&br#"{"v":1,"turn":""#[..], br#"{"turn":""#]
        .into_iter()
        .find(|prefix| line.starts_with(prefix))
        .map(|prefix| prefix.len() - 1)
}

/// Where a canonical line's `ts` value starts, given the end of its `turn` string: after
/// `,"type":"…","ts":`.
fn canonical_ts(line: &[u8], turn_end: usize) -> Option<usize> {
    canonical_type_and_ts(line, turn_end).map(|(_, ts)| ts)
}

/// A canonical line's `type` string (its quotes left out) and where its `ts` value starts.
fn canonical_type_and_ts(line: &[u8], turn_end: usize) -> Option<(&[u8], usize)> {
    let ty = turn_end + br#","type":"#.len();
    if line.get(turn_end..ty)? != br#","type":"# || line.get(ty) != Some(&b'"') {
        return None;
    }
    let ty_end = string_end(line, ty)?;
    let ts = ty_end + br#","ts":"#.len();
    (line.get(ty_end..ts)? == br#","ts":"#).then_some((&line[ty + 1..ty_end - 1], ts))
}

/// Whether a type's event is the line's alone, so that decoding it later gives the same
/// event: every type but `provider_chunk` (it feeds the turn's chunk decoders: its place in
/// the stream matters); `turn_end` (it flushes them) is [`Deferrable::ends_turn`]. A type
/// this version does not know decodes to nothing, then as now.
fn deferrable_type(ty: &[u8]) -> bool {
    ty != b"provider_chunk"
}

/// What [`deferrable`] reads of a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Deferrable<'a> {
    /// The turn id.
    pub(crate) turn: &'a [u8],
    /// `ts`, in milliseconds.
    pub(crate) ts_ms: TimestampMs,
    /// A `turn_end`: read at once (it flushes the turn's provider chunk decoders) unless
    /// the turn has none.
    pub(crate) ends_turn: bool,
}

/// A canonical native line (`{"v":1,"turn":…,"type":…,"ts":…`, or without `v`) whose
/// decoding can wait until its turn is released from a hold ([`crate::reorder`]): its turn
/// id, plain (no escape; the decoder gives the same string, or refuses the line when it is
/// not UTF-8), and its integer `ts` as the
/// decoder reads it, within the sane range ([`crate::bounds`]); its type one of
/// [`deferrable_type`]'s. `None` for any other line, which is decoded at once.
///
/// A line that repeats `turn`, `type` or `ts` later is read by the decoder with the last
/// value: held under the first, it is correlated with the turn it names, at the place in
/// time of the first.
pub(crate) fn deferrable(line: &[u8]) -> Option<Deferrable<'_>> {
    let i = canonical_turn(line)?;
    let turn_end = string_end(line, i)?;
    let id = &line[i + 1..turn_end - 1];
    if id.contains(&b'\\') {
        return None;
    }
    let (ty, ts) = canonical_type_and_ts(line, turn_end)?;
    if !deferrable_type(ty) {
        return None;
    }
    let digits = line
        .get(ts..)?
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    // As `ts_token` reads plain milliseconds: 1 to 18 digits, no leading zero.
    if !(1..=18).contains(&digits)
        || (digits > 1 && line[ts] == b'0')
        || !matches!(line.get(ts + digits), Some(b',' | b'}'))
    {
        return None;
    }
    let ms = line[ts..ts + digits]
        .iter()
        .fold(0 as TimestampMs, |ms, b| {
            ms * 10 + TimestampMs::from(b - b'0')
        });
    (crate::bounds::MIN_TS_MS..=crate::bounds::MAX_TS_MS)
        .contains(&ms)
        .then_some(Deferrable {
            turn: id,
            ts_ms: ms,
            ends_turn: ty == b"turn_end",
        })
}

/// The top-level `turn` and `ts` tokens of a line in the key order retryscope's writers
/// use and the event-format doc shows (`{"v":1,"turn":…,"type":…,"ts":…` or without `v`),
/// read without the general scan; `None` for any other shape, which the general scan then
/// reads. `ts` is `None` when `want_ts` is false.
fn canonical(line: &[u8], want_ts: bool) -> Option<(&[u8], Option<&[u8]>)> {
    let i = canonical_turn(line)?;
    let turn_end = string_end(line, i)?;
    let turn = &line[i..turn_end];
    if !want_ts {
        return Some((turn, None));
    }
    let ts = canonical_ts(line, turn_end)?;
    let digits = line
        .get(ts..)?
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    if digits == 0 || !matches!(line.get(ts + digits), Some(b',' | b'}')) {
        return None;
    }
    Some((turn, Some(&line[ts..ts + digits])))
}

/// Index just past the value starting at `i`.
fn value_end(line: &[u8], i: usize) -> Option<usize> {
    match line.get(i)? {
        b'"' => string_end(line, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            while let Some(&b) = line.get(j) {
                match b {
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
            let rest = &line[i..];
            let len = rest
                .iter()
                .position(|&b| b == b',' || b == b'}' || is_ws(b))
                .unwrap_or(rest.len());
            Some(i + len)
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

    #[test]
    fn a_turn_goes_where_its_feed_goes_for_any_shard_count() {
        let route = stream_route("/logs/chat.sse");
        assert_ne!(route, 0);
        assert_ne!(joined_route(), 0);
        for count in 1..=8 {
            assert_eq!(shard_of_turn("t1", 0, count), shard_of_id("t1", count));
            assert_eq!(
                shard_of_turn("t1", route, count),
                shard_of_route(route, count)
            );
            let owners = (0..count)
                .filter(|&index| Shard { index, count }.owns_route(route))
                .count();
            assert_eq!(owners, 1, "exactly one of {count} shards reads the stream");
        }
    }

    use proptest::prelude::*;

    #[test]
    fn canonical_lines_with_odd_ts_read_as_the_decoder_reads_them() {
        for ts in [
            "0123",
            "0",
            "7",
            "123456789012345678",
            "1234567890123456789",
            "-5",
            "1.5",
        ] {
            for prefix in [r#"{"v":1,"turn":"a""#, r#"{"turn":"a""#] {
                let line = format!(r#"{prefix},"type":"text","ts":{ts},"text":"x"}}"#);
                assert_eq!(
                    turn_hash_and_ts(line.as_bytes()),
                    (
                        Some(fasthash::fnv1a(b"a")),
                        crate::decode::native::ts_token(ts.as_bytes())
                    ),
                    "{line}"
                );
            }
        }
    }

    /// What the scan must agree with: serde's reading of the top-level `turn` and `ts`.
    fn reference(line: &[u8]) -> (Option<String>, Option<String>) {
        let map: std::collections::BTreeMap<String, &serde_json::value::RawValue> =
            match serde_json::from_slice(line) {
                Ok(map) => map,
                Err(_) => return (None, None),
            };
        let raw = |k: &str| map.get(k).map(|v| v.get().to_owned());
        (raw("turn"), raw("ts"))
    }

    fn string_value() -> impl Strategy<Value = serde_json::Value> {
        // Quotes, backslashes, control characters and non-ASCII, at lengths around the
        // eight-byte steps of the scan.
        proptest::string::string_regex("[a-z\"\\\\\u{1}\u{e9}\u{1F600} ]{0,20}")
            .expect("regex")
            .prop_map(serde_json::Value::String)
    }

    fn value() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            string_value(),
            any::<u64>().prop_map(serde_json::Value::from),
            any::<i32>().prop_map(serde_json::Value::from),
            Just(serde_json::Value::Null),
            Just(serde_json::Value::Bool(true)),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
                prop::collection::btree_map("turn|ts|[a-z\"]{1,6}", inner, 0..4)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// A line in canonical order or shuffled, with the keys that matter present or not.
    fn line() -> impl Strategy<Value = Vec<u8>> {
        (
            proptest::option::of(value()),
            proptest::option::of(prop_oneof![
                (0u64..100_000_000_000_000).prop_map(serde_json::Value::from),
                any::<u64>().prop_map(serde_json::Value::from),
                value()
            ]),
            prop::collection::vec(("(type|text|args|[a-z]{1,5})", value()), 0..4),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(turn, ts, others, with_v, canonical, spaced)| {
                let mut keys: Vec<(String, serde_json::Value)> = Vec::new();
                if with_v {
                    keys.push(("v".into(), 1.into()));
                }
                if let Some(t) = turn {
                    keys.push(("turn".into(), t));
                }
                keys.push(("type".into(), "text".into()));
                if let Some(t) = ts {
                    keys.push(("ts".into(), t));
                }
                for (k, v) in others {
                    if !keys.iter().any(|(have, _)| *have == k) {
                        keys.push((k, v));
                    }
                }
                if !canonical {
                    keys.reverse();
                }
                let sep = if spaced { " , " } else { "," };
                let body: Vec<String> = keys
                    .iter()
                    .map(|(k, v)| format!("{}:{}", serde_json::json!(k), v))
                    .collect();
                format!("{{{}}}", body.join(sep)).into_bytes()
            })
    }

    proptest! {
        #[test]
        fn the_scan_reads_turn_and_ts_as_serde_does(line in line()) {
            let (turn, ts) = top_level_turn_and_ts(&line);
            let text = |t: Option<&[u8]>| t.map(|t| String::from_utf8_lossy(t).into_owned());
            prop_assert_eq!((text(turn), text(ts)), reference(&line));
            prop_assert_eq!(top_level(&line, false).0, turn);
            prop_assert_eq!(
                turn_hash_and_ts(&line),
                (
                    turn.and_then(hash_turn_token),
                    ts.and_then(crate::decode::native::ts_token)
                )
            );
            // A string id hashes as the correlator will hold it: unescaped.
            if let Some(Ok(id)) = turn.map(serde_json::from_slice::<String>) {
                prop_assert_eq!(turn.and_then(hash_turn_token), Some(fasthash::fnv1a(id.as_bytes())));
            }
        }

        /// A line held undecoded is held under the turn and at the time its event has.
        #[test]
        fn a_line_held_undecoded_is_held_as_its_event_reads(line in line()) {
            if let Some(d) = deferrable(&line) {
                let mut skips = crate::decode::SkipCounts::default();
                if let Ok(crate::decode::native::NativeLine::Event(ev)) =
                    crate::decode::native::decode_line(&line, &mut skips)
                {
                    prop_assert_eq!(ev.turn.as_bytes(), d.turn);
                    prop_assert_eq!(ev.ts_ms, Some(d.ts_ms));
                }
            }
        }
    }

    #[test]
    fn only_lines_of_the_common_shape_whose_event_is_their_own_are_held_undecoded() {
        let held = |l: &str| {
            deferrable(l.as_bytes()).map(|d| {
                (
                    String::from_utf8_lossy(d.turn).into_owned(),
                    d.ts_ms,
                    d.ends_turn,
                )
            })
        };
        let t = "t-1";
        assert_eq!(
            held(
                r#"{"v":1,"turn":"t-1","type":"text","ts":1770000000000,"attempt":0,"text":"hi"}"#
            ),
            Some((t.into(), 1_770_000_000_000, false))
        );
        assert_eq!(
            held(r#"{"turn":"t-1","type":"mystery","ts":5}"#),
            Some((t.into(), 5, false)),
            "a type this version does not know: skipped when decoded, then as now"
        );
        assert_eq!(
            held(r#"{"turn":"t-1","type":"turn_end","ts":5}"#),
            Some((t.into(), 5, true)),
            "a turn_end, read at once if the turn has provider chunk decoders"
        );
        for not in [
            // Its place among the turn's chunks matters.
            r#"{"turn":"t-1","type":"provider_chunk","ts":5,"provider":"openai"}"#,
            // Read at once: an escaped id, another key order, no or an RFC 3339 `ts`, a
            // leading zero, a `ts` past 2100, a number id.
            r#"{"turn":"t\u002d1","type":"text","ts":5}"#,
            r#"{"type":"text","turn":"t-1","ts":5}"#,
            r#"{"turn":"t-1","type":"text"}"#,
            r#"{"turn":"t-1","type":"text","ts":"2026-01-01T00:00:00Z"}"#,
            r#"{"turn":"t-1","type":"text","ts":05}"#,
            r#"{"turn":"t-1","type":"text","ts":99999999999999}"#,
            r#"{"turn":1,"type":"text","ts":5}"#,
        ] {
            assert_eq!(held(not), None, "{not}");
        }
    }
}
