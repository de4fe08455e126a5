//! Billed usage and cost: an abandoned attempt's estimate counted as waste, no
//! negative zero.

use super::*;

#[test]
fn abandoned_attempt_is_billed_by_estimate_and_counted_as_waste() {
    let (_, reports) = run(LATE);
    let r = &reports[0];
    let a0 = &r.attempts[0];
    assert_eq!(a0.usage.source, UsageSource::Estimated);
    // Input from attempt 1's report; output from the 42 characters of text.
    assert_eq!(a0.usage.tokens.input_tokens, 1250);
    assert_eq!(a0.usage.tokens.cached_input_tokens, 1024);
    assert!(a0.usage.tokens.output_tokens >= 42 / 4);
    assert_eq!(r.attempts[1].usage.source, UsageSource::Reported);
    let c0 = a0.cost_usd.expect("claude-sonnet-4-5 is priced");
    let c1 = r.attempts[1].cost_usd.expect("priced");
    assert!(c0 > 0.0 && c1 > 0.0);
    assert!((r.cost_usd - (c0 + c1)).abs() < 1e-12);
    assert!((r.wasted_cost_usd - c0).abs() < 1e-12);
}

#[test]
fn no_wasted_spend_is_positive_zero_not_negative_zero() {
    let (_, reports) = run(r#"
{"turn":"t","type":"finish","attempt":0,"reason":"stop"}
"#);
    let r = &reports[0];
    assert!(
        r.wasted_cost_usd.is_sign_positive(),
        "{}",
        r.wasted_cost_usd
    );
    assert!(r.cost_usd.is_sign_positive(), "{}", r.cost_usd);
}
