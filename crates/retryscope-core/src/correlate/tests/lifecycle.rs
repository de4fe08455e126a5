//! A turn's life: implicit retries and interleaved turns, late events, idle timeouts
//! (a wire-only turn with a response in flight waits), eviction, events after close.

use super::*;

/// One native line into `c`, arriving at `now`.
fn feed(c: &mut Correlator, line: &str, now: i64, out: &mut Vec<Output>) {
    match decode_line(line.as_bytes(), &mut SkipCounts::default()) {
        Ok(NativeLine::Event(ev)) => c.observe(&ev, now, out),
        other => panic!("{line} did not decode: {other:?}"),
    }
}

/// A correlator's settings with the default idle timeout, 5 minutes.
fn idle_5_min() -> CorrelatorConfig {
    CorrelatorConfig {
        idle_timeout_ms: Some(300_000),
        ..CorrelatorConfig::default()
    }
}

/// The report of `turn`, if `out` closed it.
fn closed_report<'o>(out: &'o [Output], turn: &str) -> Option<&'o TurnReport> {
    out.iter().find_map(|o| match o {
        Output::TurnClosed(r) if r.turn == turn => Some(&**r),
        _ => None,
    })
}

#[test]
fn wire_only_turn_with_a_response_in_flight_is_not_idle_closed() {
    // Proxy: with `--idle-timeout-secs 1` a turn was closed during the upstream's 1 s silence
    // after a tool call, while the stream was still open, and the attempt's execution (read
    // from the next request) was then dropped. An open attempt of a wire-only turn is a
    // response in flight.
    let cfg = CorrelatorConfig {
        idle_timeout_ms: Some(1_000),
        ..CorrelatorConfig::default()
    };
    let mut c = Correlator::new(cfg.clone(), Arc::new(PriceTable::builtin()));
    let mut out = Vec::new();
    let closed = |out: &[Output]| out.iter().any(|o| matches!(o, Output::TurnClosed(_)));
    feed(
        &mut c,
        r#"{"turn":"t","type":"turn_start","provider":"anthropic","wire_only":true}"#,
        0,
        &mut out,
    );
    feed(
        &mut c,
        r#"{"turn":"t","type":"attempt_start","attempt":0}"#,
        0,
        &mut out,
    );
    feed(
        &mut c,
        r#"{"turn":"t","type":"tool_call","attempt":0,"id":"c1","name":"issue_refund","args":{}}"#,
        100,
        &mut out,
    );
    c.tick(1_500, &mut out);
    c.tick(60_000, &mut out);
    assert!(!closed(&out), "stream in flight: not idle");
    feed(
        &mut c,
        r#"{"turn":"t","type":"finish","attempt":0,"reason":"tool_use"}"#,
        60_100,
        &mut out,
    );
    feed(
        &mut c,
        r#"{"turn":"t","type":"tool_exec","attempt":0,"id":"c1","name":"issue_refund"}"#,
        60_200,
        &mut out,
    );
    c.tick(60_500, &mut out);
    assert!(!closed(&out));
    c.tick(61_300, &mut out);
    assert!(
        closed(&out),
        "ended attempt: the idle timeout applies again"
    );
    let report = out
        .iter()
        .find_map(|o| match o {
            Output::TurnClosed(r) => Some(r),
            _ => None,
        })
        .expect("report");
    assert_eq!(report.attempts[0].outcome, Outcome::Completed);
    assert!(report.findings.is_empty(), "{:?}", report.findings);

    // Without `wire_only` (an agent's log), an open attempt is idle as any other; and a lost
    // stream of a wire-only turn still closes at the safety net.
    for (start, at) in [
        (r#"{"turn":"u","type":"turn_start"}"#, 1_000),
        (
            r#"{"turn":"u","type":"turn_start","wire_only":true}"#,
            IN_FLIGHT_MIN_IDLE_MS,
        ),
    ] {
        let mut c = Correlator::new(cfg.clone(), Arc::new(PriceTable::builtin()));
        let mut out = Vec::new();
        feed(&mut c, start, 0, &mut out);
        feed(
            &mut c,
            r#"{"turn":"u","type":"text","attempt":0,"text":"Checking"}"#,
            0,
            &mut out,
        );
        c.tick(at - 1, &mut out);
        assert!(!closed(&out));
        c.tick(at, &mut out);
        assert!(closed(&out), "{start}");
    }
}

#[test]
fn a_turn_whose_tools_are_running_outlives_the_idle_timeout() {
    // Found with the proxy's e2e suite: a tool that ran longer than the idle timeout (5 min
    // by default; a build or a test suite) had its turn closed under it, and the execution
    // that followed was dropped as an event after close, with any finding it raised. The
    // proxy's turn: the attempt asks for a call, the build runs 20 minutes, then the next
    // request shows the execution.
    let cfg = idle_5_min();
    let closed = |out: &[Output]| closed_report(out, "t").cloned();
    let asks = [
        (
            r#"{"turn":"t","type":"turn_start","provider":"openai","wire_only":true}"#,
            0,
        ),
        (
            r#"{"turn":"t","type":"tool_call","attempt":0,"id":"c1","name":"run_build","args":{}}"#,
            100,
        ),
        (
            r#"{"turn":"t","type":"finish","attempt":0,"reason":"tool_calls"}"#,
            200,
        ),
    ];
    let mut c = Correlator::new(cfg.clone(), Arc::new(PriceTable::builtin()));
    let mut out = Vec::new();
    for (line, at) in asks {
        feed(&mut c, line, at, &mut out);
    }
    c.tick(20 * 60_000, &mut out);
    assert!(closed(&out).is_none(), "its tool is running: not idle");
    feed(
        &mut c,
        r#"{"turn":"t","type":"tool_exec","attempt":0,"id":"c1","name":"run_build"}"#,
        20 * 60_000 + 100,
        &mut out,
    );
    assert_eq!(c.stats().after_close_events, 0);
    c.tick(20 * 60_000 + 100 + 299_999, &mut out);
    assert!(closed(&out).is_none());
    c.tick(20 * 60_000 + 100 + 300_000, &mut out);
    let report = closed(&out).expect("the tool ran: the idle timeout applies again");
    assert_eq!(report.attempts[0].executed.len(), 1, "{report:?}");

    // A client that never runs its tools (it went away) still closes at the safety net:
    // ten idle timeouts, without the in-flight minimum.
    let mut c = Correlator::new(cfg.clone(), Arc::new(PriceTable::builtin()));
    let mut out = Vec::new();
    for (line, at) in asks {
        feed(&mut c, line, at, &mut out);
    }
    let net = 200 + 300_000 * IN_FLIGHT_IDLE_FACTOR;
    c.tick(net - 1, &mut out);
    assert!(closed(&out).is_none());
    c.tick(net, &mut out);
    assert!(closed(&out).is_some());

    // Not wire-only (a provider stream, which never shows an execution): idle as before.
    let mut c = Correlator::new(cfg, Arc::new(PriceTable::builtin()));
    let mut out = Vec::new();
    feed(
        &mut c,
        r#"{"turn":"t","type":"turn_start","provider":"openai"}"#,
        0,
        &mut out,
    );
    for (line, at) in &asks[1..] {
        feed(&mut c, line, *at, &mut out);
    }
    c.tick(200 + 300_000, &mut out);
    assert!(closed(&out).is_some());
}

#[test]
fn a_logged_turn_whose_tools_are_running_outlives_the_idle_timeout() {
    // The proxy's case (above) in an agent's own log or telemetry: a tool that runs longer
    // than the idle timeout had its turn closed under it, and the execution the log then
    // recorded was dropped as an event after close, with any finding it raised. A log
    // reports executions once it has shown one: its input, or the turn itself.
    let cfg = idle_5_min();
    let closed = |out: &[Output], turn: &str| closed_report(out, turn).cloned();
    let asks = |turn: &str| {
        [
            format!(
                r#"{{"turn":"{turn}","type":"tool_call","attempt":0,"id":"c1","name":"run_build","args":{{}}}}"#
            ),
            format!(r#"{{"turn":"{turn}","type":"finish","attempt":0,"reason":"tool_use"}}"#),
        ]
    };
    let exec = |turn: &str, attempt: u32, id: &str| {
        format!(
            r#"{{"turn":"{turn}","type":"tool_exec","attempt":{attempt},"id":"{id}","name":"run_build"}}"#
        )
    };
    let log: Arc<str> = Arc::from("agent.log");
    let stream: Arc<str> = Arc::from("provider.sse");
    let mut c = Correlator::new(cfg.clone(), Arc::new(PriceTable::builtin()));
    let mut out = Vec::new();
    // The log shows an execution in an earlier turn.
    c.set_origin(&log, None);
    for line in asks("a") {
        feed(&mut c, &line, 0, &mut out);
    }
    feed(&mut c, &exec("a", 0, "c1"), 50, &mut out);
    feed(&mut c, r#"{"turn":"a","type":"turn_end"}"#, 60, &mut out);
    // Then a turn of that log asks for a build that runs 20 minutes; a provider stream's
    // turn asks for the same and never shows an execution.
    for line in asks("b") {
        feed(&mut c, &line, 100, &mut out);
    }
    c.set_origin(&stream, None);
    for line in asks("c") {
        feed(&mut c, &line, 100, &mut out);
    }
    c.tick(100 + 300_000, &mut out);
    assert!(
        closed(&out, "c").is_some(),
        "a provider stream: idle as before"
    );
    c.tick(20 * 60_000, &mut out);
    assert!(closed(&out, "b").is_none(), "its tool is running: not idle");
    c.set_origin(&log, None);
    feed(&mut c, &exec("b", 0, "c1"), 20 * 60_000 + 100, &mut out);
    assert_eq!(c.stats().after_close_events, 0);
    c.tick(20 * 60_000 + 100 + 300_000, &mut out);
    let b = closed(&out, "b").expect("the tool ran: the idle timeout applies again");
    assert_eq!(b.attempts[0].executed.len(), 1, "{b:?}");

    // With no input told (or past MAX_EXEC_INPUTS), a turn that has shown an execution of
    // its own: its second step's build outlives the idle timeout too.
    let mut c = Correlator::new(cfg, Arc::new(PriceTable::builtin()));
    let mut out = Vec::new();
    for line in asks("d") {
        feed(&mut c, &line, 0, &mut out);
    }
    feed(&mut c, &exec("d", 0, "c1"), 50, &mut out);
    feed(
        &mut c,
        r#"{"turn":"d","type":"tool_call","attempt":1,"id":"c2","name":"run_build","args":{}}"#,
        100,
        &mut out,
    );
    feed(
        &mut c,
        r#"{"turn":"d","type":"finish","attempt":1,"reason":"tool_use"}"#,
        100,
        &mut out,
    );
    c.tick(20 * 60_000, &mut out);
    assert!(
        closed(&out, "d").is_none(),
        "its second tool is running: not idle"
    );
    feed(&mut c, &exec("d", 1, "c2"), 20 * 60_000 + 100, &mut out);
    c.tick(20 * 60_000 + 100 + 300_000, &mut out);
    let d = closed(&out, "d").expect("closed once idle after its tools ran");
    assert_eq!(c.stats().after_close_events, 0);
    assert_eq!(
        d.attempts.iter().map(|a| a.executed.len()).sum::<usize>(),
        2,
        "{d:?}"
    );
}

#[test]
fn an_agents_open_attempt_with_a_call_not_run_yet_waits_on_it_where_executions_are_recorded() {
    // An agent's own output writes a call, runs it, and ends the response after: the attempt
    // is still open while the tool runs. In an input that records executions that is a turn
    // waiting on its tool; in one that does not (a provider stream cut after the call) it is
    // idle as before, and so is an open attempt whose calls have all run.
    let cfg = idle_5_min();
    let closed = |out: &[Output], turn: &str| closed_report(out, turn).is_some();
    let call = |turn: &str, id: &str| {
        format!(
            r#"{{"turn":"{turn}","type":"tool_call","attempt":0,"id":"{id}","name":"run_tests","args":{{"n":"{id}"}}}}"#
        )
    };
    let exec = |turn: &str, id: &str| {
        format!(
            r#"{{"turn":"{turn}","type":"tool_exec","attempt":0,"id":"{id}","name":"run_tests"}}"#
        )
    };
    let agent: Arc<str> = Arc::from("session.jsonl");
    let stream: Arc<str> = Arc::from("cut.sse");
    let mut c = Correlator::new(cfg, Arc::new(PriceTable::builtin()));
    c.input_records_executions(&agent);
    let mut out = Vec::new();
    c.set_origin(&agent, None);
    feed(&mut c, &call("a", "c1"), 0, &mut out);
    feed(&mut c, &call("b", "c1"), 0, &mut out);
    feed(&mut c, &exec("b", "c1"), 10, &mut out);
    c.set_origin(&stream, None);
    feed(&mut c, &call("s", "c1"), 0, &mut out);
    c.tick(400_000, &mut out);
    assert!(closed(&out, "s"), "a provider stream's cut attempt: idle");
    assert!(closed(&out, "b"), "its call ran: idle");
    assert!(!closed(&out, "a"), "its tool is running: not idle");
    c.set_origin(&agent, None);
    feed(&mut c, &exec("a", "c1"), 1_000_000, &mut out);
    feed(&mut c, &call("a", "c2"), 1_000_010, &mut out);
    c.tick(1_400_000, &mut out);
    assert!(!closed(&out, "a"), "its second tool is running");
    c.tick(1_000_010 + 10 * 300_000, &mut out);
    assert!(closed(&out, "a"), "ten idle timeouts: the agent went away");
    assert_eq!(c.stats().after_close_events, 0);
}

#[test]
fn a_restored_turn_waits_on_its_tool_and_full_memory_of_inputs_forgets_those_of_no_open_turn() {
    // A checkpoint taken while a tool runs: the restored correlator still knows that the
    // turn's input records executions (an OTLP session's stream, parked while quiet, says so
    // again only at its next record, the execution itself).
    let cfg = idle_5_min();
    let prices = Arc::new(PriceTable::builtin());
    let call = |turn: &str| {
        format!(
            r#"{{"turn":"{turn}","type":"tool_call","attempt":0,"id":"c1","name":"run_tests","args":{{}}}}"#
        )
    };
    let agent: Arc<str> = Arc::from("otlp:codex/s1");
    let other: Arc<str> = Arc::from("cut.sse");
    let mut c = Correlator::new(cfg.clone(), prices.clone());
    let mut out = Vec::new();
    c.input_records_executions(&agent);
    c.set_origin(&agent, None);
    feed(&mut c, &call("a"), 0, &mut out);
    c.set_origin(&other, None);
    feed(&mut c, &call("s"), 0, &mut out);
    let snapshot = c.snapshot();
    let mut c = Correlator::restore(cfg, prices, snapshot);
    c.tick(400_000, &mut out);
    let closed: Vec<&str> = out
        .iter()
        .filter_map(|o| match o {
            Output::TurnClosed(r) => Some(r.turn.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        closed,
        ["s"],
        "restored, the agent's turn still waits on its tool"
    );

    // Full: the inputs no open turn came from are forgotten for a new one; the open turn's
    // input is kept, and streams are told to say so again (the epoch moved).
    for i in 1..MAX_EXEC_INPUTS {
        c.input_records_executions(&Arc::from(format!("done-{i}")));
    }
    assert_eq!(c.exec_inputs.len(), MAX_EXEC_INPUTS);
    let epoch = c.exec_inputs_epoch();
    let new: Arc<str> = Arc::from("otlp:claude-code/s2");
    c.input_records_executions(&new);
    assert!(c.exec_inputs.contains(&new));
    assert!(c.exec_inputs.contains(&agent), "its turn is open");
    assert_eq!(c.exec_inputs.len(), 2);
    assert_eq!(c.exec_inputs_epoch(), epoch + 1);
}

#[test]
fn implicit_retry_and_interleaved_turns() {
    let (out, reports) = run(r#"
{"turn":"x","type":"text","attempt":0,"text":"a"}
{"turn":"y","type":"text","attempt":0,"text":"b"}
{"turn":"x","type":"text","attempt":1,"text":"c"}
{"turn":"y","type":"finish","attempt":0,"reason":"stop"}
{"turn":"x","type":"finish","attempt":1,"reason":"stop"}
"#);
    let x = reports.iter().find(|r| r.turn == "x").unwrap();
    assert_eq!(x.attempts[0].outcome, Outcome::Abandoned);
    assert_eq!(x.retries, 1);
    assert_eq!(
        out.iter()
            .filter(|o| matches!(o, Output::Retry { reason: None, .. }))
            .count(),
        1
    );
    let y = reports.iter().find(|r| r.turn == "y").unwrap();
    assert!(y.findings.is_empty());
}

#[test]
fn late_events_are_counted() {
    let (_, _, c) = run_with(
        cfg(),
        r#"
{"turn":"t","type":"text","attempt":0,"text":"a"}
{"turn":"t","type":"retry","attempt":1}
{"turn":"t","type":"text","attempt":0,"text":"late"}
{"turn":"t","type":"finish","attempt":0,"reason":"stop"}
{"turn":"t","type":"finish","attempt":1,"reason":"stop"}
"#,
    );
    assert_eq!(c.stats().late_events, 2);
}

#[test]
fn idle_timeout_eviction_and_events_after_close() {
    let prices = Arc::new(PriceTable::builtin());
    let mut c = Correlator::new(
        CorrelatorConfig {
            idle_timeout_ms: Some(10_000),
            max_open_turns: 2,
            ..CorrelatorConfig::default()
        },
        prices,
    );
    let mut out = Vec::new();
    let mut skips = SkipCounts::default();
    let mut feed = |c: &mut Correlator, line: &str, now: i64, out: &mut Vec<Output>| {
        if let Ok(NativeLine::Event(ev)) = decode_line(line.as_bytes(), &mut skips) {
            c.observe(&ev, now, out);
        }
    };
    feed(
        &mut c,
        r#"{"turn":"a","type":"text","attempt":0,"text":"x"}"#,
        0,
        &mut out,
    );
    feed(
        &mut c,
        r#"{"turn":"b","type":"text","attempt":0,"text":"x"}"#,
        5_000,
        &mut out,
    );
    c.tick(9_999, &mut out);
    assert_eq!(c.open_turns(), 2);
    // A third turn evicts the least recently active one (a).
    feed(
        &mut c,
        r#"{"turn":"c","type":"text","attempt":0,"text":"x"}"#,
        6_000,
        &mut out,
    );
    assert_eq!(c.open_turns(), 2);
    assert_eq!(c.stats().evicted_turns, 1);
    let evicted = out.iter().find_map(|o| match o {
        Output::TurnClosed(r) => Some(r),
        _ => None,
    });
    assert_eq!(
        evicted.map(|r| (r.turn.as_str(), r.closed_by)),
        Some(("a", CloseReason::Evicted))
    );
    c.tick(15_000, &mut out);
    assert_eq!(c.open_turns(), 1, "b idled out");
    feed(
        &mut c,
        r#"{"turn":"a","type":"text","attempt":0,"text":"late"}"#,
        15_001,
        &mut out,
    );
    assert_eq!(c.stats().after_close_events, 1);
    assert_eq!(c.open_turns(), 1);
}
