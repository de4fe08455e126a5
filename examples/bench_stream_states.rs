//! What keeping streams' decoder states costs a checkpoint: N provider streams (OpenAI Chat
//! SSE, each in the middle of a call with a tool call's arguments half streamed, modelled on
//! `tests/fixtures/providers/openai-chat/id-change-splice.sse`), then the time to take their
//! states ([`Ingest::stream_states`]) and write them as JSON (what `run`'s and a partition's
//! checkpoints do), the bytes written, and the time to resume them in a fresh ingest path.
//! Past 10,000 streams only the most recently active are kept. Then the same for N Codex OTLP
//! sessions parked for quiet (`ingest/parked.rs`: one model call each, its tool run, then
//! quiet past the idle timeout, as Codex 0.169.0's export of
//! `tests/fixtures/agents/codex/otlp-after-tool-reset` begins): the time to park them all at
//! one tick, and the checkpoint's figures for them. Prints figures; asserts nothing.
//!
//! ```sh
//! cargo run --release --example bench_stream_states -- [--streams 1000,10000,100000]
//! ```

use std::sync::Arc;
use std::time::Instant;

use retryscope_core::correlate::{Correlator, CorrelatorConfig};
use retryscope_core::cost::PriceTable;
use retryscope_core::decode::Format;
use retryscope_core::ingest::{Ingest, Source};

fn ingest() -> Ingest {
    let c = Correlator::new(CorrelatorConfig::default(), Arc::new(PriceTable::builtin()));
    Ingest::new(c, Format::Auto)
}

fn main() {
    let mut counts = vec![1_000usize, 10_000, 100_000];
    let args: Vec<String> = std::env::args().collect();
    for w in args.windows(2) {
        if w[0] == "--streams" {
            counts = w[1]
                .split(',')
                .map(|n| n.parse().expect("--streams N,M"))
                .collect();
        }
    }
    let lines: [&[u8]; 4] = [
        br#"data: {"id":"chatcmpl-a","object":"chat.completion.chunk","created":1770000000,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"role":"assistant","content":"Refunding the damaged book now."},"finish_reason":null}]}"#,
        b"",
        br#"data: {"id":"chatcmpl-a","object":"chat.completion.chunk","created":1770000000,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"issue_refund","arguments":"{\"order\":\"ORD-77"}}]},"finish_reason":null}]}"#,
        b"",
    ];
    for &n in &counts {
        let mut i = ingest();
        let mut out = Vec::new();
        for s in 0..n {
            let id = i.stream_as(
                Source::File,
                &format!("/logs/call-{s}.sse"),
                Format::OpenAiChat,
            );
            for l in lines {
                i.line(id, None, l, Some(s as i64), &mut out, &mut |_| {});
            }
        }
        let c = checkpoint(&i);
        println!("{n} streams: {c}");
    }
    for n in counts {
        parked(n);
    }
}

/// N Codex sessions' first model call, parked at one tick, then checkpointed and resumed.
fn parked(n: usize) {
    let record = |event: &str, conv: usize, extra: &str| {
        format!(
            r#"{{"otlp":"log","service":"codex_exec","time_unix_nano":1796227750827000000,"attributes":{{"event.name":"{event}","event.timestamp":"2026-12-01T10:00:00.827Z","conversation.id":"01a23784-5a27-7f53-b57d-{conv:012x}"{extra}}}}}"#
        )
    };
    let mut i = ingest();
    let mut out = Vec::new();
    for s in 0..n {
        let id = i.stream_as(
            Source::Otlp,
            &format!("otlp:codex_exec/01a23784-5a27-7f53-b57d-{s:012x}"),
            Format::Otlp,
        );
        for l in [
            record(
                "codex.api_request",
                s,
                r#","attempt":0,"model":"gpt-5-codex""#,
            ),
            record(
                "codex.tool_decision",
                s,
                r#","call_id":"call_mockA1","tool_name":"exec_command""#,
            ),
            record(
                "codex.tool_result",
                s,
                r#","call_id":"call_mockA1","tool_name":"exec_command","arguments":"{\"cmd\":\"touch /tmp/a1\"}""#,
            ),
        ] {
            i.line(id, None, l.as_bytes(), Some(1_000), &mut out, &mut |_| {});
        }
    }
    let t = Instant::now();
    i.end_quiet(400_000, 300_000, |_, _| true, &mut out, &mut |_| {});
    let parking = t.elapsed();
    let c = checkpoint(&i);
    println!(
        "{n} parked Codex sessions: parked in {:.1} ms ({:.1} us each), {} kept; checkpoint: {c}",
        parking.as_secs_f64() * 1e3,
        parking.as_secs_f64() * 1e6 / n.max(1) as f64,
        i.parked_sessions(),
    );
}

/// What a checkpoint of `i`'s stream states costs: taken, written as JSON, read and resumed
/// in a fresh ingest path.
fn checkpoint(i: &Ingest) -> String {
    let t = Instant::now();
    let states = i.stream_states();
    let took = t.elapsed();
    let t = Instant::now();
    let json = serde_json::to_vec(&states.states).expect("encodes");
    let wrote = t.elapsed();
    let t = Instant::now();
    let back: Vec<retryscope_core::ingest::StreamState> =
        serde_json::from_slice(&json).expect("decodes");
    let failed = ingest().resume_streams(back);
    let resumed = t.elapsed();
    format!(
        "{} states kept ({} left out), taken in {:.1} ms, written in {:.1} ms ({:.2} MB, {:.0} \
         bytes a stream), read and resumed in {:.1} ms ({failed} failed)",
        states.states.len(),
        states.left_out,
        took.as_secs_f64() * 1e3,
        wrote.as_secs_f64() * 1e3,
        json.len() as f64 / 1e6,
        json.len() as f64 / states.states.len().max(1) as f64,
        resumed.as_secs_f64() * 1e3,
    )
}
