//! What the client did with an answer, read from its next request: the messages that
//! request added after the earlier call's history. Its assistant text is the earlier turn's
//! `output`, each tool result a `tool_exec` of the attempt whose stream produced that call id
//! (abandoned or not); then the earlier turn ends.

use super::Tracker;
use super::line::Fields;
use crate::proxy::history::{Message, Role};

impl Tracker {
    /// The messages a request added after `parent`'s history: what the client kept of the
    /// parent's answer (`output`) and which calls it executed (`tool_exec`); then the parent
    /// turn ends.
    pub(super) fn read_history(&mut self, parent: &str, added: &[Message], now_ms: i64) {
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
                        },
                    );
                    known = Some(call);
                }
                match known {
                    Some(call) => {
                        let id = r.id.as_deref().unwrap_or("");
                        self.emit(
                            &call.turn,
                            "tool_exec",
                            Some(call.attempt),
                            now_ms,
                            Fields::Exec {
                                id,
                                name: &call.name,
                                args: None,
                            },
                        );
                    }
                    None => {
                        // A call the proxy did not see streamed (or Gemini without ids): the
                        // history's call gives name and arguments; the correlator places it on
                        // the call with the same tool and arguments.
                        let call = in_history.iter().find(|c| match (&r.id, &c.id) {
                            (Some(a), Some(b)) => a == b,
                            _ => r.name.as_deref() == Some(c.name.as_str()),
                        });
                        let name = call
                            .map(|c| c.name.as_str())
                            .or(r.name.as_deref())
                            .unwrap_or("unknown");
                        self.emit(
                            parent,
                            "tool_exec",
                            None,
                            now_ms,
                            Fields::Exec {
                                id: r.id.as_deref().unwrap_or(""),
                                name,
                                args: call.map(|c| &c.args),
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
