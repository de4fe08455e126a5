//! Bounded labels: values over a cap go to `other` and are counted.

use super::*;

#[test]
fn label_cap_overflow_goes_to_other_and_is_counted() {
    let m = Metrics::new(MetricsConfig {
        max_models: 2,
        max_tools: 1,
        ..MetricsConfig::default()
    })
    .unwrap();
    for model in ["a", "b", "c", "d", "a", "c"] {
        m.observe(&retry(model, None));
    }
    let r = |model: &str| {
        m.value(
            "retryscope_retries_total",
            &[UNKNOWN, model, P, UNSPECIFIED],
        )
    };
    assert_eq!(r("a"), Some(2.0));
    assert_eq!(r("b"), Some(1.0));
    assert_eq!(r("c"), None);
    assert_eq!(r("other"), Some(3.0));
    assert_eq!(
        m.value("retryscope_label_overflow_total", &["model"]),
        Some(3.0)
    );
    assert_eq!(
        m.value("retryscope_label_overflow_total", &["tool"]),
        Some(0.0)
    );

    // Missing and empty values are "unknown" (reason: "unspecified"); long ones are cut.
    m.observe(&Output::Retry {
        labels: TurnLabels {
            model: None,
            provider: Some(String::new()),
            agent: Some(" ".into()),
        },
        reason: Some("x".repeat(200)),
    });
    let cut = "x".repeat(MAX_LABEL_CHARS);
    assert_eq!(
        m.value(
            "retryscope_retries_total",
            &[UNKNOWN, UNKNOWN, UNKNOWN, &cut]
        ),
        Some(1.0)
    );

    // Tools: one admitted, the next overflows (findings and executions alike).
    let finding = |tool: &str| {
        Output::Finding(
            Finding::new(FindingKind::EarlyExecution, "t", Some(0), "e".into())
                .with_call(tool, "c1", None),
            TurnLabels {
                model: None,
                provider: None,
                agent: Some("codex".into()),
            },
        )
    };
    m.observe(&finding("refund"));
    m.observe(&finding("delete_everything"));
    let f = |t: &str| {
        m.value(
            "retryscope_findings_total",
            &["codex", "early_execution", "warning", t],
        )
    };
    assert_eq!(f("refund"), Some(1.0));
    assert_eq!(f("other"), Some(1.0));
    assert_eq!(
        m.value("retryscope_label_overflow_total", &["tool"]),
        Some(1.0)
    );
    assert!(!text(&m).contains("delete_everything"));
}

#[test]
fn agents_are_capped_like_every_guarded_label() {
    let m = Metrics::new(MetricsConfig {
        max_agents: 1,
        ..MetricsConfig::default()
    })
    .unwrap();
    for agent in ["gemini-cli", "codex", "gemini-cli"] {
        m.observe(&Output::Retry {
            labels: TurnLabels {
                model: None,
                provider: None,
                agent: Some(agent.into()),
            },
            reason: None,
        });
    }
    let r = |a: &str| {
        m.value(
            "retryscope_retries_total",
            &[a, UNKNOWN, UNKNOWN, UNSPECIFIED],
        )
    };
    assert_eq!(r("gemini-cli"), Some(2.0));
    assert_eq!(r("codex"), None);
    assert_eq!(r(OTHER), Some(1.0));
    assert_eq!(
        m.value("retryscope_label_overflow_total", &["agent"]),
        Some(1.0)
    );
}
