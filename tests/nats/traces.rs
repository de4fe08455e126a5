//! Issues 22 and 26: `run --nats --otlp-endpoint` exports the same traces as `run` on the same
//! input (the same trace and span ids, parents and names), to a real OTLP/HTTP receiver.

use std::collections::BTreeSet;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::nats_support::*;
use crate::otlp_receiver::{Seen, serve_http};

type SpanKey = (String, String, String, String);

fn keys(seen: &Seen) -> BTreeSet<SpanKey> {
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    seen.spans()
        .iter()
        // `run`'s own operational spans (engine.start, ...) are retryscope's, not a turn's.
        .filter(|(service, scope, _)| service != "retryscope-self" && scope != "retryscope-self")
        .map(|(_, _, s)| {
            (
                hex(&s.trace_id),
                hex(&s.span_id),
                hex(&s.parent_span_id),
                s.name.clone(),
            )
        })
        .collect()
}

#[test]
fn a_collector_exports_the_same_traces_as_run() {
    if !have_nats_server() {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let (by_run, by_collector) = (Seen::default(), Seen::default());
    let run_addr = rt.block_on(serve_http(by_run.clone()));
    let collector_addr = rt.block_on(serve_http(by_collector.clone()));
    let d = tempfile::tempdir().expect("tmp");
    let d = d.path();
    let log = d.join("agent.jsonl");
    let (first, second) = refund_log("tr", 12, 10);
    append(&log, &first);
    append(&log, &second);

    // `run` over stdin until it ends: every turn closes and is exported.
    let mut run = Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .args(["run", "-", "--exit-on-eof", "--metrics-addr"])
        .arg(format!("127.0.0.1:{}", free_port()))
        .args(["--otlp-endpoint", &format!("http://{run_addr}")])
        .args(["--otlp-protocol", "http/protobuf"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run");
    let bytes = std::fs::read(&log).expect("log");
    run.stdin
        .take()
        .expect("stdin")
        .write_all(&bytes)
        .expect("write");
    assert!(run.wait().expect("run ends").success());
    let want = keys(&by_run);
    assert!(want.len() >= 12 * 3, "run exported {} spans", want.len());

    let (_server, url) = server_in(d);
    let _ship = shipper(d, &url, &log, "4");
    let (c, _) = collector_with(
        d,
        &url,
        "c1",
        "2",
        "100",
        &[
            "--otlp-endpoint",
            &format!("http://{collector_addr}"),
            "--otlp-protocol",
            "http/protobuf",
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while keys(&by_collector).len() < want.len() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    c.terminate();
    let got = keys(&by_collector);
    assert_eq!(
        (got.len(), got.difference(&want).count()),
        (want.len(), 0),
        "the collector's spans are run's ({})",
        log_text(d, "c1")
    );
}
