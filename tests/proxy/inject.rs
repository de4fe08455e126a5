//! `--inject`: each cut point x each way of cutting, on each provider format, cuts the
//! stream where the article says ("close the socket after a tool-call event, after a text
//! fragment that splits a word, and immediately before the finish event"), is reported as an
//! injected failure of that attempt, and the client's retry passes whole as the next attempt.
//!
//! Where each cut must fall is computed here from the upstream's parts, independently of the
//! proxy's own cutter. The streams: the article's help-desk turn written in each provider's
//! real chunk shapes (always), and the real recordings of `../shared/fixtures` (when present).

use crate::proxy_support;

use bytes::Bytes;
use proxy_support::{Ending, Mock, Stream, post, request_for, shared, start_proxy};
use retryscope::proxy::{How, InjectRule, Point};
use serde_json::{Value, json};

/// The payload of a part (SSE `data:` or a JSON array element), if it is JSON.
fn payload(part: &[u8]) -> Option<Value> {
    let text = String::from_utf8_lossy(part);
    let data: String = if text.contains("data:") {
        text.lines()
            .filter_map(|l| l.trim_end_matches('\r').strip_prefix("data:"))
            .map(|d| d.trim_start())
            .collect::<Vec<_>>()
            .join("\n")
    } else {
        text.trim_start_matches(['[', ',', '\r', '\n', ' '])
            .trim_end_matches(']')
            .to_owned()
    };
    serde_json::from_str(&data).ok()
}

#[derive(Clone, Copy, PartialEq)]
enum Api {
    Chat,
    Responses,
    Anthropic,
    Gemini,
}

fn api_of(s: &Stream) -> Api {
    if s.path.ends_with("/chat/completions") {
        Api::Chat
    } else if s.path.ends_with("/responses") {
        Api::Responses
    } else if s.path.ends_with("/messages") {
        Api::Anthropic
    } else {
        Api::Gemini
    }
}

fn finish(api: Api, v: &Value) -> bool {
    match api {
        Api::Chat => v["choices"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["finish_reason"].is_string())),
        Api::Responses => v["type"].as_str().is_some_and(|t| {
            [
                "response.completed",
                "response.incomplete",
                "response.failed",
            ]
            .contains(&t)
        }),
        Api::Anthropic => {
            v["type"] == "message_stop"
                || v["type"] == "message_delta" && v["delta"]["stop_reason"].is_string()
        }
        Api::Gemini => v["candidates"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["finishReason"].is_string())),
    }
}

fn text(api: Api, v: &Value) -> Option<String> {
    let t = match api {
        Api::Chat => v.pointer("/choices/0/delta/content"),
        Api::Responses if v["type"] == "response.output_text.delta" => v.get("delta"),
        Api::Anthropic if v["delta"]["type"] == "text_delta" => v.pointer("/delta/text"),
        Api::Gemini => v
            .pointer("/candidates/0/content/parts")
            .and_then(Value::as_array)
            .and_then(|ps| {
                ps.iter()
                    .rev()
                    .find(|p| p["thought"] != true && p["text"].is_string())
            })
            .and_then(|p| p.get("text")),
        _ => None,
    };
    t.and_then(Value::as_str).map(str::to_owned)
}

fn has_word(t: &str) -> bool {
    let c: Vec<char> = t.chars().collect();
    c.windows(2)
        .any(|w| w[0].is_alphanumeric() && w[1].is_alphanumeric())
}

/// How many leading parts the client must receive whole, for `point` (`None`: the stream
/// has no such point). For mid-word, the part after them arrives shortened.
fn expected_cut(s: &Stream, point: Point) -> Option<usize> {
    let api = api_of(s);
    let vals: Vec<Option<Value>> = s.parts.iter().map(|p| payload(p)).collect();
    let first_finish = vals
        .iter()
        .position(|v| v.as_ref().is_some_and(|v| finish(api, v)));
    match point {
        Point::BeforeFinish => first_finish,
        Point::MidWord => vals.iter().position(|v| {
            v.as_ref()
                .is_some_and(|v| !finish(api, v) && text(api, v).is_some_and(|t| has_word(&t)))
        }),
        Point::AfterToolCall => match api {
            Api::Anthropic => {
                let start = vals.iter().position(|v| {
                    v.as_ref()
                        .is_some_and(|v| v["content_block"]["type"] == "tool_use")
                })?;
                let idx = vals[start].as_ref()?["index"].clone();
                let stop = (start..vals.len()).find(|&i| {
                    vals[i]
                        .as_ref()
                        .is_some_and(|v| v["type"] == "content_block_stop" && v["index"] == idx)
                })?;
                Some(stop + 1)
            }
            Api::Responses => vals
                .iter()
                .position(|v| {
                    v.as_ref().is_some_and(|v| {
                        v["type"] == "response.output_item.done"
                            && v["item"]["type"]
                                .as_str()
                                .is_some_and(|t| t.ends_with("call"))
                    })
                })
                .map(|i| i + 1),
            Api::Gemini => vals
                .iter()
                .position(|v| {
                    v.as_ref().is_some_and(|v| {
                        v.to_string().contains("\"functionCall\":{\"args\"")
                            || v.pointer("/candidates/0/content/parts")
                                .and_then(Value::as_array)
                                .is_some_and(|ps| {
                                    ps.iter().any(|p| p.pointer("/functionCall/args").is_some())
                                })
                    })
                })
                .map(|i| i + 1),
            Api::Chat => {
                let calls = |v: &Value| {
                    v.pointer("/choices/0/delta/tool_calls")
                        .and_then(Value::as_array)
                        .cloned()
                };
                let start = vals
                    .iter()
                    .position(|v| v.as_ref().and_then(calls).is_some_and(|c| !c.is_empty()))?;
                let idx = calls(vals[start].as_ref()?)?[0]["index"].clone();
                // The first part after it that is not more of that call.
                let end = (start + 1..vals.len()).find(|&i| {
                    let Some(v) = vals[i].as_ref() else {
                        return false;
                    };
                    finish(api, v)
                        || calls(v).is_some_and(|c| c.iter().any(|c| c["index"] != idx))
                        || text(api, v).is_some_and(|t| !t.is_empty())
                })?;
                Some(end)
            }
        },
    }
}

fn sse(parts: &[Value], named: bool, eol: &str) -> Vec<Bytes> {
    parts
        .iter()
        .map(|p| {
            let ev = if named {
                format!("event: {}\n", p["type"].as_str().unwrap_or(""))
            } else {
                String::new()
            };
            Bytes::from(format!("{ev}data: {p}{eol}"))
        })
        .collect()
}

/// The article's help-desk turn in each provider's chunk shapes (modelled on the shared
/// fixtures named in each arm).
fn bookstore() -> Vec<Stream> {
    let mk = |name: &str, path: &str, ct: &'static str, parts: Vec<Bytes>| Stream {
        name: name.to_owned(),
        path: path.to_owned(),
        content_type: ct,
        parts,
    };
    let sse_ct = "text/event-stream";
    // anthropic-sdk-python__tool_use_response.sse
    let anthropic = vec![
        json!({"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"usage":{"input_tokens":1250,"output_tokens":1}}}),
        json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Checking order ORD-7781. "}}),
        json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Refunding the damaged book."}}),
        json!({"type":"content_block_stop","index":0}),
        json!({"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_c1","name":"issue_refund","input":{}}}),
        json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}),
        json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"order_id\": \"ORD-7781\"}"}}),
        json!({"type":"content_block_stop","index":1}),
        json!({"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":48}}),
        json!({"type":"message_stop"}),
    ];
    // openai-python__parallel-tool-calls.sse / openai-python__text.sse
    let c = |delta: Value, fin: Value| json!({"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":delta,"finish_reason":fin}]});
    let mut chat = sse(
        &[
            c(
                json!({"role":"assistant","content":"Checking order "}),
                Value::Null,
            ),
            c(json!({"content":"ORD-7781. Refunding."}), Value::Null),
            c(
                json!({"tool_calls":[{"index":0,"id":"call_c1","type":"function","function":{"name":"issue_refund","arguments":""}}]}),
                Value::Null,
            ),
            c(
                json!({"tool_calls":[{"index":0,"function":{"arguments":"{\"order_id\":"}}]}),
                Value::Null,
            ),
            c(
                json!({"tool_calls":[{"index":0,"function":{"arguments":"\"ORD-7781\"}"}}]}),
                Value::Null,
            ),
            c(json!({}), json!("tool_calls")),
            json!({"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[],"usage":{"prompt_tokens":1250,"completion_tokens":48,"total_tokens":1298}}),
        ],
        false,
        "\n\n",
    );
    chat.push(Bytes::from_static(b"data: [DONE]\n\n"));
    // azure-tool-call.1.chunks.txt / openai-shell-tool.1.chunks.txt
    let responses = vec![
        json!({"type":"response.created","sequence_number":0,"response":{"id":"resp_1","status":"in_progress","model":"gpt-5"}}),
        json!({"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"type":"message","id":"msg_1","role":"assistant","content":[]}}),
        json!({"type":"response.output_text.delta","sequence_number":2,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Checking order "}),
        json!({"type":"response.output_text.delta","sequence_number":3,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"ORD-7781. Refunding."}),
        json!({"type":"response.output_item.done","sequence_number":4,"output_index":0,"item":{"type":"message","id":"msg_1","role":"assistant","content":[{"type":"output_text","text":"Checking order ORD-7781. Refunding."}]}}),
        json!({"type":"response.output_item.added","sequence_number":5,"output_index":1,"item":{"type":"function_call","id":"fc_1","call_id":"call_c1","name":"issue_refund","arguments":"","status":"in_progress"}}),
        json!({"type":"response.function_call_arguments.delta","sequence_number":6,"item_id":"fc_1","output_index":1,"delta":"{\"order_id\":\"ORD-7781\"}"}),
        json!({"type":"response.function_call_arguments.done","sequence_number":7,"item_id":"fc_1","output_index":1,"arguments":"{\"order_id\":\"ORD-7781\"}"}),
        json!({"type":"response.output_item.done","sequence_number":8,"output_index":1,"item":{"type":"function_call","id":"fc_1","call_id":"call_c1","name":"issue_refund","arguments":"{\"order_id\":\"ORD-7781\"}","status":"completed"}}),
        json!({"type":"response.completed","sequence_number":9,"response":{"id":"resp_1","status":"completed","model":"gpt-5","usage":{"input_tokens":1250,"output_tokens":48,"total_tokens":1298}}}),
    ];
    // google-text.chunks.txt / google-tool-call-gemini3.chunks.txt
    let gemini = vec![
        json!({"candidates":[{"content":{"role":"model","parts":[{"text":"Checking order ORD-7781. "}]}}],"modelVersion":"gemini-2.5-flash","responseId":"r1"}),
        json!({"candidates":[{"content":{"role":"model","parts":[{"text":"Refunding the damaged book."},{"functionCall":{"name":"issue_refund","args":{"order_id":"ORD-7781"}}}]}}],"modelVersion":"gemini-2.5-flash","responseId":"r1"}),
        json!({"candidates":[{"content":{"role":"model","parts":[{"text":""}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":1250,"candidatesTokenCount":48,"totalTokenCount":1298},"modelVersion":"gemini-2.5-flash","responseId":"r1"}),
    ];
    let mut array: Vec<Bytes> = gemini
        .iter()
        .enumerate()
        .map(|(i, e)| Bytes::from(format!("{}{e}", if i == 0 { "[" } else { ",\r\n" })))
        .collect();
    array.push(Bytes::from_static(b"]"));
    vec![
        mk(
            "bookstore/anthropic",
            "/v1/messages",
            sse_ct,
            sse(&anthropic, true, "\n\n"),
        ),
        mk(
            "bookstore/openai-chat",
            "/v1/chat/completions",
            sse_ct,
            chat,
        ),
        mk(
            "bookstore/openai-responses",
            "/v1/responses",
            sse_ct,
            sse(&responses, true, "\n\n"),
        ),
        mk(
            "bookstore/gemini-sse",
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
            sse_ct,
            sse(&gemini, false, "\r\n\r\n"),
        ),
        mk(
            "bookstore/gemini-array",
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
            "application/json",
            array,
        ),
    ]
}

/// Cut `s` at `point` by `how`; check where, how, the report, and the retry.
async fn check_cut(s: &Stream, point: Point, how: How) {
    let label = format!("{} {} {}", s.name, point.as_str(), how.as_str());
    let expected = expected_cut(s, point);
    let mock = Mock::start(vec![s.clone()], None).await;
    let rule = InjectRule {
        point,
        how,
        first: Some(1),
        fraction: None,
        seed: 0,
        matches: retryscope::proxy::InjectMatch::All,
    };
    let (addr, lines, proxy) = start_proxy(mock.addr, Some(rule), None).await;
    let req = request_for(&s.path, "My book arrived damaged, order ORD-7781.");
    let got = post(addr, &s.path, &req, &[]).await;
    let Some(k) = expected else {
        // No such point in this stream: it passes whole and nothing is reported as cut.
        assert_eq!(got.body, s.body(), "{label}");
        assert_eq!(proxy.cuts(), 0, "{label}");
        return;
    };
    // A Gemini chunk that carries the call and the finish together (gemini-cli's recording
    // does) arrives with the call and without its finish reason.
    let call_with_finish = point == Point::AfterToolCall
        && api_of(s) == Api::Gemini
        && payload(&s.parts[k - 1]).is_some_and(|v| finish(Api::Gemini, &v));
    let whole = if call_with_finish { k - 1 } else { k };
    let before: Vec<u8> = s.parts[..whole].iter().flat_map(|p| p.to_vec()).collect();
    assert!(
        got.body.starts_with(&before),
        "{label}: the parts before the cut arrive whole"
    );
    let mut rest = got.body[before.len()..].to_vec();
    if call_with_finish {
        let end = find_part_end(&rest, s.content_type == "application/json");
        let v = payload(&rest[..end]).expect("the call's chunk");
        assert!(!finish(Api::Gemini, &v), "{label}: {v}");
        assert!(v.to_string().contains("functionCall"), "{label}: {v}");
        rest.drain(..end);
    }
    if point == Point::MidWord {
        // The next part arrives with its text ending inside a word.
        let api = api_of(s);
        let orig = text(api, &payload(&s.parts[k]).expect("json")).expect("text");
        let cut_part_end = find_part_end(&rest, s.content_type == "application/json");
        let short = text(
            api,
            &payload(&rest[..cut_part_end]).unwrap_or_else(|| {
                panic!(
                    "{label}: cut part is JSON: {:?}",
                    String::from_utf8_lossy(&rest)
                )
            }),
        )
        .expect("cut part has text");
        assert!(
            short.len() < orig.len() && orig.starts_with(&short),
            "{label}: `{short}` of `{orig}`"
        );
        let last = short.chars().last().expect("some text");
        let next = orig[short.len()..].chars().next().expect("cut inside");
        assert!(
            last.is_alphanumeric() && next.is_alphanumeric(),
            "{label}: `{short}|{}`",
            &orig[short.len()..]
        );
        rest.drain(..cut_part_end);
    }
    match how {
        How::Reset => {
            assert_eq!(got.ending, Ending::Reset, "{label}");
            assert!(
                rest.is_empty(),
                "{label}: nothing after the cut: {}",
                String::from_utf8_lossy(&rest)
            );
        }
        How::Eof => {
            assert_eq!(got.ending, Ending::Clean, "{label}");
            assert!(
                rest.is_empty(),
                "{label}: nothing after the cut: {}",
                String::from_utf8_lossy(&rest)
            );
        }
        How::Error => {
            assert_eq!(got.ending, Ending::Clean, "{label}");
            let err = payload(&rest).unwrap_or_else(|| {
                panic!(
                    "{label}: an error event: {}",
                    String::from_utf8_lossy(&rest)
                )
            });
            let shaped = match api_of(s) {
                Api::Anthropic => err["type"] == "error" && err["error"]["type"].is_string(),
                Api::Responses => err["type"] == "error" && err["message"].is_string(),
                Api::Chat | Api::Gemini => err["error"]["message"].is_string(),
            };
            assert!(shaped, "{label}: {err}");
        }
    }
    // Reported: the attempt failed by injection, and the cut is counted.
    assert_eq!(proxy.cuts(), 1, "{label}");
    let errors = lines.of_type("error");
    assert!(
        errors
            .iter()
            .any(|e| e["attempt"] == 0 && e["code"] == format!("injected_{}", how.as_str())),
        "{label}: {errors:?}"
    );
    // The client's retry passes whole, as attempt 1 of the same turn.
    let again = post(addr, &s.path, &req, &[]).await;
    assert_eq!(
        again.body,
        s.body(),
        "{label}: the retry is not cut (first 1)"
    );
    let retries = lines.of_type("retry");
    assert_eq!(
        retries.len(),
        1,
        "{label}: {:?}",
        lines
            .values()
            .iter()
            .filter(|v| v["type"] != "provider_chunk")
            .collect::<Vec<_>>()
    );
    assert_eq!(retries[0]["attempt"], 1);
    assert_eq!(retries[0]["reason"], format!("injected_{}", how.as_str()));
}

/// The end of the first frame of `rest` (an SSE event, or a JSON array element).
fn find_part_end(rest: &[u8], array: bool) -> usize {
    if array {
        let mut depth = 0i32;
        let (mut in_str, mut esc) = (false, false);
        for (i, &b) in rest.iter().enumerate() {
            if in_str {
                match (esc, b) {
                    (true, _) => esc = false,
                    (false, b'\\') => esc = true,
                    (false, b'"') => in_str = false,
                    _ => {}
                }
                continue;
            }
            match b {
                b'"' => in_str = true,
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        return i + 1;
                    }
                }
                _ => {}
            }
        }
        rest.len()
    } else {
        let text = String::from_utf8_lossy(rest);
        let lf = text.find("\n\n").map(|i| i + 2);
        let crlf = text.find("\r\n\r\n").map(|i| i + 4);
        match (lf, crlf) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b).unwrap_or(rest.len()),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_point_and_way_on_every_format_of_the_bookstore_turn() {
    for s in bookstore() {
        for point in Point::ALL {
            assert!(
                expected_cut(&s, point).is_some(),
                "{} has {}",
                s.name,
                point.as_str()
            );
            for how in How::ALL {
                check_cut(&s, point, how).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_point_and_way_on_the_real_recorded_streams() {
    let Some(_) = shared() else { return };
    let picks = [
        ("anthropic", "anthropic-sdk-python__tool_use_response.sse"),
        ("anthropic", "anthropic-text.chunks.txt"),
        ("openai-chat", "openai-python__parallel-tool-calls.sse"),
        ("openai-chat", "openai-python__text.sse"),
        ("openai-chat", "groq-tool-call.chunks.txt"),
        ("openai-responses", "azure-tool-call.1.chunks.txt"),
        ("gemini", "google-text.chunks.txt"),
        ("gemini", "google-tool-call-gemini3.chunks.txt"),
        ("gemini", "gemini-cli__json-output.error.responses"),
    ];
    let mut cut = 0;
    for (dir, file) in picks {
        let s = proxy_support::load(dir, file);
        for point in Point::ALL {
            cut += usize::from(expected_cut(&s, point).is_some());
            for how in How::ALL {
                check_cut(&s, point, how).await;
            }
        }
    }
    assert!(cut >= 18, "cut points found: {cut}");
}
