//! Placing an execution whose call id the proxy never saw streamed.
//!
//! Owns: the calls each turn's attempts streamed (tool name and effect key, bounded), and the
//! placement of a tool result that names no streamed id: by tool and canonical arguments
//! when the client's history holds the call's arguments, else (a call the history does not
//! show) on the oldest unexecuted call of that tool the history does not keep. The rules are
//! the core's (`correlate::attribute`); this module only gives them the calls seen on the
//! wire. gemini-cli is the case in point: the Gemini API streams `functionCall` without ids,
//! gemini-cli makes up its own (`run_shell_command__run_shell_command_<ms>_<n>`), and after a
//! retry its next request answers the abandoned attempt's call and the retry's, while its
//! history shows only the retry's call.

use retryscope_core::correlate::attribute::{
    AttemptCalls, Attribution, attribute_exec, attribute_unkept,
};
use retryscope_core::effect::{canonical_args, effect_key};

/// Calls remembered per turn (beyond this, a turn's later calls are placed as before: on the
/// newest attempt by the correlator).
pub(super) const MAX_SEEN_CALLS: usize = 256;

/// The calls one turn's attempts streamed.
#[derive(Debug, Default)]
pub(super) struct Seen {
    attempts: Vec<SeenAttempt>,
    calls: usize,
}

#[derive(Debug)]
struct SeenAttempt {
    number: u32,
    calls: Vec<SeenCall>,
}

#[derive(Debug)]
struct SeenCall {
    id: String,
    name: String,
    key: String,
    executed: bool,
}

impl AttemptCalls for SeenAttempt {
    fn number(&self) -> u32 {
        self.number
    }

    fn calls(&self) -> impl Iterator<Item = (&str, &str, &str)> {
        self.calls
            .iter()
            .map(|c| (c.id.as_str(), c.name.as_str(), c.key.as_str()))
    }

    fn executed(&self, call_id: &str) -> bool {
        self.calls.iter().any(|c| c.id == call_id && c.executed)
    }
}

/// The effect key of a call of `turn` (the correlator's, so both agree on "the same call").
pub(super) fn key_of(turn: &str, name: &str, args: Option<&str>) -> String {
    effect_key(turn, name, &canonical_args(args), None)
}

impl Seen {
    /// Attempt `attempt` of `turn` streamed a complete call.
    pub(super) fn record(
        &mut self,
        turn: &str,
        attempt: u32,
        id: &str,
        name: &str,
        args: Option<&str>,
    ) {
        if id.is_empty() || self.calls >= MAX_SEEN_CALLS {
            return;
        }
        let pos = self.attempts.partition_point(|a| a.number < attempt);
        if self.attempts.get(pos).is_none_or(|a| a.number != attempt) {
            self.attempts.insert(
                pos,
                SeenAttempt {
                    number: attempt,
                    calls: Vec::new(),
                },
            );
        }
        let a = &mut self.attempts[pos];
        if a.calls.iter().any(|c| c.id == id) {
            return;
        }
        self.calls += 1;
        a.calls.push(SeenCall {
            id: id.to_owned(),
            name: name.to_owned(),
            key: key_of(turn, name, args),
            executed: false,
        });
    }

    /// The call `id` of attempt `attempt` was executed (placed by its own id).
    pub(super) fn mark(&mut self, attempt: u32, id: &str) {
        if let Some(c) = self
            .attempts
            .iter_mut()
            .filter(|a| a.number == attempt)
            .flat_map(|a| a.calls.iter_mut())
            .find(|c| c.id == id)
        {
            c.executed = true;
        }
    }

    /// Place an execution of `name` whose id was never streamed: by its arguments (raw JSON)
    /// when known, else among the calls the kept history does not show (`kept`: their effect
    /// keys). The call it is placed on counts as executed from now on. `None`: no streamed
    /// call fits.
    pub(super) fn place(
        &mut self,
        turn: &str,
        name: &str,
        args: Option<&str>,
        kept: &[String],
    ) -> Option<Attribution> {
        let found = match args {
            Some(args) => Some(attribute_exec(turn, &self.attempts, "", name, Some(args)))
                .filter(|a| a.call_id.is_some()),
            None => attribute_unkept(&self.attempts, name, kept),
        }?;
        if let Some(id) = &found.call_id {
            self.mark(found.attempt, id);
        }
        Some(found)
    }
}

#[cfg(test)]
mod tests;
