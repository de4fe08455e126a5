//! `retryscope proxy` end to end, as a user runs it: the binary in front of a mock upstream,
//! a naive client's session through it (a cut by `--inject`, the retry, the next request
//! carrying what the client did), then SIGTERM. The findings come out of the same sinks as
//! `run` (findings file, `/metrics`), and `check` over the `--record` folder finds the same.

use crate::proxy_support;

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use proxy_support::{Ending, Mock, Stream, addr_in, post, spawn_proxy, wait_for};
use serde_json::json;

/// One Anthropic attempt of the article's help-desk turn, with refund call `id`.
fn attempt(id: &str, opening: &str) -> Stream {
    let events = [
        json!({"type":"message_start","message":{"id":format!("msg_{id}"),"type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"usage":{"input_tokens":1250,"output_tokens":1}}}),
        json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":opening}}),
        json!({"type":"content_block_stop","index":0}),
        json!({"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":id,"name":"issue_refund","input":{}}}),
        json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"order_id\": \"ORD-7781\"}"}}),
        json!({"type":"content_block_stop","index":1}),
        json!({"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":48}}),
        json!({"type":"message_stop"}),
    ];
    Stream {
        name: id.to_owned(),
        path: "/v1/messages".to_owned(),
        content_type: "text/event-stream",
        parts: events
            .iter()
            .map(|e| {
                Bytes::from(format!(
                    "event: {}\ndata: {e}\n\n",
                    e["type"].as_str().unwrap_or("")
                ))
            })
            .collect(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn naive_client_session_through_the_binary() {
    let done = attempt("toolu_done", "Done.");
    let mock = Mock::start(
        vec![
            attempt("toolu_c1", "Checking order ORD-7781. "),
            attempt("toolu_c7", "Checking your order ORD-7781. "),
            done,
        ],
        None,
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let findings = dir.path().join("findings.jsonl");
    let record = dir.path().join("rec");
    let mut child = Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .args([
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--metrics-addr",
            "127.0.0.1:0",
        ])
        .arg("--upstream")
        .arg(format!("http://{}", mock.addr))
        .args(["--inject", "after-tool-call", "--inject-how", "reset"])
        .arg("--findings-out")
        .arg(&findings)
        .arg("--record")
        .arg(&record)
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn");
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().expect("stderr");
    std::thread::spawn(move || {
        for l in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let metrics_addr = addr_in(&wait_for(&rx, "serving /metrics"), "addr=");
    // Words, not Rust debug text (it was `inject=Some(("after-tool-call", "reset"))`).
    let route = wait_for(&rx, "proxy route");
    assert!(
        route.ends_with("inject=after-tool-call by reset, matching tools"),
        "{route}"
    );
    let proxy_addr = addr_in(&wait_for(&rx, "proxying"), "listen=");

    let (first, next) = proxy_support::naive_refund_session();
    let headers = [
        ("x-api-key", "sk-ant-SECRET"),
        ("anthropic-version", "2023-06-01"),
        // Claude Code's own User-Agent: the proxy's turns name it as their agent.
        ("user-agent", "claude-cli/2.1.328 (external, sdk-cli)"),
    ];
    // The cut attempt: the client saw the refund call, then a reset.
    let a0 = post(proxy_addr, "/v1/messages", &first, &headers).await;
    assert_eq!(a0.ending, Ending::Reset);
    assert!(String::from_utf8_lossy(&a0.body).contains("toolu_c1"));
    // The naive client ran toolu_c1 already, retries, and runs toolu_c7 too.
    let a1 = post(proxy_addr, "/v1/messages", &first, &headers).await;
    assert_eq!(a1.ending, Ending::Clean);
    assert_eq!(
        post(proxy_addr, "/v1/messages", &next, &headers)
            .await
            .ending,
        Ending::Clean
    );

    // Metrics, live.
    let metrics = {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let got = proxy_support::get(metrics_addr, "/metrics").await;
        String::from_utf8_lossy(&got.body).into_owned()
    };
    assert!(
        metrics.contains(
            "retryscope_proxy_injected_cuts_total{point=\"after-tool-call\",how=\"reset\",tools=\"true\"} 1"
        ),
        "{metrics}"
    );
    // Three model requests forwarded; every chunk of the uncut ones was held and timed.
    assert!(
        metrics.contains("retryscope_proxy_streams_total 3\n"),
        "{metrics}"
    );
    let held = metrics
        .lines()
        .find_map(|l| l.strip_prefix("retryscope_proxy_added_latency_seconds_count "))
        .and_then(|v| v.parse::<u64>().ok());
    assert!(held.is_some_and(|n| n > 0), "{metrics}");
    // One model name per call: the answered one (the request asked for the alias
    // `claude-sonnet-4-5`), as `check` of the recording names it too.
    assert!(metrics.contains("retryscope_retries_total{agent=\"claude-code\",model=\"claude-sonnet-4-5-20250929\",provider=\"anthropic\",reason=\"injected_reset\"} 1"), "{metrics}");
    assert!(metrics.contains("retryscope_attempts_total{model=\"claude-sonnet-4-5-20250929\",provider=\"anthropic\",outcome=\"abandoned\"} 1"), "{metrics}");
    assert!(
        !metrics
            .lines()
            .any(|l| l.contains("model=\"claude-sonnet-4-5\"") && !l.ends_with(" 0")),
        "the requested alias labels nothing: {metrics}"
    );
    assert!(metrics.contains("retryscope_findings_total{agent=\"claude-code\",kind=\"abandoned_tool_executed\",severity=\"critical\",tool=\"issue_refund\"} 1"), "{metrics}");

    // SIGTERM: open turns close, every finding is written.
    let status = Command::new("sh")
        .args(["-c", &format!("kill -TERM {}", child.id())])
        .status()
        .expect("kill");
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().expect("wait").is_none() {
        assert!(Instant::now() < deadline, "the proxy did not stop");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut live: Vec<String> = std::fs::read_to_string(&findings)
        .expect("findings")
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).expect("json")["kind"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        })
        .collect();
    live.sort();
    live.dedup();
    assert_eq!(
        live,
        [
            "abandoned_tool_executed",
            "duplicate_effect",
            "spliced_text",
            "unfinished_tool_executed"
        ],
        "naive client: both refunds ran, the text was spliced"
    );

    // The recording re-checks to the same findings, and holds no secret.
    let out = Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .args(["check", "--json"])
        .arg(&record)
        .output()
        .expect("check");
    let mut checked: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .flat_map(|v| v["findings"].as_array().cloned().unwrap_or_default())
        .map(|f| f["kind"].as_str().unwrap_or("").to_owned())
        .collect();
    checked.sort();
    checked.dedup();
    assert_eq!(checked, live);
    let models: std::collections::BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["model"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(
        models.into_iter().collect::<Vec<_>>(),
        ["claude-sonnet-4-5-20250929"]
    );
    let mut all = String::new();
    for e in std::fs::read_dir(record.join("requests"))
        .expect("requests")
        .flatten()
    {
        let mut s = String::new();
        std::fs::File::open(e.path())
            .expect("open")
            .read_to_string(&mut s)
            .expect("read");
        all.push_str(&s);
    }
    assert!(all.contains("anthropic-version: 2023-06-01"));
    assert!(!all.contains("SECRET"));
}

#[test]
fn without_an_upstream_it_says_so_and_exits_2() {
    let out = Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .args(["proxy", "--metrics-addr", "127.0.0.1:0"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no upstream"));
    let out = Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .args([
            "proxy",
            "--upstream",
            "http://127.0.0.1:1",
            "--inject",
            "mid-sentence",
        ])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
}

/// A title request (no tools, streamed) before the agent's call, as Claude Code sends one.
fn title() -> Stream {
    let events = [
        json!({"type":"message_start","message":{"id":"msg_title","type":"message","role":"assistant","model":"claude-haiku-4-5","content":[],"usage":{"input_tokens":50,"output_tokens":1}}}),
        json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Damaged book refund"}}),
        json!({"type":"content_block_stop","index":0}),
        json!({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":4}}),
        json!({"type":"message_stop"}),
    ];
    Stream {
        parts: events
            .iter()
            .map(|e| {
                Bytes::from(format!(
                    "event: {}\ndata: {e}\n\n",
                    e["type"].as_str().unwrap_or("")
                ))
            })
            .collect(),
        ..attempt("title", "")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cut_aims_at_requests_that_offer_tools_and_says_which_it_cut() {
    let user = json!({"role":"user","content":"My book arrived damaged, order ORD-7781."});
    let title_req = json!({"model":"claude-haiku-4-5","stream":true,"messages":[user]}).to_string();
    let tools = json!([{"name":"issue_refund","input_schema":{"type":"object"}}]);
    let agent_req =
        json!({"model":"claude-sonnet-4-5","stream":true,"tools":tools,"messages":[user]})
            .to_string();
    for (flags, title_cut) in [
        (&["--inject", "mid-word", "--inject-first", "1"][..], false),
        (&["--inject", "mid-word", "--inject-match", "all"][..], true),
    ] {
        let mock = Mock::start(
            vec![
                title(),
                attempt("toolu_c1", "Checking order ORD-7781. "),
                attempt("toolu_c7", "Checking your order ORD-7781. "),
            ],
            None,
        )
        .await;
        let (mut child, rx, proxy_addr, metrics_addr) = spawn_proxy(mock.addr, flags);
        let t = post(proxy_addr, "/v1/messages", &title_req, &[]).await;
        let a = post(proxy_addr, "/v1/messages", &agent_req, &[]).await;
        let cut_line = wait_for(&rx, "proxy: injected a cut");
        let metrics = {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            let got = proxy_support::get(metrics_addr, "/metrics").await;
            String::from_utf8_lossy(&got.body).into_owned()
        };
        let _ = child.kill();
        let _ = child.wait();
        if title_cut {
            // `all`: the side call takes the cut, the agent's call runs clean.
            assert_eq!(
                (t.ending, a.ending),
                (Ending::Reset, Ending::Clean),
                "{flags:?}: {cut_line}"
            );
            assert!(cut_line.contains("model=claude-haiku-4-5"), "{cut_line}");
            assert!(cut_line.contains("tools_offered=false"), "{cut_line}");
            assert!(metrics.contains("retryscope_proxy_injected_cuts_total{point=\"mid-word\",how=\"reset\",tools=\"false\"} 1"), "{metrics}");
        } else {
            // Default: the title passes whole and is not counted; the agent's call is cut.
            assert_eq!(
                (t.ending, a.ending),
                (Ending::Clean, Ending::Reset),
                "{flags:?}: {cut_line}"
            );
            assert!(String::from_utf8_lossy(&t.body).contains("Damaged book refund"));
            for want in [
                "method=\"POST\"",
                "path=/v1/messages",
                "model=claude-sonnet-4-5",
                "tools_offered=true",
            ] {
                assert!(cut_line.contains(want), "{want}: {cut_line}");
            }
            assert!(metrics.contains("retryscope_proxy_injected_cuts_total{point=\"mid-word\",how=\"reset\",tools=\"true\"} 1"), "{metrics}");
        }
    }
}
