//! What the client did with an answer, read from its next request: the messages that
//! request added after the earlier call's history. Its assistant text is the earlier turn's
//! `output`, each tool result a `tool_exec` of the attempt whose stream produced that call id
//! (abandoned or not), or, for an id never streamed (Gemini streams none; the client makes
//! one up), of the streamed call it is placed on by tool and arguments (`place`); then the
//! earlier turn ends.

use super::line::Fields;
use super::{Tracker, place};
use crate::proxy::history::{Message, Role};

impl Tracker {
    /// The messages a request added after `parent`'s history: what the client kept of the
    /// parent's answer (`output`) and which calls it executed (`tool_exec`); then the parent
    /// turn ends. `server_side`: the request continues the parent's response on the server
    /// (OpenAI Responses `previous_response_id`), so the answer it keeps is the one the server
    /// stored: what the parent's last attempt streamed, after the partial text a continuation
    /// retry carried.
    pub(super) fn read_history(
        &mut self,
        parent: &str,
        added: &[Message],
        server_side: bool,
        now_ms: i64,
    ) {
        let Some(conversation) = self.turns.get(parent).map(|t| t.conversation.clone()) else {
            return;
        };
        // The assistant messages right after the parent's history are its answer as kept.
        let mut output = String::new();
        for m in added {
            if m.role != Some(Role::Assistant) {
                break;
            }
            output.push_str(&m.text);
        }
        if output.is_empty()
            && server_side
            && let Some(t) = self.turns.get(parent)
        {
            output.push_str(&t.kept.text);
        }
        if !output.is_empty() {
            self.emit(
                parent,
                "output",
                None,
                now_ms,
                Fields::Output { text: &output },
            );
        }
        let in_history: Vec<&crate::proxy::history::Call> =
            added.iter().flat_map(|m| &m.calls).collect();
        // The calls the client kept, as effect keys (to tell an abandoned attempt's call,
        // which the history does not show, from the one it kept).
        let kept: Vec<String> = in_history
            .iter()
            .map(|c| place::key_of(parent, &c.name, Some(&c.args.to_string())))
            .collect();
        let mut used = vec![false; in_history.len()];
        for m in added {
            for r in &m.results {
                let key =
                    r.id.clone()
                        .unwrap_or_else(|| format!("name:{}", r.name.as_deref().unwrap_or("")));
                let seen = self.executed.entry(conversation.clone()).or_default();
                if r.id.is_some() && !seen.insert(key) {
                    continue;
                }
                self.stats.executions += 1;
                // How the tool ended, as the result says: the correlator reads an abort or
                // an error of an abandoned attempt's call from these (started, then aborted).
                let status = r.error.then_some("error");
                let result = r.text.as_deref();
                let mut known = r.id.as_ref().and_then(|id| self.calls.get(id)).cloned();
                if known.is_none()
                    && let Some(id) = &r.id
                    && let Some(call) = self.partial.get(id).cloned()
                {
                    // The stream was cut before the decoder saw this call complete, yet the
                    // client sends back its result: it assembled the call from that attempt.
                    let args = in_history
                        .iter()
                        .find(|c| c.id.as_deref() == Some(id.as_str()))
                        .map(|c| &c.args);
                    self.emit(
                        &call.turn,
                        "tool_call",
                        Some(call.attempt),
                        now_ms,
                        Fields::Exec {
                            id,
                            name: &call.name,
                            args: Some(args.unwrap_or(&serde_json::Value::Null)),
                            status: None,
                            result: None,
                        },
                    );
                    known = Some(call);
                }
                match known {
                    Some(call) => {
                        let id = r.id.as_deref().unwrap_or("");
                        if let Some(t) = self.turns.get_mut(&call.turn) {
                            t.seen.mark(call.attempt, id);
                        }
                        self.emit(
                            &call.turn,
                            "tool_exec",
                            Some(call.attempt),
                            now_ms,
                            Fields::Exec {
                                id,
                                name: &call.name,
                                args: None,
                                status,
                                result,
                            },
                        );
                    }
                    None => {
                        // An id the proxy never saw streamed (Gemini streams none; gemini-cli
                        // makes its own up): the history's call gives name and arguments, and
                        // the execution is placed among the calls this turn's attempts
                        // streamed, by tool and arguments, or (a call the history does not
                        // show: an abandoned attempt's) on one the history did not keep.
                        // Each kept call answers one result (results without ids take
                        // the first unused call of their tool).
                        let at = (0..in_history.len()).find(|&i| {
                            let c = in_history[i];
                            !used[i]
                                && match (&r.id, &c.id) {
                                    (Some(a), Some(b)) => a == b,
                                    _ => r.name.as_deref() == Some(c.name.as_str()),
                                }
                        });
                        if let Some(i) = at {
                            used[i] = true;
                        }
                        let call = at.map(|i| in_history[i]);
                        let name = call
                            .map(|c| c.name.as_str())
                            .or(r.name.as_deref())
                            .unwrap_or("unknown");
                        let args = call.map(|c| c.args.to_string());
                        let placed = self
                            .turns
                            .get_mut(parent)
                            .and_then(|t| t.seen.place(parent, name, args.as_deref(), &kept));
                        if let Some(p) = placed
                            && let Some(id) = &p.call_id
                        {
                            self.emit(
                                parent,
                                "tool_exec",
                                Some(p.attempt),
                                now_ms,
                                Fields::Exec {
                                    id,
                                    name,
                                    args: None,
                                    status,
                                    result,
                                },
                            );
                            continue;
                        }
                        self.emit(
                            parent,
                            "tool_exec",
                            None,
                            now_ms,
                            Fields::Exec {
                                id: r.id.as_deref().unwrap_or(""),
                                name,
                                args: call.map(|c| &c.args),
                                status,
                                result,
                            },
                        );
                    }
                }
            }
        }
        if let Some(t) = self.turns.get_mut(parent)
            && !t.closed
        {
            t.closed = true;
            self.emit(parent, "turn_end", None, now_ms, Fields::None {});
        }
    }
}

#[cfg(test)]
mod tests;
