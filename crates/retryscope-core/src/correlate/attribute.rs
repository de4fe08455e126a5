//! Attributing an execution to the call that produced it, when the client did not say which
//! attempt that was.
//!
//! By call id first: the newest attempt holding a call with the execution's id. Clients that
//! log executions without call ids (gemini-cli's `tool_call` telemetry has only the tool name
//! and its arguments), or with ids that match no call, are matched by content: the call with
//! the same tool name and canonical arguments (the same unstepped effect key). When several
//! attempts hold such a call (a retry usually asks again for the same thing), the newest
//! attempt's call that has not been executed yet wins, then older ones: one execution is
//! read as the surviving attempt's, and a second identical execution as the abandoned
//! attempt's. A call that does not exist yet cannot have been executed, so an execution seen
//! before the retry's call is the earlier attempt's. With no match, the execution belongs to
//! the newest attempt.
//!
//! An execution known by neither (its id was made up by the client, its arguments are not in
//! the input: gemini-cli answers an abandoned attempt's call in its next request, whose
//! history shows only the retry's call) is the result of a call the client received but did
//! not keep: [`attribute_unkept`] places it on the oldest unexecuted call of that tool whose
//! arguments the kept history does not show (then on any unexecuted call of that tool).
//!
//! Both work on any [`AttemptCalls`]: the correlator's attempts, and the proxy's record of
//! the calls it saw streamed.

use super::attempt::AttemptState;
use crate::effect::{canonical_args, effect_key};

/// What attribution reads of an attempt: its number, its calls, which ones ran.
pub trait AttemptCalls {
    /// The attempt number.
    fn number(&self) -> u32;
    /// Its complete calls as `(id, tool name, unstepped effect key)`, in order.
    fn calls(&self) -> impl Iterator<Item = (&str, &str, &str)>;
    /// Whether the call with this id has an execution already.
    fn executed(&self, call_id: &str) -> bool;
}

impl AttemptCalls for AttemptState {
    fn number(&self) -> u32 {
        self.number
    }

    fn calls(&self) -> impl Iterator<Item = (&str, &str, &str)> {
        self.calls
            .iter()
            .map(|c| (&*c.id, &*c.name, &*c.effect_key))
    }

    fn executed(&self, call_id: &str) -> bool {
        self.execs.iter().any(|e| e.id == call_id)
    }
}

/// Where an execution without an explicit attempt belongs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attribution {
    /// The attempt number.
    pub attempt: u32,
    /// The id of the call it was matched to by content, when its own id matched no call.
    pub call_id: Option<String>,
}

/// Attribute an execution of `name` with raw arguments `args` and call id `id`.
pub fn attribute_exec<A: AttemptCalls>(
    turn: &str,
    attempts: &[A],
    id: &str,
    name: &str,
    args: Option<&str>,
) -> Attribution {
    if let Some(a) = attempts
        .iter()
        .rev()
        .find(|a| a.calls().any(|(c, _, _)| c == id))
    {
        return Attribution {
            attempt: a.number(),
            call_id: None,
        };
    }
    let newest = Attribution {
        attempt: attempts.last().map_or(0, AttemptCalls::number),
        call_id: None,
    };
    let Some(args) = args else {
        return newest;
    };
    let key = effect_key(turn, name, &canonical_args(Some(args)), None);
    let mut fallback = None;
    for a in attempts.iter().rev() {
        for (call, _, _) in a.calls().filter(|(_, _, k)| *k == key) {
            let found = Attribution {
                attempt: a.number(),
                call_id: Some(call.to_owned()),
            };
            if !a.executed(call) {
                return found;
            }
            fallback.get_or_insert(found);
        }
    }
    fallback.unwrap_or(newest)
}

/// Attribute an execution of `name` known by neither id nor arguments, given the effect keys
/// of the calls the client's history kept (`kept`): the oldest unexecuted call of that tool
/// the history does not show, else the oldest unexecuted call of that tool. `None` when every
/// call of that tool ran already (or there is none).
pub fn attribute_unkept<A: AttemptCalls>(
    attempts: &[A],
    name: &str,
    kept: &[String],
) -> Option<Attribution> {
    let open = || {
        attempts.iter().flat_map(|a| {
            a.calls()
                .filter(move |(c, n, _)| *n == name && !a.executed(c))
                .map(move |(c, _, k)| (a.number(), c, k))
        })
    };
    open()
        .find(|(_, _, k)| !kept.iter().any(|x| x == k))
        .or_else(|| open().next())
        .map(|(attempt, call, _)| Attribution {
            attempt,
            call_id: Some(call.to_owned()),
        })
}

#[cfg(test)]
mod tests {
    use super::super::attempt::{CallState, ExecState};
    use super::super::intern::Interner;
    use super::*;

    fn attempt(n: u32, calls: &[(&str, &str)], interner: &mut Interner) -> AttemptState {
        let mut a = AttemptState::new(n, 0);
        for (id, args) in calls {
            let canonical = canonical_args(Some(args));
            a.calls.push(CallState {
                id: (*id).into(),
                name: interner.get("shell"),
                effect_key: effect_key("t", "shell", &canonical, None).into(),
                canonical_args: Some(canonical.into()),
            });
        }
        a
    }

    fn exec(a: &mut AttemptState, id: &str, interner: &mut Interner) {
        a.execs.push(ExecState {
            id: id.to_owned(),
            name: interner.get("shell"),
            effect_key: None,
            step: None,
            read: false,
            status: None,
            ts_ms: 0,
            flagged_abandoned: false,
            stopped: None,
            result: None,
        });
    }

    #[test]
    fn by_id_then_by_content_then_newest() {
        let mut i = Interner::default();
        let attempts = [
            attempt(0, &[("c1", r#"{"cmd":"touch a0"}"#)], &mut i),
            attempt(1, &[("c7", r#"{"cmd":"touch a1"}"#)], &mut i),
        ];
        let at = |id: &str, args: Option<&str>| attribute_exec("t", &attempts, id, "shell", args);
        assert_eq!(at("c1", None).attempt, 0);
        // No id match: the abandoned attempt's call by its arguments, spelled differently.
        let a = at("p#1", Some(r#"{ "cmd" : "touch a0" }"#));
        assert_eq!((a.attempt, a.call_id.as_deref()), (0, Some("c1")));
        let a = at("", Some(r#"{"cmd":"touch a1"}"#));
        assert_eq!((a.attempt, a.call_id.as_deref()), (1, Some("c7")));
        // Nothing matches: the newest attempt, id kept.
        assert_eq!(
            at("p#3", Some(r#"{"cmd":"rm -rf"}"#)),
            Attribution {
                attempt: 1,
                call_id: None
            }
        );
        assert_eq!(at("p#4", None).attempt, 1);
    }

    #[test]
    fn identical_calls_fill_the_newest_unexecuted_first() {
        let mut i = Interner::default();
        let same = r#"{"cmd":"touch x"}"#;
        let mut attempts = vec![
            attempt(0, &[("c1", same)], &mut i),
            attempt(1, &[("c7", same)], &mut i),
        ];
        let first = attribute_exec("t", &attempts, "p#1", "shell", Some(same));
        assert_eq!(first.call_id.as_deref(), Some("c7"));
        exec(&mut attempts[1], "c7", &mut i);
        let second = attribute_exec("t", &attempts, "p#2", "shell", Some(same));
        assert_eq!(second.call_id.as_deref(), Some("c1"));
        exec(&mut attempts[0], "c1", &mut i);
        // A third run of the same thing: the newest call again (a duplicate effect).
        let third = attribute_exec("t", &attempts, "p#3", "shell", Some(same));
        assert_eq!(third.call_id.as_deref(), Some("c7"));
    }

    #[test]
    fn an_execution_before_the_retrys_call_is_the_earlier_attempts() {
        let mut i = Interner::default();
        let same = r#"{"cmd":"touch x"}"#;
        let attempts = [attempt(0, &[("c1", same)], &mut i), attempt(1, &[], &mut i)];
        let a = attribute_exec("t", &attempts, "p#1", "shell", Some(same));
        assert_eq!((a.attempt, a.call_id.as_deref()), (0, Some("c1")));
    }

    #[test]
    fn an_unkept_result_is_the_call_the_history_does_not_show() {
        // gemini-cli: A0 and A1 each streamed a call (no ids), the next request keeps A1's
        // call and answers two made-up ids; the one it has no arguments for is A0's.
        let mut i = Interner::default();
        let a0 = r#"{"cmd":"touch a0"}"#;
        let a1 = r#"{"cmd":"touch a1"}"#;
        let mut attempts = vec![
            attempt(0, &[("fc-0", a0)], &mut i),
            attempt(1, &[("fc-0", a1)], &mut i),
        ];
        let kept = [effect_key("t", "shell", &canonical_args(Some(a1)), None)];
        let a = attribute_unkept(&attempts, "shell", &kept).expect("placed");
        assert_eq!((a.attempt, a.call_id.as_deref()), (0, Some("fc-0")));
        assert_eq!(attribute_unkept(&attempts, "other_tool", &kept), None);
        // The same arguments in both attempts: the kept history cannot tell them apart; the
        // oldest unexecuted call (the retry's call is answered by the result that has them).
        let same = r#"{"cmd":"touch x"}"#;
        attempts = vec![
            attempt(0, &[("fc-0", same)], &mut i),
            attempt(1, &[("fc-0", same)], &mut i),
        ];
        let kept = [effect_key("t", "shell", &canonical_args(Some(same)), None)];
        exec(&mut attempts[1], "fc-0", &mut i);
        let a = attribute_unkept(&attempts, "shell", &kept).expect("placed");
        assert_eq!(a.attempt, 0);
        exec(&mut attempts[0], "fc-0", &mut i);
        assert_eq!(attribute_unkept(&attempts, "shell", &kept), None);
    }
}
