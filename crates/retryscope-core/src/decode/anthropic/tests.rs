//! Unit tests of the Anthropic Messages decoder: tool input fragments, usage, message ids
//! and splices, content inside `message_start`.

use super::super::Format;
use super::*;

fn run(input: &str) -> (Vec<Event<'static>>, SkipCounts) {
    super::super::provider::decode_lines(Format::Anthropic, input.lines())
}

fn kinds(evs: &[Event<'static>]) -> Vec<&'static str> {
    evs.iter().map(|e| e.kind.type_name()).collect()
}

const START_A: &str = r#"{"type":"message_start","message":{"id":"msg_a","model":"claude","usage":{"input_tokens":10,"cache_read_input_tokens":5,"cache_creation_input_tokens":2,"output_tokens":1}}}"#;

#[test]
fn tool_use_with_empty_first_fragment_and_usage() {
    let input = [
        START_A,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"get","input":{}}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":""}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"a\":1}"}}"#,
        r#"{"type":"content_block_stop","index":0}"#,
        r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":7,"input_tokens":12}}"#,
        r#"{"type":"message_stop"}"#,
    ]
    .join("\n");
    let (evs, _) = run(&input);
    assert_eq!(kinds(&evs), ["turn_start", "tool_call", "usage", "finish"]);
    assert!(matches!(&evs[1].kind, EventKind::ToolCall { args: Some(a), .. } if a == r#"{"a":1}"#));
    assert!(matches!(
        evs[2].kind,
        EventKind::Usage {
            usage: Usage {
                input_tokens: 19,
                output_tokens: 7,
                cached_input_tokens: 5,
                cache_write_tokens: 2,
                ..
            },
            ..
        }
    ));
}

#[test]
fn no_fragment_means_empty_object() {
    let input = [
        START_A,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"n","input":{}}}"#,
        r#"{"type":"content_block_stop","index":0}"#,
    ]
    .join("\n");
    let (evs, _) = run(&input);
    assert!(matches!(&evs[1].kind, EventKind::ToolCall { args: Some(a), .. } if a == "{}"));
}

#[test]
fn different_id_while_open_splices_same_id_does_not() {
    let dup = [START_A, START_A, r#"{"type":"message_stop"}"#].join("\n");
    let (evs, _) = run(&dup);
    assert_eq!(kinds(&evs), ["turn_start", "usage", "finish"]);
    let spliced = [
        START_A,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"n","input":{}}}"#,
        r#"{"type":"message_start","message":{"id":"msg_b","model":"claude"}}"#,
        r#"{"type":"message_stop"}"#,
    ]
    .join("\n");
    let (evs, skips) = run(&spliced);
    assert_eq!(
        kinds(&evs),
        ["turn_start", "usage", "stream_splice", "finish"]
    );
    // The replaced message is billed its message_start figures.
    assert_eq!(evs[1].attempt, Some(0));
    assert!(matches!(
        evs[1].kind,
        EventKind::Usage {
            usage: Usage {
                input_tokens: 17,
                output_tokens: 1,
                ..
            },
            ..
        }
    ));
    assert_eq!(evs[3].attempt, Some(1));
    assert_eq!(skips.incomplete_tool_calls, 1);
}

#[test]
fn stop_then_new_message_is_a_new_turn() {
    let input = [
        START_A,
        r#"{"type":"message_stop"}"#,
        r#"{"type":"message_start","message":{"id":"msg_b","model":"claude"}}"#,
        r#"{"type":"message_stop"}"#,
    ]
    .join("\n");
    let (evs, _) = run(&input);
    let turns: Vec<(&str, Option<u32>)> =
        evs.iter().map(|e| (e.turn.as_ref(), e.attempt)).collect();
    assert_eq!(
        turns,
        [
            ("test", Some(0)),
            ("test", Some(0)),
            ("test", Some(0)),
            ("test#2", Some(0)),
            ("test#2", Some(0))
        ]
    );
}

#[test]
fn unknown_types_are_counted() {
    let (_, skips) = run(&[START_A, r#"{"type":"telepathy"}"#].join("\n"));
    assert_eq!(skips.unknown_types, 1);
}

#[test]
fn spliced_message_cut_in_its_thinking_and_tool_input_is_billed_what_it_streamed() {
    // Modelled on vercel/ai's spliced-message-start.chunks.txt (#18331): the first
    // message streams only thinking and a cut tool input before the retry's message_start.
    let input = [
        r#"{"type":"message_start","message":{"id":"msg_first","model":"claude","content":[],"stop_reason":null,"usage":{"input_tokens":10,"output_tokens":1}}}"#,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"first thinking about it"}}"#,
        r#"{"type":"content_block_stop","index":0}"#,
        r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_first","name":"lookup","input":{}}}"#,
        r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"value\":\"Spark"}}"#,
        r#"{"type":"message_start","message":{"id":"msg_second","model":"claude","content":[],"stop_reason":null,"usage":{"input_tokens":20,"output_tokens":1}}}"#,
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":30}}"#,
        r#"{"type":"message_stop"}"#,
    ]
    .join("\n");
    let (evs, _) = run(&input);
    let usage: Vec<(Option<u32>, u64, u64)> = evs
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::Usage { usage, .. } => {
                Some((e.attempt, usage.input_tokens, usage.output_tokens))
            }
            _ => None,
        })
        .collect();
    // 23 thinking + 15 tool-input characters: 10 tokens at four characters a token.
    assert_eq!(usage, [(Some(0), 10, 10), (Some(1), 20, 30)]);
}

#[test]
fn content_inside_message_start_yields_calls_and_stop_reason() {
    // Programmatic tool calling (vercel/ai anthropic-programmatic-tool-calling.1): the
    // tool_use arrives whole, with a caller, and there is no message_delta.
    let input = [
        r#"{"type":"message_start","message":{"model":"claude-sonnet-4-5-20250929","id":"msg_01","type":"message","role":"assistant","content":[{"type":"tool_use","id":"toolu_01","name":"rollDie","input":{"player":"player1"},"caller":{"type":"code_execution_20250825","tool_id":"srvtoolu_01"}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0}}}"#,
        r#"{"type":"message_stop"}"#,
    ]
    .join("\n");
    let (evs, _) = run(&input);
    assert_eq!(kinds(&evs), ["turn_start", "tool_call", "usage", "finish"]);
    assert!(matches!(
        &evs[1].kind,
        EventKind::ToolCall { id, name, args: Some(a) }
            if id == "toolu_01" && name == "rollDie" && a == r#"{"player":"player1"}"#
    ));
    assert!(matches!(&evs[3].kind, EventKind::Finish { reason } if reason == "tool_use"));
}
