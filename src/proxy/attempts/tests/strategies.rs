//! Retry strategies on the wire (docs/proxy.md's table), each in every API it exists in,
//! driven through the tracker and judged by the real pipeline (`Ingest`, correlator).
//!
//! Request bodies follow the shapes the real clients send (`tests/fixtures/agents/*`,
//! `e2e/proxy/`): Chat Completions `messages` with string contents (openai-python, Qwen
//! Code), Anthropic content blocks (Claude Code), Responses `input` items of
//! `"type":"message"` (Codex), Gemini `contents` with `parts` (gemini-cli). The continuation
//! with a following user message is Qwen Code 0.24.4's (issue 21); the bare trailing
//! assistant message is Anthropic's prefill and its equivalents.

use super::*;
use retryscope_core::report::TurnReport;

#[derive(Clone, Copy)]
enum Msg<'a> {
    User(&'a str),
    Assistant(&'a str),
}

const ALL: [Api; 4] = [
    Api::OpenAiChat,
    Api::Anthropic,
    Api::OpenAiResponses,
    Api::Gemini,
];

fn path(api: Api, model: &str) -> String {
    match api {
        Api::OpenAiChat => "/v1/chat/completions".to_owned(),
        Api::OpenAiResponses => "/v1/responses".to_owned(),
        Api::Anthropic => "/v1/messages".to_owned(),
        Api::Gemini => format!("/v1beta/models/{model}:streamGenerateContent"),
    }
}

/// A request body for `api` holding `history`; `extra` fields are merged in.
fn request(
    api: Api,
    model: &str,
    history: &[Msg<'_>],
    extra: serde_json::Value,
) -> Option<history::Request> {
    use serde_json::json;
    let items: Vec<serde_json::Value> = history
        .iter()
        .map(|m| match (api, *m) {
            (Api::OpenAiChat, Msg::User(t)) => json!({"role":"user","content":t}),
            (Api::OpenAiChat, Msg::Assistant(t)) => json!({"role":"assistant","content":t}),
            (Api::Anthropic, Msg::User(t)) => {
                json!({"role":"user","content":[{"type":"text","text":t}]})
            }
            (Api::Anthropic, Msg::Assistant(t)) => {
                json!({"role":"assistant","content":[{"type":"text","text":t}]})
            }
            (Api::OpenAiResponses, Msg::User(t)) => {
                json!({"type":"message","role":"user","content":[{"type":"input_text","text":t}]})
            }
            (Api::OpenAiResponses, Msg::Assistant(t)) => {
                json!({"type":"message","role":"assistant","content":[{"type":"output_text","text":t}]})
            }
            (Api::Gemini, Msg::User(t)) => json!({"role":"user","parts":[{"text":t}]}),
            (Api::Gemini, Msg::Assistant(t)) => json!({"role":"model","parts":[{"text":t}]}),
        })
        .collect();
    let mut body = match api {
        Api::OpenAiChat => json!({"model":model,"stream":true,"messages":items}),
        Api::Anthropic => {
            json!({"model":model,"stream":true,"max_tokens":4096,"system":[{"type":"text","text":"You are a coding agent."}],"messages":items})
        }
        Api::OpenAiResponses => {
            json!({"model":model,"stream":true,"instructions":"You are a coding agent.","input":items})
        }
        Api::Gemini => {
            json!({"systemInstruction":{"parts":[{"text":"You are a coding agent."}]},"contents":items})
        }
    };
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            b.insert(k.clone(), v.clone());
        }
    }
    history::parse(api, &path(api, model), body.to_string().as_bytes())
}

/// The stream of a text answer in `api`'s chunk shapes (`finish`: with its end and usage).
fn text_chunks(api: Api, id: &str, text: &str, finish: bool) -> Vec<String> {
    use serde_json::json;
    let mut v = Vec::new();
    match api {
        Api::OpenAiChat => {
            v.push(json!({"id":id,"object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"role":"assistant","content":text}}]}));
            if finish {
                v.push(json!({"id":id,"object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}));
                v.push(json!({"id":id,"object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[],"usage":{"prompt_tokens":120,"completion_tokens":20,"total_tokens":140}}));
            }
        }
        Api::Anthropic => {
            v.push(json!({"type":"message_start","message":{"id":id,"type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"usage":{"input_tokens":120,"output_tokens":1}}}));
            v.push(json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}));
            v.push(json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":text}}));
            if finish {
                v.push(json!({"type":"content_block_stop","index":0}));
                v.push(json!({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":20}}));
                v.push(json!({"type":"message_stop"}));
            }
        }
        Api::OpenAiResponses => {
            v.push(json!({"type":"response.created","sequence_number":0,"response":{"id":id,"status":"in_progress","model":"gpt-5"}}));
            v.push(json!({"type":"response.output_text.delta","sequence_number":1,"item_id":"msg_1","output_index":0,"content_index":0,"delta":text}));
            if finish {
                v.push(json!({"type":"response.completed","sequence_number":2,"response":{"id":id,"status":"completed","model":"gpt-5","usage":{"input_tokens":120,"output_tokens":20,"total_tokens":140}}}));
            }
        }
        Api::Gemini => {
            v.push(json!({"candidates":[{"content":{"role":"model","parts":[{"text":text}]}}],"modelVersion":"gemini-2.5-flash","responseId":id}));
            if finish {
                v.push(json!({"candidates":[{"content":{"role":"model","parts":[{"text":""}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":120,"candidatesTokenCount":20,"totalTokenCount":140},"modelVersion":"gemini-2.5-flash","responseId":id}));
            }
        }
    }
    v.iter().map(serde_json::Value::to_string).collect()
}

fn model_of(api: Api) -> &'static str {
    match api {
        Api::OpenAiChat => "gpt-4o",
        Api::OpenAiResponses => "gpt-5",
        Api::Anthropic => "claude-sonnet-4-5",
        Api::Gemini => "gemini-2.5-flash",
    }
}

const CUT: End = End::Injected {
    point: "mid-word",
    how: "reset",
};

/// Closed turns' reports, through the ingest path.
fn reports(lines: &Shared) -> Vec<TurnReport> {
    let correlator = Correlator::new(CorrelatorConfig::default(), Arc::new(PriceTable::builtin()));
    let mut ingest = Ingest::new(correlator, Format::Native);
    let id = ingest.stream(Source::Proxy, "<proxy>");
    let mut out = Vec::new();
    for line in lines.0.lock().expect("lock").iter() {
        ingest.line(id, None, line, None, &mut out, &mut |_| {});
    }
    ingest.close_all(&mut out, &mut |_| {});
    out.into_iter()
        .filter_map(|o| match o {
            Output::TurnClosed(r) => Some(*r),
            _ => None,
        })
        .collect()
}

fn report<'r>(all: &'r [TurnReport], turn: &str) -> &'r TurnReport {
    all.iter()
        .find(|r| r.turn == turn)
        .unwrap_or_else(|| panic!("no report for {turn}: {all:?}"))
}

fn lines_of(lines: &Shared, kind: &str) -> Vec<serde_json::Value> {
    lines
        .0
        .lock()
        .expect("lock")
        .iter()
        .filter_map(|l| serde_json::from_slice::<serde_json::Value>(l).ok())
        .filter(|v| v["type"] == kind)
        .collect()
}

const TASK: &str = "Create the marker file, then say done.";
const PARTIAL: &str = "[A1] I will now cr";
const GOES_ON: &str = "eate the marker file (A2).";
const RESTARTS: &str = "[A2] I will now create the marker file (A2).";
const ASK: &str = "Your previous response was cut off. Output only text that comes after this \
                   suffix: <previous_response_suffix>[A1] I will now cr</previous_response_suffix>";

/// A cut first attempt streaming `PARTIAL`, a continuation request (with or without the user
/// message asking to go on) answered by `continuation`, and the client's next request that
/// keeps `PARTIAL + continuation`. Returns the lines and the cut call's turn id.
fn continued(api: Api, ask: bool, continuation: &str) -> (Shared, String) {
    let (mut t, lines) = tracker();
    let model = model_of(api);
    let mut ts = 1_000;
    let r0 = request(api, model, &[Msg::User(TASK)], serde_json::json!({}));
    let a0 = t.begin(api, r0.as_ref(), None, ts);
    stream(
        &mut t,
        &a0,
        &text_chunks(api, "r-0", PARTIAL, false),
        CUT,
        &mut ts,
    );
    let mut history = vec![Msg::User(TASK), Msg::Assistant(PARTIAL)];
    if ask {
        history.push(Msg::User(ASK));
    }
    let r1 = request(api, model, &history, serde_json::json!({}));
    let a1 = t.begin(api, r1.as_ref(), None, ts);
    assert_eq!(
        (a1.turn.as_str(), a1.attempt),
        (a0.turn.as_str(), 1),
        "{api:?}: a continuation is the same call's next attempt"
    );
    let cont = text_chunks(api, "r-1", continuation, true);
    stream(&mut t, &a1, &cont, End::Complete, &mut ts);
    let kept = format!("{PARTIAL}{continuation}");
    let next = request(
        api,
        model,
        &[Msg::User(TASK), Msg::Assistant(&kept), Msg::User("Thanks.")],
        serde_json::json!({}),
    );
    let a2 = t.begin(api, next.as_ref(), None, ts + 50);
    assert_eq!(a2.turn, format!("{}#2", a0.turn), "{api:?}");
    assert!(
        t.turns[&a0.turn].kept.text.is_empty(),
        "a closed call's text is not kept"
    );
    let done = text_chunks(api, "r-2", "Done.", true);
    stream(&mut t, &a2, &done, End::Complete, &mut ts);
    assert_eq!(t.stats().retries, 1, "{api:?}");
    (lines, a0.turn)
}

#[test]
fn a_continuation_that_goes_on_is_one_retry_and_clean_in_every_api() {
    for api in ALL {
        for ask in [false, true] {
            let (lines, turn) = continued(api, ask, GOES_ON);
            let all = reports(&lines);
            let r = report(&all, &turn);
            assert_eq!(r.retries, 1, "{api:?} ask={ask}: {r:?}");
            assert_eq!(r.attempts.len(), 2);
            assert_eq!(
                r.attempts[1].retry_reason.as_deref(),
                Some("injected_reset")
            );
            assert_eq!(
                r.output_chars,
                Some((PARTIAL.len() + GOES_ON.len()) as u64),
                "the kept text is the partial text plus what the continuation added"
            );
            assert!(r.findings.is_empty(), "{api:?} ask={ask}: {:?}", r.findings);
            // The continuation is billed: its usage is the attempt's.
            assert!(
                r.attempts[1].usage.tokens.input_tokens > 0,
                "{api:?}: {:?}",
                r.attempts[1].usage
            );
            let retry = &lines_of(&lines, "retry")[0];
            assert_eq!(retry["prefill"], PARTIAL, "{api:?}");
        }
    }
}

#[test]
fn a_continuation_that_restarts_is_spliced_text_with_the_overlap_in_every_api() {
    for api in ALL {
        for ask in [false, true] {
            let (lines, turn) = continued(api, ask, RESTARTS);
            let all = reports(&lines);
            let r = report(&all, &turn);
            assert_eq!(r.retries, 1, "{api:?}");
            let spliced: Vec<_> = r
                .findings
                .iter()
                .filter(|f| f.kind.as_str() == "spliced_text")
                .collect();
            assert_eq!(spliced.len(), 1, "{api:?} ask={ask}: {:?}", r.findings);
            assert_eq!(spliced[0].attempt, Some(0));
            assert_eq!(spliced[0].evidence, "restart: ] I will now cr", "{api:?}");
        }
    }
}

#[test]
fn a_partial_the_cut_attempt_never_streamed_is_a_new_call() {
    // Same shape, other text: the client asks about something else, not a continuation.
    for api in ALL {
        let (mut t, _) = tracker();
        let model = model_of(api);
        let mut ts = 1;
        let r0 = request(api, model, &[Msg::User(TASK)], serde_json::json!({}));
        let a0 = t.begin(api, r0.as_ref(), None, ts);
        stream(
            &mut t,
            &a0,
            &text_chunks(api, "r-0", PARTIAL, false),
            CUT,
            &mut ts,
        );
        let r1 = request(
            api,
            model,
            &[
                Msg::User(TASK),
                Msg::Assistant("Something else."),
                Msg::User("ok"),
            ],
            serde_json::json!({}),
        );
        let a1 = t.begin(api, r1.as_ref(), None, ts);
        assert_eq!(a1.turn, format!("{}#2", a0.turn), "{api:?}");
        assert_eq!(a1.attempt, 0);
        assert_eq!(t.stats().retries, 0);
    }
}

#[test]
fn a_completed_answer_followed_by_a_question_is_the_next_call() {
    for api in ALL {
        let (mut t, _) = tracker();
        let model = model_of(api);
        let mut ts = 1;
        let r0 = request(api, model, &[Msg::User(TASK)], serde_json::json!({}));
        let a0 = t.begin(api, r0.as_ref(), None, ts);
        let full = text_chunks(api, "r-0", RESTARTS, true);
        stream(&mut t, &a0, &full, End::Complete, &mut ts);
        let r1 = request(
            api,
            model,
            &[Msg::User(TASK), Msg::Assistant(RESTARTS), Msg::User("ok")],
            serde_json::json!({}),
        );
        let a1 = t.begin(api, r1.as_ref(), None, ts);
        assert_eq!(
            (a1.turn.clone(), a1.attempt),
            (format!("{}#2", a0.turn), 0),
            "{api:?}"
        );
        assert_eq!(t.stats().retries, 0);
    }
}

#[test]
fn a_fallback_to_another_model_or_a_whole_answer_is_a_retry_billed_at_its_model() {
    // The same history, another model, `stream: false`, other sampling parameters and ids:
    // the same call again.
    for api in [Api::OpenAiChat, Api::Anthropic, Api::OpenAiResponses] {
        let (mut t, lines) = tracker();
        let mut ts = 1;
        let r0 = request(
            api,
            model_of(api),
            &[Msg::User(TASK)],
            serde_json::json!({"temperature":0.2,"metadata":{"user_id":"u-1"}}),
        );
        let a0 = t.begin(api, r0.as_ref(), None, ts);
        stream(
            &mut t,
            &a0,
            &text_chunks(api, "r-0", PARTIAL, false),
            CUT,
            &mut ts,
        );
        let fallback = if api == Api::Anthropic {
            "claude-haiku-4-5"
        } else {
            "gpt-4o-mini"
        };
        let r1 = request(
            api,
            fallback,
            &[Msg::User(TASK)],
            serde_json::json!({"stream":false,"temperature":0.7,"metadata":{"user_id":"u-2"}}),
        );
        let a1 = t.begin(api, r1.as_ref(), None, ts);
        assert_eq!((a1.turn.as_str(), a1.attempt), (a0.turn.as_str(), 1));
        let starts = lines_of(&lines, "attempt_start");
        // The fallback attempt takes the model its answer names (one model name per call,
        // never the requested alias: tests/cli/model_names.rs), so it is billed at that model's
        // price; the request's model is not written as the attempt's.
        assert!(starts[1]["model"].is_null(), "{api:?}");
        let _ = fallback;
    }
    // Gemini names its model in the path.
    let (mut t, lines) = tracker();
    let api = Api::Gemini;
    let mut ts = 1;
    let r0 = request(
        api,
        "gemini-2.5-pro",
        &[Msg::User(TASK)],
        serde_json::json!({}),
    );
    let a0 = t.begin(api, r0.as_ref(), None, ts);
    stream(
        &mut t,
        &a0,
        &text_chunks(api, "r-0", PARTIAL, false),
        CUT,
        &mut ts,
    );
    let r1 = request(
        api,
        "gemini-2.5-flash",
        &[Msg::User(TASK)],
        serde_json::json!({"generationConfig":{"temperature":0.9}}),
    );
    let a1 = t.begin(api, r1.as_ref(), None, ts);
    assert_eq!((a1.turn.as_str(), a1.attempt), (a0.turn.as_str(), 1));
    // Named by its answer (`modelVersion`), not by the request's path.
    assert!(lines_of(&lines, "attempt_start")[1]["model"].is_null());
}

#[test]
fn responses_continuing_the_cut_response_on_the_server_is_a_retry() {
    // `previous_response_id` naming the cut response, with no new tool results: the server
    // holds the partial output; the retry continues it.
    let api = Api::OpenAiResponses;
    let (mut t, lines) = tracker();
    let mut ts = 1;
    let r0 = request(api, "gpt-5", &[Msg::User(TASK)], serde_json::json!({}));
    let a0 = t.begin(api, r0.as_ref(), None, ts);
    stream(
        &mut t,
        &a0,
        &text_chunks(api, "resp_cut", PARTIAL, false),
        CUT,
        &mut ts,
    );
    let r1 = history::parse(
        api,
        "/v1/responses",
        serde_json::json!({"model":"gpt-5","stream":true,"previous_response_id":"resp_cut",
            "input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"Continue."}]}]})
        .to_string()
        .as_bytes(),
    );
    let a1 = t.begin(api, r1.as_ref(), None, ts);
    assert_eq!((a1.turn.as_str(), a1.attempt), (a0.turn.as_str(), 1));
    assert_eq!(lines_of(&lines, "retry")[0]["prefill"], PARTIAL);
    // The continuation starts its answer over; the next call chains on the server again, so
    // no history shows the kept text: it is what the server stored, the partial text followed
    // by the continuation's, and the restart is spliced_text (e2e/zoo previous-response-id).
    let restart = "[A2] I will now create the marker file (A2).";
    stream(
        &mut t,
        &a1,
        &text_chunks(api, "resp_cont", restart, true),
        End::Complete,
        &mut ts,
    );
    let r2 = history::parse(
        api,
        "/v1/responses",
        serde_json::json!({"model":"gpt-5","stream":true,"previous_response_id":"resp_cont",
            "input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"Thanks."}]}]})
        .to_string()
        .as_bytes(),
    );
    let a2 = t.begin(api, r2.as_ref(), None, ts + 50);
    assert_eq!(a2.turn, format!("{}#2", a0.turn));
    assert_eq!(
        lines_of(&lines, "output")[0]["text"],
        format!("{PARTIAL}{restart}")
    );
    let all = reports(&lines);
    let first = report(&all, &a0.turn);
    assert!(
        first
            .findings
            .iter()
            .any(|f| f.kind == retryscope_core::finding::FindingKind::SplicedText),
        "{:?}",
        first.findings
    );
}

#[test]
fn two_requests_extending_the_same_call_are_two_turns() {
    // Issue 21 item 6: a tool-result request and the client's resend of it with a note added
    // both extend call 1. Both were named `…#2`: a second turn_start for the same id, one
    // attempt and its cost lost.
    for api in ALL {
        let (mut t, lines) = tracker();
        let model = model_of(api);
        let mut ts = 1;
        let r0 = request(api, model, &[Msg::User(TASK)], serde_json::json!({}));
        let a0 = t.begin(api, r0.as_ref(), None, ts);
        let answer0 = text_chunks(api, "r-0", RESTARTS, true);
        stream(&mut t, &a0, &answer0, End::Complete, &mut ts);
        let base = [Msg::User(TASK), Msg::Assistant(RESTARTS)];
        let mut h1 = base.to_vec();
        h1.push(Msg::User("Go on."));
        let a1 = t.begin(
            api,
            request(api, model, &h1, serde_json::json!({})).as_ref(),
            None,
            ts,
        );
        stream(
            &mut t,
            &a1,
            &text_chunks(api, "r-1", "One.", true),
            End::Complete,
            &mut ts,
        );
        let mut h2 = base.to_vec();
        h2.push(Msg::User("Go on, and be brief."));
        let a2 = t.begin(
            api,
            request(api, model, &h2, serde_json::json!({})).as_ref(),
            None,
            ts,
        );
        stream(
            &mut t,
            &a2,
            &text_chunks(api, "r-2", "Two.", true),
            End::Complete,
            &mut ts,
        );
        assert_ne!(a1.turn, a2.turn, "{api:?}");
        let starts = lines_of(&lines, "turn_start");
        let mut ids: Vec<&str> = starts.iter().filter_map(|v| v["turn"].as_str()).collect();
        let n = ids.len();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), n, "{api:?}: one turn_start per id: {ids:?}");
        let all = reports(&lines);
        assert_eq!(all.len(), 3, "{api:?}: {all:?}");
        assert!(
            all.iter()
                .all(|r| r.attempts.len() == 1 && r.cost_usd >= 0.0)
        );
    }
}

#[test]
fn a_resumed_background_stream_continues_the_same_attempt() {
    // OpenAI Responses `background: true`: the stream breaks, the response goes on on the
    // server, and `GET /v1/responses/{id}?stream=true&starting_after=N` streams the rest.
    // One attempt, completed; no retry.
    let api = Api::OpenAiResponses;
    let (mut t, lines) = tracker();
    let r0 = request(
        api,
        "gpt-5",
        &[Msg::User(TASK)],
        serde_json::json!({"background":true}),
    );
    assert!(r0.as_ref().is_some_and(|r| r.background));
    let a0 = t.begin(api, r0.as_ref(), None, 1);
    let all = text_chunks(api, "resp_bg", RESTARTS, true);
    let mut ts = 1;
    stream(&mut t, &a0, &all[..2], CUT, &mut ts);
    assert_eq!(t.resume("resp_unknown"), None);
    let again = t
        .resume("resp_bg")
        .expect("the stream this proxy saw begin");
    assert_eq!(again, a0);
    stream(&mut t, &again, &all[2..], End::Complete, &mut ts);
    assert!(t.finished(&a0));
    assert_eq!(t.stats().retries, 0);
    assert_eq!(t.stats().resumed, 1);
    assert!(
        lines_of(&lines, "error").is_empty(),
        "only the stream broke"
    );
    let reports = reports(&lines);
    let r = report(&reports, &a0.turn);
    assert_eq!(r.retries, 0);
    assert_eq!(r.attempts.len(), 1);
    assert_eq!(
        r.attempts[0].outcome,
        retryscope_core::report::Outcome::Completed
    );
    assert!(r.findings.is_empty(), "{:?}", r.findings);
}
