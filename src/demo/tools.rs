//! The tools a synthetic turn calls (reads and writes), the calls it plans for every attempt, and
//! how a call and its execution are rendered.

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tool {
    LookupOrder,
    GetCustomer,
    SearchKb,
    IssueRefund,
    SendEmail,
    UpdateCase,
    CancelSubscription,
}

pub(super) const READ_TOOLS: [Tool; 3] = [Tool::LookupOrder, Tool::GetCustomer, Tool::SearchKb];
pub(super) const WRITE_TOOLS: [Tool; 4] = [
    Tool::IssueRefund,
    Tool::SendEmail,
    Tool::UpdateCase,
    Tool::CancelSubscription,
];

impl Tool {
    pub(super) fn name(self) -> &'static str {
        match self {
            Tool::LookupOrder => "lookup_order",
            Tool::GetCustomer => "get_customer",
            Tool::SearchKb => "search_kb",
            Tool::IssueRefund => "issue_refund",
            Tool::SendEmail => "send_email",
            Tool::UpdateCase => "update_case",
            Tool::CancelSubscription => "cancel_subscription",
        }
    }

    pub(super) fn read(self) -> bool {
        READ_TOOLS.contains(&self)
    }
}

/// A call the turn makes in every attempt (same arguments; new id, key order per attempt).
#[derive(Debug, Clone)]
pub(super) struct PlannedCall {
    pub(super) tool: Tool,
    /// (key, JSON value) pairs.
    pub(super) args: Vec<(&'static str, String)>,
    /// Where in the attempt's fragments the call lands, as a fraction of them.
    pub(super) at: f64,
    /// Rendered length of the arguments, for output-token estimates.
    pub(super) args_len: usize,
    /// The call id of the current attempt.
    pub(super) id: String,
    /// The arguments as rendered for the current attempt.
    pub(super) rendered: String,
}

impl PlannedCall {
    pub(super) fn position(&self, fragments: usize) -> usize {
        ((self.at * fragments as f64).round() as usize).min(fragments)
    }
}

pub(super) fn plan_calls(
    rng: &mut Rng,
    rate: f64,
    scenario: &Scenario,
    calls: &mut Vec<PlannedCall>,
) {
    calls.clear();
    if !rng.chance(rate) {
        return;
    }
    let order = format!("\"ORD-{}\"", scenario.order);
    let email = json_string(CUSTOMERS[scenario.customer].1);
    let roll = rng.below(100);
    let mut tools: Vec<Tool> = Vec::with_capacity(2);
    if roll < 60 {
        tools.push(READ_TOOLS[rng.below(READ_TOOLS.len())]);
    }
    if roll >= 35 {
        tools.push(WRITE_TOOLS[rng.below(WRITE_TOOLS.len())]);
    }
    let mut at = 0.3 + 0.4 * rng.unit();
    for tool in tools {
        let mut args: Vec<(&'static str, String)> = Vec::with_capacity(3);
        match tool {
            Tool::LookupOrder => args.push(("order_id", order.clone())),
            Tool::GetCustomer => args.push(("email", email.clone())),
            Tool::SearchKb => {
                args.push((
                    "query",
                    json_string(KB_QUERIES[rng.below(KB_QUERIES.len())]),
                ));
                args.push(("top_k", rng.range(3, 8).to_string()));
            }
            Tool::IssueRefund => {
                args.push(("order_id", order.clone()));
                let cents = scenario.amount_cents;
                args.push(("amount", format!("{}.{:02}", cents / 100, cents % 100)));
                args.push(("currency", json_string(CURRENCIES[scenario.currency].1)));
                args.push((
                    "reason",
                    json_string(
                        ["damaged", "late_delivery", "wrong_item", "duplicate_charge"]
                            [rng.below(4)],
                    ),
                ));
            }
            Tool::SendEmail => {
                args.push(("to", email.clone()));
                args.push((
                    "template",
                    json_string(
                        ["refund_started", "shipping_update", "case_follow_up"][rng.below(3)],
                    ),
                ));
                args.push(("order_id", order.clone()));
            }
            Tool::UpdateCase => {
                args.push(("case_id", format!("\"CASE-{}\"", scenario.case)));
                args.push((
                    "status",
                    json_string(["pending_customer", "resolved", "escalated"][rng.below(3)]),
                ));
                args.push(("note", json_string(CASE_NOTES[rng.below(CASE_NOTES.len())])));
            }
            Tool::CancelSubscription => {
                let mut id = String::from("\"sub_");
                push_random_id(rng, 10, &mut id);
                id.push('"');
                args.push(("subscription_id", id));
                args.push((
                    "at_period_end",
                    if rng.chance(0.7) { "true" } else { "false" }.to_owned(),
                ));
            }
        }
        let args_len = args
            .iter()
            .map(|(k, v)| k.len() + v.len() + 4)
            .sum::<usize>()
            + 1;
        calls.push(PlannedCall {
            tool,
            args,
            at,
            args_len,
            id: String::new(),
            rendered: String::new(),
        });
        at = (at + 0.1 + 0.2 * rng.unit()).min(1.0);
    }
}

pub(super) fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    push_json_str(&mut out, s);
    out
}

pub(super) fn render_call(
    t: &mut RenderedTurn,
    turn: &str,
    ts: i64,
    attempt: u32,
    call: &mut PlannedCall,
    rng: &mut Rng,
    provider: &str,
) {
    // A new generation: a new call id and its own key order for the same arguments.
    call.id.clear();
    push_call_id(rng, provider, &mut call.id);
    let mut order: [usize; 4] = [0, 1, 2, 3];
    let n = call.args.len().min(order.len());
    for i in (1..n).rev() {
        order.swap(i, rng.below(i + 1));
    }
    call.rendered.clear();
    call.rendered.push('{');
    for (j, &i) in order[..n].iter().enumerate() {
        if j > 0 {
            call.rendered.push(',');
        }
        let (k, v) = &call.args[i];
        call.rendered.push('"');
        call.rendered.push_str(k);
        call.rendered.push_str("\":");
        call.rendered.push_str(v);
    }
    call.rendered.push('}');
    t.open(turn, "tool_call", ts, Some(attempt));
    t.str_field("id", &call.id);
    t.str_field("name", call.tool.name());
    t.buf.push_str(",\"args\":");
    t.buf.push_str(&call.rendered);
    t.close();
}

/// The execution of `call` as the current attempt rendered it.
pub(super) fn render_exec(
    t: &mut RenderedTurn,
    turn: &str,
    ts: i64,
    attempt: u32,
    call: &PlannedCall,
) {
    t.open(turn, "tool_exec", ts, Some(attempt));
    t.str_field("id", &call.id);
    t.str_field("name", call.tool.name());
    t.buf.push_str(",\"args\":");
    t.buf.push_str(&call.rendered);
    if call.tool.read() {
        t.str_field("effect", "read");
    }
    t.str_field("status", "ok");
    t.close();
}
