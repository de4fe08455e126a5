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

mod render;
mod rng;
mod text;
mod tools;
mod turn;

use render::*;
use rng::*;
use text::*;
use turn::{Scratch, calibrate_break};

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
}

#[cfg(test)]
mod tests;
