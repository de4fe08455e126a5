//! Executions and their calls: keyed when the call arrives late, kept apart when
//! never resolved, attributed by content when the client names no call id.

use super::*;

#[test]
fn execution_before_its_call_is_keyed_when_the_call_arrives() {
    let (_, reports) = run(r#"
{"turn":"t","type":"tool_exec","attempt":0,"id":"a","name":"refund"}
{"turn":"t","type":"tool_call","attempt":0,"id":"a","name":"refund","args":{"o":1}}
{"turn":"t","type":"finish","attempt":0,"reason":"tool_calls"}
{"turn":"t","type":"tool_call","attempt":0,"id":"b","name":"refund","args":{"o":1}}
{"turn":"t","type":"tool_exec","attempt":0,"id":"b","name":"refund"}
"#);
    let r = &reports[0];
    assert_eq!(
        r.attempts[0].executed[0].effect_key,
        r.attempts[0].tool_calls[0].effect_key
    );
    assert!(kinds(r).contains(&FindingKind::DuplicateEffect));
}

#[test]
fn unresolved_executions_do_not_collide() {
    let (_, reports) = run(r#"
{"turn":"t","type":"finish","attempt":0,"reason":"stop"}
{"turn":"t","type":"tool_exec","attempt":0,"id":"a","name":"refund"}
{"turn":"t","type":"tool_exec","attempt":0,"id":"b","name":"refund"}
"#);
    let r = &reports[0];
    assert!(r.findings.is_empty(), "{:?}", r.findings);
    assert_ne!(
        r.attempts[0].executed[0].effect_key,
        r.attempts[0].executed[1].effect_key
    );
    assert!(!r.attempts[0].executed[0].effect_key.is_empty());
}

#[test]
fn executions_without_call_ids_are_attributed_by_content() {
    // gemini-cli: the retry's stream ended, then both attempts' calls ran; the telemetry names
    // each execution by tool and arguments only.
    let (_, reports) = run(r#"
{"turn":"t","type":"tool_call","attempt":0,"id":"g1","name":"run_shell_command","args":{"command":"touch a0"}}
{"turn":"t","type":"error","attempt":0,"message":"ECONNRESET"}
{"turn":"t","type":"retry","attempt":1}
{"turn":"t","type":"tool_call","attempt":1,"id":"g2","name":"run_shell_command","args":{"command":"touch a1"}}
{"turn":"t","type":"finish","attempt":1,"reason":"STOP"}
{"turn":"t","type":"tool_exec","id":"t#1","name":"run_shell_command","args":{"command":"touch a0"}}
{"turn":"t","type":"tool_exec","id":"t#2","name":"run_shell_command","args":{ "command" : "touch a1" }}
"#);
    let r = &reports[0];
    let ran: Vec<(u32, &str)> = r
        .attempts
        .iter()
        .flat_map(|a| a.executed.iter().map(move |e| (a.attempt, e.id.as_str())))
        .collect();
    assert_eq!(ran, [(0, "g1"), (1, "g2")]);
    assert_eq!(
        kinds(r),
        vec![
            FindingKind::AbandonedToolExecuted,
            FindingKind::UnfinishedToolExecuted
        ]
    );
    assert!(
        r.findings
            .iter()
            .all(|f| f.call_id.as_deref() == Some("g1"))
    );
}
