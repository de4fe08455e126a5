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

use super::attempt::AttemptState;
use crate::effect::{canonical_args, effect_key};

/// Where an execution without an explicit attempt belongs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attribution {
    /// The attempt number.
    pub attempt: u32,
    /// The id of the call it was matched to by content, when its own id matched no call.
    pub call_id: Option<String>,
}

/// Attribute an execution of `name` with raw arguments `args` and call id `id`.
pub fn attribute_exec(
    turn: &str,
    attempts: &[AttemptState],
    id: &str,
    name: &str,
    args: Option<&str>,
) -> Attribution {
    if let Some(a) = attempts.iter().rev().find(|a| a.call(id).is_some()) {
        return Attribution {
            attempt: a.number,
            call_id: None,
        };
    }
    let newest = Attribution {
        attempt: attempts.last().map_or(0, |a| a.number),
        call_id: None,
    };
    let Some(args) = args else {
        return newest;
    };
    let key = effect_key(turn, name, &canonical_args(Some(args)), None);
    let mut fallback = None;
    for a in attempts.iter().rev() {
        for call in a.calls.iter().filter(|c| c.effect_key == key) {
            let executed = a.execs.iter().any(|e| e.id == call.id);
            let found = Attribution {
                attempt: a.number,
                call_id: Some(call.id.clone()),
            };
            if !executed {
                return found;
            }
            fallback.get_or_insert(found);
        }
    }
    fallback.unwrap_or(newest)
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
                id: (*id).to_owned(),
                name: interner.get("shell"),
                effect_key: effect_key("t", "shell", &canonical, None),
                canonical_args: Some(canonical),
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
}
