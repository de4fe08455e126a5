//! What keeping streams' decoder states costs a checkpoint: N provider streams (OpenAI Chat
//! SSE, each in the middle of a call with a tool call's arguments half streamed, modelled on
//! `tests/fixtures/providers/openai-chat/id-change-splice.sse`), then the time to take their
//! states ([`Ingest::stream_states`]) and write them as JSON (what `run`'s and a partition's
//! checkpoints do), the bytes written, and the time to resume them in a fresh ingest path.
//! Past 10,000 streams only the most recently active are kept. Prints figures; asserts
//! nothing.
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
    for n in counts {
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
        let t = Instant::now();
        let states = i.stream_states();
        let took = t.elapsed();
        let t = Instant::now();
        let json = serde_json::to_vec(&states.states).expect("encodes");
        let wrote = t.elapsed();
        let t = Instant::now();
        let back: Vec<retryscope_core::ingest::StreamState> =
            serde_json::from_slice(&json).expect("decodes");
        let mut j = ingest();
        let failed = j.resume_streams(back);
        let resumed = t.elapsed();
        println!(
            "{n} streams: {} states kept ({} left out), taken in {:.1} ms, written in {:.1} ms \
             ({:.2} MB, {:.0} bytes a stream), read and resumed in {:.1} ms ({failed} failed)",
            states.states.len(),
            states.left_out,
            took.as_secs_f64() * 1e3,
            wrote.as_secs_f64() * 1e3,
            json.len() as f64 / 1e6,
            json.len() as f64 / states.states.len().max(1) as f64,
            resumed.as_secs_f64() * 1e3,
        );
    }
}
