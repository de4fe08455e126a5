//! A retry by continuation through the `retryscope proxy` binary (issue 21): the client
//! Qwen Code 0.24.4 is modelled here on the wire (OpenAI Chat Completions). After a cut it
//! does not resend its request: it sends the history, the partial answer it received as an
//! assistant message, and a user message asking the model to output only what comes after
//! that text. The model starts its answer over, and the client keeps both texts as one
//! assistant message in its next request. The proxy must count one retry (two attempts of
//! one call, both billed) and report `spliced_text` with the shared opening as evidence.

use crate::proxy_support;

use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use proxy_support::{Ending, Mock, Stream, post, spawn_proxy};
use serde_json::json;

/// A Chat Completions stream of `texts`, then (when `finish`) its finish and usage chunks
/// (the shapes of openai-python__text.sse).
fn chat(id: &str, texts: &[&str], finish: bool) -> Stream {
    let c = |delta: serde_json::Value, fin: serde_json::Value| json!({"id":id,"object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":delta,"finish_reason":fin}]});
    let mut events: Vec<serde_json::Value> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| {
            if i == 0 {
                c(json!({"role":"assistant","content":t}), json!(null))
            } else {
                c(json!({"content":t}), json!(null))
            }
        })
        .collect();
    if finish {
        events.push(c(json!({}), json!("stop")));
        events.push(json!({"id":id,"object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[],"usage":{"prompt_tokens":900,"completion_tokens":30,"total_tokens":930}}));
    }
    let mut parts: Vec<Bytes> = events
        .iter()
        .map(|e| Bytes::from(format!("data: {e}\n\n")))
        .collect();
    parts.push(Bytes::from_static(b"data: [DONE]\n\n"));
    Stream {
        name: id.to_owned(),
        path: "/v1/chat/completions".to_owned(),
        content_type: "text/event-stream",
        parts,
    }
}

/// The sum of a family's samples whose labels contain every one of `with`.
fn sum(metrics: &str, family: &str, with: &[&str]) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{family}{{")) || l.starts_with(&format!("{family} ")))
        .filter(|l| with.iter().all(|w| l.contains(w)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

const PARTIAL: &str = "[A1] I will now cr";
const RESTART: &str = "[A2] I will now create the marker file (A2).";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_continuation_that_restarts_through_the_binary() {
    let mock = Mock::start(
        vec![
            // Attempt 0: cut (by the proxy) just before its finish, after the partial text.
            chat(
                "chatcmpl-a0",
                &[PARTIAL, "eate the marker file (A1)."],
                true,
            ),
            // Attempt 1, the continuation: the model starts over.
            chat("chatcmpl-a1", &[RESTART], true),
            // The next call.
            chat("chatcmpl-n", &["Done."], true),
        ],
        None,
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let findings = dir.path().join("findings.jsonl");
    let record = dir.path().join("rec");
    let (findings_arg, record_arg) = (findings.display().to_string(), record.display().to_string());
    let (mut child, _rx, proxy_addr, metrics_addr) = spawn_proxy(
        mock.addr,
        &[
            "--inject",
            "mid-word",
            "--inject-how",
            "reset",
            "--inject-first",
            "1",
            // the requests below offer no tools, so aim at every request
            "--inject-match",
            "all",
            "--findings-out",
            &findings_arg,
            "--record",
            &record_arg,
        ],
    );

    let system = json!({"role":"system","content":"You are Qwen Code, a coding agent."});
    let user = json!({"role":"user","content":"Create the marker file."});
    let path = "/v1/chat/completions";
    let first = json!({"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},
        "temperature":0,"messages":[system, user]})
    .to_string();
    let a0 = post(
        proxy_addr,
        path,
        &first,
        &[("authorization", "Bearer sk-SECRET")],
    )
    .await;
    assert_eq!(a0.ending, Ending::Reset);
    // What the client received of attempt 0: the text up to the cut inside a word.
    let got: String = String::from_utf8_lossy(&a0.body)
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok())
        .filter_map(|v| {
            v.pointer("/choices/0/delta/content")
                .and_then(|c| c.as_str())
                .map(str::to_owned)
        })
        .collect();
    assert!(
        !got.is_empty() && PARTIAL.starts_with(&got),
        "the client got a partial text: {got:?}"
    );
    // The continuation: the partial text as an assistant message, then the ask.
    let ask = format!(
        "Your previous response was cut off. Output only text that comes after this suffix: \
         <previous_response_suffix>{got}</previous_response_suffix>"
    );
    let cont = json!({"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},
        "temperature":0,"messages":[system, user,
            {"role":"assistant","content":got},
            {"role":"user","content":ask}]})
    .to_string();
    let a1 = post(proxy_addr, path, &cont, &[]).await;
    assert_eq!(a1.ending, Ending::Clean);
    // The client keeps both texts as one answer.
    let kept = format!("{got}{RESTART}");
    let next = json!({"model":"gpt-4o","stream":true,"messages":[system, user,
        {"role":"assistant","content":kept},
        {"role":"user","content":"Thanks."}]})
    .to_string();
    assert_eq!(
        post(proxy_addr, path, &next, &[]).await.ending,
        Ending::Clean
    );

    let deadline = Instant::now() + Duration::from_secs(20);
    let metrics = loop {
        let got = proxy_support::get(metrics_addr, "/metrics").await;
        let m = String::from_utf8_lossy(&got.body).into_owned();
        if sum(&m, "retryscope_findings_total", &["kind=\"spliced_text\""]) >= 1.0
            || Instant::now() > deadline
        {
            break m;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        sum(
            &metrics,
            "retryscope_retries_total",
            &["reason=\"injected_reset\""]
        ),
        1.0,
        "{metrics}"
    );
    assert_eq!(
        sum(
            &metrics,
            "retryscope_findings_total",
            &["kind=\"spliced_text\""]
        ),
        1.0,
        "{metrics}"
    );
    assert_eq!(
        sum(&metrics, "retryscope_turns_total", &[]),
        1.0,
        "only the cut call has closed (the next one is still open): {metrics}"
    );

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
    let live: Vec<serde_json::Value> = std::fs::read_to_string(&findings)
        .expect("findings")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    let spliced: Vec<&serde_json::Value> = live
        .iter()
        .filter(|f| f["kind"] == "spliced_text")
        .collect();
    assert_eq!(spliced.len(), 1, "{live:?}");
    assert_eq!(spliced[0]["attempt"], 0);
    let evidence = spliced[0]["evidence"].as_str().unwrap_or("");
    assert!(
        evidence.starts_with("restart: ") && evidence.contains("I will now c"),
        "{evidence}"
    );

    // The recording re-checks to the same: two attempts of one call, both billed.
    let out = Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .args(["check", "--json"])
        .arg(&record)
        .output()
        .expect("check");
    let reports: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|v: &serde_json::Value| v["turn"].is_string())
        .collect();
    assert_eq!(reports.len(), 2, "{reports:?}");
    let cut = reports
        .iter()
        .find(|r| !r["turn"].as_str().unwrap_or("").contains('#'))
        .expect("the cut call's report");
    assert_eq!(cut["retries"], 1, "{cut}");
    let attempts = cut["attempts"].as_array().expect("attempts");
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[1]["usage"]["input_tokens"], 900, "{cut}");
    assert_eq!(attempts[1]["usage"]["source"], "reported", "{cut}");
    let kinds: Vec<&str> = cut["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter_map(|f| f["kind"].as_str())
        .collect();
    assert_eq!(kinds, ["spliced_text"], "{cut}");
    // Three requests, three recordings: none overwritten.
    let recorded = std::fs::read_dir(record.join("requests"))
        .expect("requests")
        .count();
    assert_eq!(recorded, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_response_resumed_by_get_is_the_same_attempt() {
    use proxy_support::start_proxy;
    use retryscope::proxy::{How, InjectRule, Point};
    // OpenAI Responses background mode: the stream is cut before its end; the client resumes
    // it with GET /v1/responses/{id}?stream=true&starting_after=N and the server sends the
    // rest (shapes of openai-python's background streaming helper).
    let ev = |v: serde_json::Value| {
        Bytes::from(format!(
            "event: {}\ndata: {v}\n\n",
            v["type"].as_str().unwrap_or("")
        ))
    };
    let head = vec![
        ev(
            json!({"type":"response.created","sequence_number":0,"response":{"id":"resp_bg","status":"queued","background":true,"model":"gpt-5"}}),
        ),
        ev(
            json!({"type":"response.output_text.delta","sequence_number":1,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Working on it"}),
        ),
        ev(
            json!({"type":"response.completed","sequence_number":2,"response":{"id":"resp_bg","status":"completed","model":"gpt-5","usage":{"input_tokens":50,"output_tokens":5,"total_tokens":55}}}),
        ),
    ];
    let first = Stream {
        name: "bg".into(),
        path: "/v1/responses".into(),
        content_type: "text/event-stream",
        parts: head.clone(),
    };
    let rest = Stream {
        name: "bg-rest".into(),
        path: "/v1/responses/resp_bg".into(),
        content_type: "text/event-stream",
        parts: head[2..].to_vec(),
    };
    let mock = Mock::start(vec![first, rest], None).await;
    let rule = InjectRule {
        point: Point::BeforeFinish,
        how: How::Eof,
        first: Some(1),
        fraction: None,
        seed: 0,
        // this request offers no tools: aim at every request
        matches: retryscope::proxy::InjectMatch::All,
    };
    let (addr, lines, _proxy) = start_proxy(mock.addr, Some(rule), None).await;
    let body =
        json!({"model":"gpt-5","stream":true,"background":true,"input":"Create the marker file."})
            .to_string();
    let got = post(addr, "/v1/responses", &body, &[]).await;
    assert!(!String::from_utf8_lossy(&got.body).contains("response.completed"));
    let resumed =
        proxy_support::get(addr, "/v1/responses/resp_bg?stream=true&starting_after=1").await;
    assert!(String::from_utf8_lossy(&resumed.body).contains("response.completed"));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(lines.of_type("turn_start").len(), 1);
    assert_eq!(lines.of_type("retry").len(), 0);
    assert_eq!(lines.of_type("error").len(), 0, "only the stream broke");
    let chunks = lines.of_type("provider_chunk");
    assert_eq!(chunks.len(), 3, "{chunks:?}");
    assert!(chunks.iter().all(|c| c["attempt"] == 0));
}
