//! The fast path against the serde path: on every line the fast path accepts, both must give
//! the same event (or error) and the same skip counts; and it must accept the common shapes.

use super::super::{SkipCounts, decode_serde};
use super::{fields, special};

/// Lines modelled on the demo fleet's output (every type), plus the odd spellings the format
/// allows: escapes, nested and unknown values, numbers as ids, nulls, whitespace.
const LINES: &[&str] = &[
    r#"{"v":1,"turn":"outreach-1","type":"turn_start","ts":1794477600000,"model":"gpt-4.1-mini","provider":"openai","agent":"outreach","session":"sess-65ace268"}"#,
    r#"{"v":1,"turn":"outreach-1","type":"attempt_start","ts":1794477600018,"attempt":0,"request_id":"req_W4kXiH21Z7ApygZTcrn6"}"#,
    r#"{"v":1,"turn":"triage-2","type":"text","ts":1794477601443,"attempt":0,"text":"with \"Der Zauberberg\". Here i"}"#,
    r#"{"v":1,"turn":"triage-2","type":"text","ts":1794477601456,"attempt":0,"text":"s what\thappens next:\n- the carrier \\ \/ \b\f\r"}"#,
    r#"{"v":1,"turn":"t","type":"text","attempt":0,"text":"caf\u00e9 \ud83d\ude00"}"#,
    r#"{"v":1,"turn":"r-1","type":"tool_call","ts":1794477602000,"attempt":0,"id":"call_1","name":"lookup_order","args":{"order":"ORD-1","n":[1,-2.5e3,0.1,true,false,null,{}],"s":"a\"b\u0041"}}"#,
    r#"{"v":1,"turn":"r-1","type":"tool_exec","ts":1794477602100,"attempt":0,"id":"call_1","name":"issue_refund","args":{"order":"ORD-1"},"effect":"write","step":3,"status":"ok","effect_key":"k1"}"#,
    r#"{"v":1,"turn":"r-1","type":"tool_exec","attempt":0,"id":"call_2","name":"lookup","effect":"read","args":null}"#,
    r#"{"v":1,"turn":"r-1","type":"usage","attempt":0,"input_tokens":1200,"output_tokens":340,"cached_input_tokens":0,"cache_write_tokens":12,"reasoning_tokens":5,"model":"m"}"#,
    r#"{"v":1,"turn":"r-1","type":"finish","attempt":0,"reason":"stop"}"#,
    r#"{"v":1,"turn":"r-1","type":"error","attempt":0,"message":"overloaded","code":529}"#,
    r#"{"v":1,"turn":"r-1","type":"retry","attempt":1,"reason":"connection_reset","ts":"2026-11-12T10:00:00.250Z"}"#,
    r#"{"turn":"r-1","type":"retry","attempt":1,"ts":5,"reason":"injected_reset","prefill":"[A1] I will now cr"}"#,
    r#"{"v":1,"turn":"r-1","type":"render_reset","attempt":1}"#,
    r#"{"v":1,"turn":"r-1","type":"stream_splice","attempt":1,"signal":"duplicate_prefix"}"#,
    r#"{"v":1,"turn":"r-1","type":"output","text":"final words"}"#,
    r#"{"v":1,"turn":"r-1","type":"turn_end","status":"ok","ts":1794477609000}"#,
    r#"{"v":1,"turn":42,"type":"turn_end","session":7}"#,
    r#"  { "turn" : "w" , "type" : "text" , "text" : "x" , "future" : { "deep" : [ 1 , "y" ] } }  "#,
    r#"{"turn":"t","type":"telepathy","x":1,"y":"z"}"#,
    r#"{"turn":"t","type":"text","text":null,"model":null,"ts":null,"attempt":null,"turn":"u"}"#,
    r#"{"turn":"t","type":"provider_chunk","provider":"anthropic","data":{"type":"ping"}}"#,
    r#"{"turn":"","type":"text","text":"a"}"#,
    r#"{"turn":"t","type":"text","text":"a","attempt":4294967296}"#,
    r#"{"turn":"t","type":"text","text":"a","v":2}"#,
    r#"{"turn":"t","type":"tool_exec","id":"c","name":"n","step":-3,"effect":"maybe"}"#,
    r#"{"turn":"t","type":"text","text":"a","ts":-5}"#,
    r#"{"turn":"t","type":"text","text":"a","ts":1.5e3}"#,
    r#"{"turn":"t","type":"text","text":"a","ts":99999999999999999999}"#,
    r#"{}"#,
    r#"{"turn":"t","type":"text","text":"a","n":01}"#,
    r#"{"turn":"t","type":"text","text":"a",}"#,
    r#"[1,2]"#,
];

fn serde_result(line: &[u8]) -> String {
    let mut skips = SkipCounts::default();
    let r = decode_serde(line, &mut skips);
    format!("{r:?} {skips:?}")
}

/// `Some(result)` when the fast path took the line.
fn fast_result(line: &[u8]) -> Option<String> {
    let mut skips = SkipCounts::default();
    let r = fields(line)?.into_line(&mut skips);
    Some(format!("{r:?} {skips:?}"))
}

fn agree(line: &[u8]) -> bool {
    match fast_result(line) {
        Some(fast) => {
            let slow = serde_result(line);
            assert_eq!(fast, slow, "{}", String::from_utf8_lossy(line));
            true
        }
        None => false,
    }
}

#[test]
fn fast_and_serde_paths_agree_on_every_sample_line() {
    let taken = LINES.iter().filter(|l| agree(l.as_bytes())).count();
    // A continuation's retry (issue 21) is read by both, with its prefill.
    let prefill = LINES
        .iter()
        .find(|l| l.contains("prefill"))
        .expect("a retry with a prefill");
    assert!(fast_result(prefill.as_bytes()).is_some_and(|r| r.contains("[A1] I will now cr")));
    // The common shapes must take the fast path, or it saves nothing.
    for common in &LINES[..4] {
        assert!(fast_result(common.as_bytes()).is_some(), "{common}");
    }
    assert!(
        taken >= 20,
        "fast path took only {taken} of {}",
        LINES.len()
    );
}

#[test]
fn fast_path_declines_what_it_does_not_read_exactly() {
    for declined in [
        &br#"{"turn":"t","type":"text","text":"caf\u00e9"}"#[..],
        br#"{"turn":"t","type":"provider_chunk","provider":"a","data":{}}"#,
        br#"{"turn":"t","type":"text","text":"a","ts":-5}"#,
        br#"{"turn":"t","type":"text","text":"a","n":01}"#,
        br#"{"turn":"t","type":"text","text":"a",}"#,
        b"{\"turn\":\"t\",\"type\":\"text\",\"text\":\"a\x01\"}",
        b"{\"turn\":\"t\",\"type\":\"text\",\"text\":\"\xff\"}",
        br#"{"t\u0075rn":"t","type":"text","text":"a"}"#,
    ] {
        assert!(
            fields(declined).is_none(),
            "{}",
            String::from_utf8_lossy(declined)
        );
    }
}

#[test]
fn fast_and_serde_paths_agree_on_every_one_byte_corruption() {
    const SUBSTITUTES: &[u8] = b"\"\\{}[],:0 1-.eEnu\x01\xff\xc3tfa/";
    let mut taken = 0u64;
    let mut total = 0u64;
    for line in LINES {
        let line = line.as_bytes();
        for i in 0..line.len() {
            let mut cut = line[..i].to_vec();
            total += 1;
            taken += u64::from(agree(&cut));
            cut.extend_from_slice(&line[i + 1..]);
            total += 1;
            taken += u64::from(agree(&cut));
            for &c in SUBSTITUTES {
                let mut m = line.to_vec();
                m[i] = c;
                total += 1;
                taken += u64::from(agree(&m));
                let mut ins = line.to_vec();
                ins.insert(i, c);
                total += 1;
                taken += u64::from(agree(&ins));
            }
        }
    }
    // Many corruptions still parse (a letter changed in a string); those must agree too.
    assert!(taken > total / 10, "fast path took {taken} of {total}");
}

#[test]
fn keys_the_fast_path_does_not_know_are_left_to_serde() {
    // Regression: `turn_start`'s `wire_only` was added to the serde visitor only; the fast
    // path counted it as unknown and dropped it, so proxy turns were judged as display logs.
    for line in [
        r#"{"turn":"t","type":"turn_start","wire_only":true}"#,
        r#"{"turn":"t","type":"text","text":"a","x":1}"#,
    ] {
        assert!(fields(line.as_bytes()).is_none(), "{line}");
    }
}

#[test]
fn deep_nesting_is_left_to_serde() {
    let deep = format!(
        r#"{{"turn":"t","type":"tool_call","id":"c","name":"n","args":{}{}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    assert!(fields(deep.as_bytes()).is_none());
    let ok = format!(
        r#"{{"turn":"t","type":"tool_call","id":"c","name":"n","args":{}{}}}"#,
        "[".repeat(20),
        "]".repeat(20)
    );
    assert!(agree(ok.as_bytes()));
}

#[test]
fn word_scan_finds_the_first_special_byte_like_a_byte_loop() {
    let naive = |b: &[u8]| b.iter().position(|&c| c == b'"' || c == b'\\' || c < 0x20);
    let alphabet = [
        b'a', b'"', b'\\', 0x1f, 0x20, 0x00, 0x7f, 0x80, 0xc3, 0xff, b'!', b'#', 0x5b, 0x5d,
    ];
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for len in 0..40 {
        for _ in 0..300 {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    // Mostly plain bytes, so specials land at every offset.
                    if seed.is_multiple_of(5) {
                        alphabet[(seed >> 8) as usize % alphabet.len()]
                    } else {
                        b'a' + (seed >> 16) as u8 % 26
                    }
                })
                .collect();
            assert_eq!(special(&bytes), naive(&bytes), "{bytes:?}");
        }
    }
}
