//! One generated turn, whole: its agent and session, the attempts and where they break (a
//! retry storm now and then; outside storms a break rate calibrated so that the share of
//! broken attempts is `retry_rate`), each attempt's text, calls and executions as its
//! agent's policy orders them, its usage, finish or error, then the turn's output and end.

use std::fmt::Write as _;

use super::render::*;
use super::text::*;
use super::tools::*;
use super::{Fleet, Policy};

/// Reusable buffers for building a turn.
#[derive(Debug, Default)]
pub(super) struct Scratch {
    turn_id: String,
    text: String,
    output: String,
    cuts: Vec<(usize, usize)>,
    calls: Vec<PlannedCall>,
}

/// Probability that an attempt breaks during a retry storm.
const STORM_BREAK: f64 = 0.85;
/// Mean bytes of text per fragment the composer aims at.
const FRAGMENT_BYTES: usize = 28;

impl Fleet {
    /// Render one whole turn into `t`, starting at event time `start`.
    pub(super) fn build_turn(&mut self, t: &mut RenderedTurn, start: i64) {
        t.clear();
        let rng = &mut self.rng;
        let s = &mut self.scratch;
        let a = rng.below(self.agents.len());
        let agent = &self.agents[a];
        let state = &mut self.agent_state[a];
        state.turns += 1;
        if state.session_left == 0 {
            state.session = rng.next_u64();
            state.session_left = rng.range(3, 12) as u32;
        }
        state.session_left -= 1;
        s.turn_id.clear();
        let _ = write!(s.turn_id, "{}-{}", agent.name, state.turns);
        let turn_id = s.turn_id.as_str();
        let policy = agent.policy;
        let scenario = Scenario::draw(rng);
        plan_calls(rng, self.cfg.tool_call_rate, &scenario, &mut s.calls);

        let mut ts = start;
        t.open(turn_id, "turn_start", ts, None);
        t.str_field("model", agent.model);
        t.str_field("provider", agent.provider);
        t.str_field("agent", &agent.name);
        t.buf.push_str(",\"session\":\"sess-");
        let _ = write!(t.buf, "{:08x}", state.session >> 32);
        t.buf.push('"');
        t.close();

        let storm = rng.chance(self.cfg.storm_rate);
        let p_break = if storm { STORM_BREAK } else { self.base_break };
        let mut completed = false;
        let mut reason: &str = "";
        s.output.clear();
        for k in 0..self.cfg.max_attempts {
            if k > 0 {
                ts += 250i64.saturating_mul(1 << k.min(5)) + rng.range(0, 400);
                t.open(turn_id, "retry", ts, Some(k));
                t.str_field("reason", reason);
                t.close();
                if policy.resets() {
                    ts += rng.range(0, 1);
                    t.open(turn_id, "render_reset", ts, Some(k));
                    t.close();
                }
            }
            ts += rng.range(2, 20);
            t.open(turn_id, "attempt_start", ts, Some(k));
            t.buf.push_str(",\"request_id\":\"");
            push_request_id(rng, agent.provider, &mut t.buf);
            t.buf.push('"');
            t.close();

            // The attempt's whole answer, cut into fragments; a break streams only a prefix.
            let mean = self.cfg.fragments_per_attempt;
            let spread = mean / 5;
            let frags = rng.range((mean - spread) as i64, (mean + spread) as i64) as usize;
            scenario.compose(rng, k, frags * FRAGMENT_BYTES, &mut s.text);
            cut_fragments(rng, &s.text, frags, &mut s.cuts);
            let n = s.cuts.len();
            let breaks = rng.chance(p_break);
            let stop = if breaks && n >= 2 {
                rng.range(1, n as i64 - 1) as usize
            } else {
                n
            };
            let mut streamed_end = 0;
            let mut next_call = 0;
            ts += rng.range(250, 1200); // time to first token
            for i in 0..=stop {
                while next_call < s.calls.len() && s.calls[next_call].position(n) <= i {
                    let call = &mut s.calls[next_call];
                    ts += rng.range(20, 120);
                    render_call(t, turn_id, ts, k, call, rng, agent.provider);
                    if !policy.executes_late() {
                        ts += rng.range(60, 700);
                        render_exec(t, turn_id, ts, k, call);
                    }
                    next_call += 1;
                }
                if i == stop {
                    break;
                }
                ts += rng.range(10, 70);
                let (from, to) = s.cuts[i];
                t.open(turn_id, "text", ts, Some(k));
                t.buf.push_str(",\"text\":");
                push_json_str(&mut t.buf, &s.text[from..to]);
                t.close();
                streamed_end = to;
            }
            let streamed = &s.text[..streamed_end];
            let args_chars: usize = s.calls[..next_call].iter().map(|c| c.args_len).sum();
            if breaks {
                if rng.chance(0.1) {
                    // Some stacks report usage before the stream dies.
                    ts += rng.range(1, 10);
                    render_usage(
                        t,
                        turn_id,
                        ts,
                        k,
                        rng,
                        a,
                        agent,
                        streamed.len() + args_chars,
                    );
                }
                ts += rng.range(50, 2500);
                let (r, message, code) = ERRORS[rng.below(ERRORS.len())];
                reason = r;
                t.open(turn_id, "error", ts, Some(k));
                t.str_field("message", message);
                t.str_field("code", code);
                t.close();
                if policy == Policy::Naive {
                    s.output.push_str(streamed);
                }
                continue;
            }
            ts += rng.range(1, 15);
            render_usage(
                t,
                turn_id,
                ts,
                k,
                rng,
                a,
                agent,
                streamed.len() + args_chars,
            );
            ts += rng.range(0, 3);
            t.open(turn_id, "finish", ts, Some(k));
            t.str_field("reason", finish_reason(agent.provider, !s.calls.is_empty()));
            t.close();
            if policy.executes_late() {
                for call in &s.calls {
                    ts += rng.range(60, 700);
                    render_exec(t, turn_id, ts, k, call);
                }
            }
            if policy == Policy::Naive {
                s.output.push_str(streamed);
            } else {
                s.output.clear();
                s.output.push_str(streamed);
            }
            completed = true;
            break;
        }
        if completed {
            ts += rng.range(1, 10);
            t.open(turn_id, "output", ts, None);
            t.buf.push_str(",\"text\":");
            push_json_str(&mut t.buf, &s.output);
            t.close();
        }
        ts += rng.range(1, 5);
        t.open(turn_id, "turn_end", ts, None);
        t.str_field("status", if completed { "ok" } else { "error" });
        t.close();
    }
}

/// The per-attempt break probability outside storms that makes the overall fraction of broken
/// attempts (storms included) equal `target`.
pub(super) fn calibrate_break(target: f64, storm_rate: f64, max_attempts: u32) -> f64 {
    let m = max_attempts.max(1);
    // Expected attempts per turn when each breaks with probability p: sum of p^k, k < m.
    let attempts = |p: f64| (0..m).fold((0.0, 1.0), |(sum, pk), _| (sum + pk, pk * p)).0;
    let rate = |q: f64| {
        let (aq, as_) = (attempts(q), attempts(STORM_BREAK));
        let broken = (1.0 - storm_rate) * q * aq + storm_rate * STORM_BREAK * as_;
        broken / ((1.0 - storm_rate) * aq + storm_rate * as_)
    };
    if rate(0.0) >= target {
        return 0.0;
    }
    if rate(1.0) <= target {
        return 1.0;
    }
    let (mut lo, mut hi) = (0.0, 1.0);
    for _ in 0..60 {
        let mid = (lo + hi) / 2.0;
        if rate(mid) < target {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (lo + hi) / 2.0
}
