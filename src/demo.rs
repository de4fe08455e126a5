//! A synthetic, deterministic fleet of agents that stream model turns and retry them mid-stream.
//!
//! This generator feeds two things: the built-in demo source (`retryscope run --demo`, so a new
//! user sees metrics, findings and traces within seconds and with no setup) and the performance
//! benchmark (a realistic large log). It writes native-format (v1) JSON lines, the same lines a
//! real client would log, so everything downstream runs unchanged on them.
//!
//! # What a generated turn looks like
//!
//! `turn_start` (model, provider, agent, session), then per attempt `attempt_start`, about
//! [`FleetConfig::fragments_per_attempt`] `text` fragments, sometimes `tool_call`s (reads such
//! as `lookup_order` with `effect: "read"`, writes such as `issue_refund`), and either `usage` +
//! `finish` or, for an attempt that breaks mid-stream, `error` followed by `retry` for the next
//! attempt. The turn ends with `output` (the text the client committed) and `turn_end`.
//!
//! Each agent runs one of the three client [`Policy`]s from the mid-stream retries article:
//!
//! * [`Policy::Naive`] keeps appending: its `output` is every attempt's streamed text
//!   concatenated, and it executes each call as soon as it is complete, so abandoned attempts'
//!   calls run too (`spliced_text`, `abandoned_tool_executed`, `duplicate_effect`).
//! * [`Policy::Reset`] logs `render_reset` on a retry and commits only the final attempt's
//!   text, but still executes calls as soon as they are complete (abandoned and duplicate
//!   effects, no spliced text).
//! * [`Policy::ResetLateExec`] resets and executes calls only after its attempt's `finish`, so
//!   abandoned attempts' calls never run (no critical finding).
//!
//! A retried attempt is a new generation of the same answer: its text differs a little, it
//! calls the same tools with the same arguments (in a different key order) under new call ids.
//!
//! # Determinism and time
//!
//! All randomness comes from a small SplitMix64 generator seeded by [`FleetConfig::seed`]; the
//! same configuration always yields byte-identical output. Timestamps are event time (integer
//! Unix milliseconds), derived from [`FleetConfig::start_ms`], never from the clock. They are
//! non-decreasing within each turn and across the whole output: up to
//! [`FleetConfig::interleave`] turns are in flight at once and their events are merged in time
//! order, as a collector tailing a busy fleet would see them.

use std::fmt::Write as _;
use std::io::{self, Write};

/// How a client handles a mid-stream retry (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Policy {
    /// Keeps appending text across attempts; executes each call as soon as it is complete.
    Naive,
    /// Resets its renderer on a retry; still executes each call as soon as it is complete.
    Reset,
    /// Resets on a retry and executes calls only after the attempt's `finish`.
    ResetLateExec,
}

impl Policy {
    /// Every policy.
    pub const ALL: [Policy; 3] = [Policy::Naive, Policy::Reset, Policy::ResetLateExec];

    /// A short name (`naive`, `reset`, `reset-late-exec`).
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Naive => "naive",
            Policy::Reset => "reset",
            Policy::ResetLateExec => "reset-late-exec",
        }
    }

    fn resets(self) -> bool {
        !matches!(self, Policy::Naive)
    }

    fn executes_late(self) -> bool {
        matches!(self, Policy::ResetLateExec)
    }
}

/// One agent of the fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentProfile {
    /// Agent name; turn ids are `<name>-<n>`.
    pub name: String,
    /// Model every turn of this agent requests.
    pub model: &'static str,
    /// Provider of that model.
    pub provider: &'static str,
    /// How this agent's client handles retries.
    pub policy: Policy,
}

/// The agents a fleet draws from, in order; fleets with more agents reuse it with a suffix.
const ROSTER: [(&str, &str, &str, Policy); 8] = [
    ("help-desk", "claude-sonnet-4-5", "anthropic", Policy::Naive),
    ("billing", "gpt-4.1", "openai", Policy::Reset),
    (
        "triage",
        "gemini-2.5-flash",
        "gemini",
        Policy::ResetLateExec,
    ),
    ("refunds", "claude-haiku-4-5", "anthropic", Policy::Reset),
    ("outreach", "gpt-4.1-mini", "openai", Policy::Naive),
    ("returns", "gemini-2.5-pro", "gemini", Policy::ResetLateExec),
    (
        "escalations",
        "claude-opus-4-1",
        "anthropic",
        Policy::ResetLateExec,
    ),
    ("kb-search", "gpt-5-mini", "openai", Policy::Naive),
];

/// Settings of a synthetic fleet. Out-of-range values are clamped, never rejected.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetConfig {
    /// Seed of the generator: the same configuration always yields the same bytes.
    pub seed: u64,
    /// Number of agents (each with a name, a model and a policy; at least 1).
    pub agents: usize,
    /// Fraction of attempts that break mid-stream, storms included (0..=1).
    pub retry_rate: f64,
    /// Mean number of `text` fragments of a complete attempt (±20% per attempt).
    pub fragments_per_attempt: usize,
    /// Probability that a turn calls tools (a read, a write, or a read then a write).
    pub tool_call_rate: f64,
    /// Most attempts one turn makes; a storm that exhausts them leaves the turn failed.
    pub max_attempts: u32,
    /// Probability that a turn runs into a retry storm, where most attempts break. Storms are
    /// what exceed the correlator's retry cap; they count towards `retry_rate`.
    pub storm_rate: f64,
    /// Turns in flight at once (their events interleave; at least 1).
    pub interleave: usize,
    /// Event time of the first event (Unix ms).
    pub start_ms: i64,
    /// Mean event-time pause between one turn's end and the next turn in the same slot.
    pub turn_gap_ms: i64,
    /// Stop after this many turns (`None`: an unbounded fleet).
    pub turn_limit: Option<u64>,
}

/// 2026-11-12T10:00:00Z, the day of the article; a fixed start keeps presets deterministic.
const DEFAULT_START_MS: i64 = 1_794_477_600_000;

impl FleetConfig {
    /// The demo preset: 8 agents, 6 turns in flight, one attempt in five broken, tool calls in
    /// most turns and short (~12-fragment) attempts, so spliced text, abandoned and duplicate
    /// effects show up within the first few dozen turns and a storm past the retry cap within
    /// about a hundred. Callers replaying it live may set `start_ms` to the current time.
    pub fn demo(seed: u64) -> Self {
        FleetConfig {
            seed,
            agents: 8,
            retry_rate: 0.2,
            fragments_per_attempt: 12,
            tool_call_rate: 0.6,
            max_attempts: 6,
            storm_rate: 0.02,
            interleave: 6,
            start_ms: DEFAULT_START_MS,
            turn_gap_ms: 400,
            turn_limit: None,
        }
    }

    /// The benchmark preset: a busy production fleet (32 turns in flight, 5% of attempts
    /// broken, rare storms, ~20 fragments per attempt).
    pub fn bench(seed: u64) -> Self {
        FleetConfig {
            seed,
            agents: 8,
            retry_rate: 0.05,
            fragments_per_attempt: 20,
            tool_call_rate: 0.35,
            max_attempts: 6,
            storm_rate: 0.001,
            interleave: 32,
            start_ms: DEFAULT_START_MS,
            turn_gap_ms: 250,
            turn_limit: None,
        }
    }

    fn sanitized(mut self) -> Self {
        self.agents = self.agents.max(1);
        self.retry_rate = prob(self.retry_rate);
        self.fragments_per_attempt = self.fragments_per_attempt.clamp(1, 10_000);
        self.tool_call_rate = prob(self.tool_call_rate);
        self.max_attempts = self.max_attempts.clamp(1, 1_000);
        self.storm_rate = prob(self.storm_rate);
        self.interleave = self.interleave.clamp(1, 100_000);
        self.turn_gap_ms = self.turn_gap_ms.clamp(0, 86_400_000);
        self
    }
}

fn prob(p: f64) -> f64 {
    if p.is_nan() { 0.0 } else { p.clamp(0.0, 1.0) }
}

/// Counters of what a fleet has generated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FleetStats {
    /// Event lines handed out.
    pub events: u64,
    /// Turns begun (their lines may still be in flight).
    pub turns_started: u64,
    /// Turns whose `turn_end` has been handed out.
    pub turns_completed: u64,
}

/// The synthetic fleet: an endless (or [`FleetConfig::turn_limit`]-bounded) source of event
/// lines. See the module docs.
#[derive(Debug)]
pub struct Fleet {
    cfg: FleetConfig,
    rng: Rng,
    agents: Vec<AgentProfile>,
    agent_state: Vec<AgentState>,
    slots: Vec<Slot>,
    /// Break probability of an attempt outside storms, calibrated to `retry_rate`.
    base_break: f64,
    stats: FleetStats,
    /// A temporary cap on `turns_started` (used to write whole turns and drain).
    admit_limit: Option<u64>,
    /// Latest event time handed out: new turns never start before it.
    last_ts: i64,
    scratch: Scratch,
}

#[derive(Debug, Clone, Default)]
struct AgentState {
    turns: u64,
    session: u64,
    session_left: u32,
}

#[derive(Debug, Default)]
struct Slot {
    active: bool,
    free_at: i64,
    turn: RenderedTurn,
}

/// Reusable buffers for building a turn.
#[derive(Debug, Default)]
struct Scratch {
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
    /// A fleet that has generated nothing yet.
    pub fn new(cfg: FleetConfig) -> Self {
        let cfg = cfg.sanitized();
        let mut rng = Rng::new(cfg.seed);
        let agents: Vec<AgentProfile> = (0..cfg.agents)
            .map(|i| {
                let (name, model, provider, policy) = ROSTER[i % ROSTER.len()];
                let round = i / ROSTER.len();
                AgentProfile {
                    name: if round == 0 {
                        name.to_owned()
                    } else {
                        format!("{name}-{}", round + 1)
                    },
                    model,
                    provider,
                    policy,
                }
            })
            .collect();
        let agent_state = vec![AgentState::default(); agents.len()];
        let stagger = (cfg.turn_gap_ms / 2).max(1);
        let slots = (0..cfg.interleave)
            .map(|i| Slot {
                active: false,
                free_at: cfg
                    .start_ms
                    .saturating_add(stagger.saturating_mul(i as i64))
                    .saturating_add(if i == 0 { 0 } else { rng.range(0, stagger) }),
                turn: RenderedTurn::default(),
            })
            .collect();
        let base_break = calibrate_break(cfg.retry_rate, cfg.storm_rate, cfg.max_attempts);
        Fleet {
            last_ts: cfg.start_ms,
            cfg,
            rng,
            agents,
            agent_state,
            slots,
            base_break,
            stats: FleetStats::default(),
            admit_limit: None,
            scratch: Scratch::default(),
        }
    }

    /// The (clamped) configuration.
    pub fn config(&self) -> &FleetConfig {
        &self.cfg
    }

    /// The agents, in roster order.
    pub fn agents(&self) -> &[AgentProfile] {
        &self.agents
    }

    /// What has been generated so far.
    pub fn stats(&self) -> FleetStats {
        self.stats
    }

    /// Turns begun whose last line has not been handed out yet.
    pub fn in_flight(&self) -> usize {
        self.slots.iter().filter(|s| s.active).count()
    }

    /// Append the next event line (no trailing newline) to `buf`. Returns false only when the
    /// fleet is exhausted, which an unbounded fleet never is.
    pub fn next_line(&mut self, buf: &mut String) -> bool {
        self.fill_slots();
        let mut best: Option<(i64, usize)> = None;
        for (i, slot) in self.slots.iter().enumerate() {
            if !slot.active {
                continue;
            }
            if let Some(ts) = slot.turn.next_ts()
                && best.is_none_or(|(b, _)| ts < b)
            {
                best = Some((ts, i));
            }
        }
        let Some((ts, i)) = best else {
            return false;
        };
        let slot = &mut self.slots[i];
        slot.turn.take_line(buf);
        self.stats.events += 1;
        self.last_ts = self.last_ts.max(ts);
        if slot.turn.next_ts().is_none() {
            slot.active = false;
            let gap = self.cfg.turn_gap_ms;
            slot.free_at = ts.saturating_add(self.rng.range(gap / 2, gap + gap / 2));
            self.stats.turns_completed += 1;
        }
        true
    }

    /// Write event lines (newline-terminated) until `n` turns have been completely written,
    /// counting turns already in flight, and nothing else: no turn is left half-written. When
    /// more than `n` turns are in flight, all of them are completed. Returns the lines written.
    pub fn write_turns(&mut self, n: usize, w: &mut impl Write) -> io::Result<u64> {
        let in_flight = self.in_flight() as u64;
        let limit = self
            .stats
            .turns_started
            .saturating_add((n as u64).saturating_sub(in_flight));
        self.write_until(limit, w)
    }

    /// Live replay: write (newline-terminated) every line whose event time has come by
    /// `now_ms`, starting at most `new_turns` new turns, each no earlier than `now_ms`. Lines
    /// are never stamped after the time they are handed out, so a live demo's events (and the
    /// traces and findings made from them) never lie in the future. Returns the lines written.
    pub fn write_due(
        &mut self,
        now_ms: i64,
        new_turns: u64,
        w: &mut impl Write,
    ) -> io::Result<u64> {
        self.last_ts = self.last_ts.max(now_ms);
        self.admit_limit = Some(self.stats.turns_started.saturating_add(new_turns));
        let mut buf = String::new();
        let mut lines = 0u64;
        loop {
            self.fill_slots();
            let next = self
                .slots
                .iter()
                .filter(|s| s.active)
                .filter_map(|s| s.turn.next_ts())
                .min();
            if next.is_none_or(|ts| ts > now_ms) || !self.next_line(&mut buf) {
                break;
            }
            buf.push('\n');
            lines += 1;
        }
        self.admit_limit = None;
        w.write_all(buf.as_bytes()).map(|()| lines)
    }

    /// Write the rest of every turn in flight without starting new ones. Returns the lines
    /// written.
    pub fn drain(&mut self, w: &mut impl Write) -> io::Result<u64> {
        self.write_until(self.stats.turns_started, w)
    }

    fn write_until(&mut self, limit: u64, w: &mut impl Write) -> io::Result<u64> {
        self.admit_limit = Some(limit);
        let mut buf = String::with_capacity(1 << 16);
        let mut lines = 0u64;
        let result = loop {
            if !self.next_line(&mut buf) {
                break w.write_all(buf.as_bytes());
            }
            buf.push('\n');
            lines += 1;
            if buf.len() >= 1 << 16 {
                if let Err(e) = w.write_all(buf.as_bytes()) {
                    break Err(e);
                }
                buf.clear();
            }
        };
        self.admit_limit = None;
        result.map(|()| lines)
    }

    fn can_admit(&self) -> bool {
        let started = self.stats.turns_started;
        self.cfg.turn_limit.is_none_or(|l| started < l)
            && self.admit_limit.is_none_or(|l| started < l)
    }

    fn fill_slots(&mut self) {
        for i in 0..self.slots.len() {
            if self.slots[i].active {
                continue;
            }
            if !self.can_admit() {
                return;
            }
            let start = self.slots[i].free_at.max(self.last_ts);
            let mut turn = std::mem::take(&mut self.slots[i].turn);
            self.build_turn(&mut turn, start);
            self.slots[i].turn = turn;
            self.slots[i].active = true;
            self.stats.turns_started += 1;
        }
    }

    /// Render one whole turn into `t`, starting at event time `start`.
    fn build_turn(&mut self, t: &mut RenderedTurn, start: i64) {
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
fn calibrate_break(target: f64, storm_rate: f64, max_attempts: u32) -> f64 {
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

// ---------------------------------------------------------------------------------------------
// Rendering

/// One turn's lines, rendered ahead and handed out one at a time.
#[derive(Debug, Default)]
struct RenderedTurn {
    buf: String,
    /// (event time, start, end) of each line in `buf`.
    lines: Vec<(i64, usize, usize)>,
    next: usize,
    line_start: usize,
    line_ts: i64,
}

impl RenderedTurn {
    fn clear(&mut self) {
        self.buf.clear();
        self.lines.clear();
        self.next = 0;
    }

    fn next_ts(&self) -> Option<i64> {
        self.lines.get(self.next).map(|l| l.0)
    }

    fn take_line(&mut self, out: &mut String) {
        if let Some(&(_, from, to)) = self.lines.get(self.next) {
            out.push_str(&self.buf[from..to]);
            self.next += 1;
        }
    }

    fn open(&mut self, turn: &str, ty: &str, ts: i64, attempt: Option<u32>) {
        self.line_start = self.buf.len();
        self.line_ts = ts;
        self.buf.push_str("{\"v\":1,\"turn\":");
        push_json_str(&mut self.buf, turn);
        self.buf.push_str(",\"type\":\"");
        self.buf.push_str(ty);
        self.buf.push_str("\",\"ts\":");
        let _ = write!(self.buf, "{ts}");
        if let Some(a) = attempt {
            let _ = write!(self.buf, ",\"attempt\":{a}");
        }
    }

    fn str_field(&mut self, key: &str, value: &str) {
        self.buf.push_str(",\"");
        self.buf.push_str(key);
        self.buf.push_str("\":");
        push_json_str(&mut self.buf, value);
    }

    fn num_field(&mut self, key: &str, value: u64) {
        let _ = write!(self.buf, ",\"{key}\":{value}");
    }

    fn close(&mut self) {
        self.buf.push('}');
        self.lines
            .push((self.line_ts, self.line_start, self.buf.len()));
    }
}

/// Append `s` as a JSON string literal.
fn push_json_str(out: &mut String, s: &str) {
    out.push('"');
    let mut from = 0;
    for (i, b) in s.bytes().enumerate() {
        let esc = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0..=0x1f => "",
            _ => continue,
        };
        // ASCII bytes are always character boundaries.
        out.push_str(&s[from..i]);
        if esc.is_empty() {
            let _ = write!(out, "\\u{:04x}", b);
        } else {
            out.push_str(esc);
        }
        from = i + 1;
    }
    out.push_str(&s[from..]);
    out.push('"');
}

const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

fn push_random_id(rng: &mut Rng, len: usize, out: &mut String) {
    for _ in 0..len {
        out.push(char::from(BASE62[rng.below(BASE62.len())]));
    }
}

fn push_request_id(rng: &mut Rng, provider: &str, out: &mut String) {
    match provider {
        "anthropic" => {
            out.push_str("req_011C");
            push_random_id(rng, 16, out);
        }
        "openai" => {
            out.push_str("req_");
            push_random_id(rng, 20, out);
        }
        _ => push_random_id(rng, 18, out),
    }
}

fn push_call_id(rng: &mut Rng, provider: &str, out: &mut String) {
    match provider {
        "anthropic" => {
            out.push_str("toolu_01");
            push_random_id(rng, 14, out);
        }
        "openai" => {
            out.push_str("call_");
            push_random_id(rng, 16, out);
        }
        _ => {
            out.push_str("fc_");
            push_random_id(rng, 12, out);
        }
    }
}

fn finish_reason(provider: &str, called: bool) -> &'static str {
    match (provider, called) {
        ("anthropic", true) => "tool_use",
        ("anthropic", false) => "end_turn",
        ("openai", true) => "tool_calls",
        ("openai", false) => "stop",
        _ => "STOP",
    }
}

/// (retry reason, error message, error code): how a stream breaks, and why it is retried.
const ERRORS: [(&str, &str, &str); 5] = [
    ("connection_reset", "connection reset by peer", "ECONNRESET"),
    (
        "connection_reset",
        "stream closed before message_stop",
        "stream_closed",
    ),
    ("overloaded", "Overloaded", "overloaded_error"),
    ("timeout", "no data received for 30s", "ETIMEDOUT"),
    ("rate_limited", "rate limit exceeded, retry after 2s", "429"),
];

#[allow(clippy::too_many_arguments)]
fn render_usage(
    t: &mut RenderedTurn,
    turn: &str,
    ts: i64,
    attempt: u32,
    rng: &mut Rng,
    agent_index: usize,
    agent: &AgentProfile,
    out_chars: usize,
) {
    let input = 1_200 + 700 * (agent_index as u64 % 8) + rng.below(2_500) as u64;
    let mut output = (out_chars as u64) / 4 + rng.below(24) as u64;
    let reasoning = if agent.model.starts_with("gpt-5") || agent.model.ends_with("-pro") {
        rng.range(40, 600) as u64
    } else {
        0
    };
    output += reasoning;
    t.open(turn, "usage", ts, Some(attempt));
    t.num_field("input_tokens", input);
    t.num_field("output_tokens", output);
    if rng.chance(0.7) {
        t.num_field(
            "cached_input_tokens",
            input * rng.range(40, 85) as u64 / 100,
        );
    }
    if reasoning > 0 {
        t.num_field("reasoning_tokens", reasoning);
    }
    t.close();
}

// ---------------------------------------------------------------------------------------------
// Tools

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tool {
    LookupOrder,
    GetCustomer,
    SearchKb,
    IssueRefund,
    SendEmail,
    UpdateCase,
    CancelSubscription,
}

const READ_TOOLS: [Tool; 3] = [Tool::LookupOrder, Tool::GetCustomer, Tool::SearchKb];
const WRITE_TOOLS: [Tool; 4] = [
    Tool::IssueRefund,
    Tool::SendEmail,
    Tool::UpdateCase,
    Tool::CancelSubscription,
];

impl Tool {
    fn name(self) -> &'static str {
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

    fn read(self) -> bool {
        READ_TOOLS.contains(&self)
    }
}

/// A call the turn makes in every attempt (same arguments; new id, key order per attempt).
#[derive(Debug, Clone)]
struct PlannedCall {
    tool: Tool,
    /// (key, JSON value) pairs.
    args: Vec<(&'static str, String)>,
    /// Where in the attempt's fragments the call lands, as a fraction of them.
    at: f64,
    /// Rendered length of the arguments, for output-token estimates.
    args_len: usize,
    /// The call id of the current attempt.
    id: String,
    /// The arguments as rendered for the current attempt.
    rendered: String,
}

impl PlannedCall {
    fn position(&self, fragments: usize) -> usize {
        ((self.at * fragments as f64).round() as usize).min(fragments)
    }
}

fn plan_calls(rng: &mut Rng, rate: f64, scenario: &Scenario, calls: &mut Vec<PlannedCall>) {
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

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    push_json_str(&mut out, s);
    out
}

fn render_call(
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
fn render_exec(t: &mut RenderedTurn, turn: &str, ts: i64, attempt: u32, call: &PlannedCall) {
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

// ---------------------------------------------------------------------------------------------
// Text

/// What one turn is about: every attempt of it talks about the same customer, order and sums.
#[derive(Debug, Clone)]
struct Scenario {
    customer: usize,
    order: u32,
    amount_cents: u32,
    currency: usize,
    product: usize,
    days: u32,
    case: u32,
    opening: usize,
}

const CUSTOMERS: [(&str, &str); 12] = [
    ("Zoë", "zoe.martin@example.com"),
    ("José", "jose.alvarez@example.org"),
    ("Björn", "bjorn.eriksson@example.se"),
    ("Siobhán", "siobhan.kelly@example.ie"),
    ("Łukasz", "lukasz.wojcik@example.pl"),
    ("Mei", "mei.chen@example.com"),
    ("Priya", "priya.raman@example.in"),
    ("Ngozi", "ngozi.okafor@example.ng"),
    ("Tom", "tom@example.com"),
    ("Ana", "ana.souza@example.br"),
    ("Kenji", "kenji.tanaka@example.jp"),
    ("Fatima", "fatima.zahra@example.ma"),
];

/// (symbol, ISO code).
const CURRENCIES: [(&str, &str); 3] = [("$", "USD"), ("€", "EUR"), ("£", "GBP")];

const PRODUCTS: [&str; 9] = [
    "\"The Left Hand of Darkness\" (hardcover)",
    "\"Cien años de soledad\"",
    "the café au lait mug",
    "\"ノルウェイの森\" (paperback)",
    "a 3-pack of A5 notebooks",
    "\"Der Zauberberg\"",
    "the bookmark set",
    "\"L’Étranger\" (pocket edition)",
    "your e-reader sleeve",
];

const KB_QUERIES: [&str; 4] = [
    "return policy damaged items",
    "refund timeline gift card",
    "international shipping customs",
    "cancel subscription mid-cycle",
];

const CASE_NOTES: [&str; 5] = [
    "customer reports damaged spine",
    "refund requested via chat",
    "asked for \"priority\" handling",
    "courier lost parcel — reorder",
    "Retoure angefragt (Kunde in München)",
];

const OPENINGS: [&str; 8] = [
    "Thanks for your patience, {name}. ",
    "Hi {name}, I looked into order {order}. ",
    "Checking order {order} now. ",
    "Sorry about the trouble with {product}. ",
    "Hello {name} — thanks for reaching out. ",
    "Let me check what happened with {order}. ",
    "Good news, {name}: I found your order. ",
    "I understand, {name}. Let’s sort this out. ",
];

const BODY: [&str; 31] = [
    "The order shipped on the 4th and was marked delivered {days} days later. ",
    "Our records show {product} left the warehouse in good condition. ",
    "I can see the payment of {amount} was captured twice, so one charge will be reversed. ",
    "A full refund of {amount} has been requested and should reach your card within 5–7 business days. ",
    "I have attached a prepaid return label to case {case}. ",
    "Please keep the original packaging until the courier collects the parcel. ",
    "The courier notes say: \"left at front door, no signature\". ",
    "If the item arrived damaged, a photo of the box helps us claim it from the carrier. ",
    "Your subscription renews on the 1st; cancelling now keeps access until then. ",
    "I checked the knowledge base article on returns (policy v3.2). ",
    "Items bought during the sale can be returned within {days} days. ",
    "The replacement will ship from our Köln warehouse tomorrow morning. ",
    "I’ve updated case {case} with these details so any colleague can pick it up. ",
    "You will get a confirmation email at {email} shortly. ",
    "Tracking currently shows the parcel \"in transit\" at the regional hub. ",
    "Unfortunately {product} is out of stock until next month. ",
    "We can offer a store credit of {amount} instead, if you prefer. ",
    "There is no fee for the exchange. ",
    "I’ve flagged this for our billing team with priority \"high\". ",
    "The invoice for {order} lists 2 items; one is still on back-order. ",
    "Note: refunds to gift cards can take up to {days} days. ✓ ",
    "For reference, the file is stored under returns\\2026\\{case}. ",
    "The warehouse team in Zürich confirmed the package weight matched the invoice. ",
    "Here is what happens next:\n- the carrier picks up the parcel\n- we inspect it\n- the refund is released\n",
    "Summary:\n1. refund {amount}\n2. return label for {order}\n",
    "Your order contained {product} and a gift note reading \"Happy birthday! 🎉\". ",
    "ご不便をおかけして申し訳ありません。",
    "Merci pour votre patience — nous traitons la demande. ",
    "The delivery address on file ends in “Straße 12”. ",
    "I could not find a second order under {email}. ",
    "Shipping to Norway adds 2–3 days because of customs. ",
];

const CLOSINGS: [&str; 5] = [
    "Is there anything else I can help with?",
    "Let me know if you have any other questions, {name}.",
    "Thanks again for shopping with us!",
    "I’ll keep the case open for another {days} days.",
    "Have a great day 🙂",
];

impl Scenario {
    fn draw(rng: &mut Rng) -> Self {
        Scenario {
            customer: rng.below(CUSTOMERS.len()),
            order: rng.range(1_000, 99_999) as u32,
            amount_cents: rng.range(499, 25_000) as u32,
            currency: rng.below(CURRENCIES.len()),
            product: rng.below(PRODUCTS.len()),
            days: rng.range(2, 30) as u32,
            case: rng.range(10_000, 99_999) as u32,
            opening: rng.below(OPENINGS.len()),
        }
    }

    /// Compose one attempt's answer of about `target` bytes into `out`. Retries often open
    /// the same way as the first attempt and then say things a little differently.
    fn compose(&self, rng: &mut Rng, attempt: u32, target: usize, out: &mut String) {
        out.clear();
        let opening = if attempt == 0 || rng.chance(0.6) {
            self.opening
        } else {
            rng.below(OPENINGS.len())
        };
        self.expand(OPENINGS[opening], out);
        let closing = CLOSINGS[rng.below(CLOSINGS.len())];
        while out.len() + closing.len() < target {
            if rng.chance(0.06) {
                out.push_str("\n\n");
            }
            self.expand(BODY[rng.below(BODY.len())], out);
        }
        self.expand(closing, out);
    }

    fn expand(&self, template: &str, out: &mut String) {
        let mut rest = template;
        while let Some(open) = rest.find('{') {
            out.push_str(&rest[..open]);
            let after = &rest[open + 1..];
            let Some(close) = after.find('}') else {
                out.push_str(&rest[open..]);
                return;
            };
            match &after[..close] {
                "name" => out.push_str(CUSTOMERS[self.customer].0),
                "email" => out.push_str(CUSTOMERS[self.customer].1),
                "order" => {
                    let _ = write!(out, "ORD-{}", self.order);
                }
                "amount" => {
                    let _ = write!(
                        out,
                        "{}{}.{:02}",
                        CURRENCIES[self.currency].0,
                        self.amount_cents / 100,
                        self.amount_cents % 100
                    );
                }
                "product" => out.push_str(PRODUCTS[self.product]),
                "days" => {
                    let _ = write!(out, "{}", self.days);
                }
                "case" => {
                    let _ = write!(out, "CASE-{}", self.case);
                }
                other => {
                    out.push('{');
                    out.push_str(other);
                    out.push('}');
                }
            }
            rest = &after[close + 1..];
        }
        out.push_str(rest);
    }
}

/// Cut `text` into about `n` fragments of similar length (streams split words anywhere, but
/// never inside a character).
fn cut_fragments(rng: &mut Rng, text: &str, n: usize, cuts: &mut Vec<(usize, usize)>) {
    cuts.clear();
    let len = text.len();
    if len == 0 {
        return;
    }
    let n = n.clamp(1, len);
    let jitter = (len / n / 3) as i64;
    let mut prev = 0;
    for j in 1..n {
        let ideal = (j * len / n) as i64 + rng.range(-jitter, jitter);
        let mut pos = usize::try_from(ideal).unwrap_or(0).clamp(prev + 1, len);
        while pos < len && !text.is_char_boundary(pos) {
            pos += 1;
        }
        if pos >= len {
            break;
        }
        cuts.push((prev, pos));
        prev = pos;
    }
    cuts.push((prev, len));
}

// ---------------------------------------------------------------------------------------------
// Randomness

/// SplitMix64 (Steele, Lea and Flood): tiny, fast, and good enough for synthetic data.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }

    /// Uniform in `lo..=hi` (`lo` when the range is empty).
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        if hi <= lo {
            return lo;
        }
        let span = (hi as i128 - lo as i128 + 1) as u128;
        lo + ((u128::from(self.next_u64()) * span) >> 64) as i64
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_round_trip_through_serde() {
        for s in [
            "plain",
            "q\"b\\s",
            "nl\n\r\ttab",
            "\u{1}\u{1f}",
            "é—ノ🎉",
            "",
        ] {
            let mut out = String::new();
            push_json_str(&mut out, s);
            assert_eq!(
                serde_json::from_str::<String>(&out).ok().as_deref(),
                Some(s)
            );
        }
    }

    #[test]
    fn fragments_cover_the_text_on_character_boundaries() {
        let mut rng = Rng::new(1);
        let mut cuts = Vec::new();
        let text = "ご不便をおかけして申し訳ありません。Köln — \"ok\" 🎉 and more ASCII text here";
        for n in [1, 3, 10, 40, 1_000] {
            cut_fragments(&mut rng, text, n, &mut cuts);
            let joined: String = cuts.iter().map(|&(a, b)| &text[a..b]).collect();
            assert_eq!(joined, text);
            assert!(cuts.iter().all(|&(a, b)| a < b));
            assert!(cuts.len() <= n);
        }
    }

    #[test]
    fn calibration_counts_storms_towards_the_rate() {
        let q = calibrate_break(0.05, 0.001, 6);
        assert!(q > 0.0 && q < 0.05, "{q}");
        assert_eq!(calibrate_break(0.0, 0.5, 6), 0.0);
        assert_eq!(calibrate_break(1.0, 0.0, 6), 1.0);
        assert!((calibrate_break(0.3, 0.0, 1) - 0.3).abs() < 1e-9);
    }

    #[test]
    fn live_replay_never_stamps_a_line_after_it_is_handed_out() {
        let mut fleet = Fleet::new(FleetConfig::demo(7));
        let mut now = 1_800_000_000_000i64;
        let mut seen = 0;
        for _ in 0..400 {
            let mut out = Vec::new();
            fleet.write_due(now, 1, &mut out).unwrap();
            for line in String::from_utf8(out).unwrap().lines() {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                let ts = v["ts"].as_i64().unwrap();
                assert!(
                    ts <= now,
                    "line stamped {} ms after it was handed out",
                    ts - now
                );
                assert!(
                    ts >= now - 60_000,
                    "line stamped {} ms in the past",
                    now - ts
                );
                seen += 1;
            }
            now += 50;
        }
        assert!(seen > 100, "{seen} lines in 20 s");
        assert!(fleet.stats().turns_completed > 5);
    }

    #[test]
    fn rng_ranges_stay_in_bounds() {
        let mut rng = Rng::new(9);
        for _ in 0..10_000 {
            let x = rng.range(-3, 3);
            assert!((-3..=3).contains(&x));
            assert!(rng.below(7) < 7);
            let u = rng.unit();
            assert!((0.0..1.0).contains(&u));
        }
        assert_eq!(rng.range(5, 5), 5);
        assert_eq!(rng.below(0), 0);
    }
}
