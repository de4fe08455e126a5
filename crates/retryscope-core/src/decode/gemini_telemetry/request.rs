//! An `api_request`: a new model call (a turn), or the next attempt of the current one when a
//! retry is pending, and what the request's history (`request_text`) says the client kept:
//! a continuation's partial text, the previous call's `Output`.

use std::borrow::Cow;

use serde_json::Value;

use super::{Call, Decoder, family, s};
use crate::decode::provider::owned;
use crate::event::{Event, EventKind, TimestampMs};

impl Decoder {
    pub(super) fn api_request(
        &mut self,
        key: (String, String),
        attrs: &Value,
        agent: &str,
        session: &str,
        ts: Option<TimestampMs>,
        out: &mut Vec<Event<'static>>,
    ) {
        let models = s(attrs, "request_text").and_then(family::model_texts);
        let lane = self.lanes.entry(key.clone()).or_default();
        if let Some(c) = &mut lane.cur
            && c.retry_pending
        {
            c.retry_pending = false;
            // A continuation: the history ends with a model turn the call's first request did
            // not have, the cut attempt's partial output sent back to be continued.
            let partial = match (&models, c.history_models) {
                (Some(m), Some(base)) if m.len() > base => m.last().filter(|t| !t.is_empty()),
                _ => None,
            };
            if let Some(text) = partial
                && !c.has_text
            {
                out.push(Event::owned(
                    &c.turn,
                    Some(c.attempt),
                    ts,
                    EventKind::Text { text: owned(text) },
                ));
            }
            c.attempt += 1;
            c.has_text = false;
            let reason = c.retry_reason.take().unwrap_or_else(|| {
                if partial.is_some() {
                    "continuation"
                } else {
                    "retry"
                }
                .to_owned()
            });
            out.push(Event::owned(
                &c.turn,
                Some(c.attempt),
                ts,
                EventKind::Retry {
                    reason: Some(Cow::Owned(reason)),
                    // the kept text is the partial text, then what the continuation adds
                    prefill: partial.map(|t| owned(t)),
                },
            ));
            return;
        }
        // What the client kept of the lane's previous call: the first model turn its history
        // did not have.
        if let Some(prev) = &lane.cur
            && let (Some(m), Some(base)) = (&models, prev.history_models)
            && let Some(kept) = m.get(base).filter(|t| !t.is_empty())
        {
            out.push(Event::owned(
                &prev.turn,
                None,
                ts,
                EventKind::Output { text: owned(kept) },
            ));
        }
        lane.calls += 1;
        let (prompt, role) = &key;
        let base = if role == "main" {
            prompt.clone()
        } else {
            format!("{prompt}~{role}")
        };
        let turn = if lane.calls == 1 {
            base
        } else {
            format!("{base}#{}", lane.calls)
        };
        out.push(Event::owned(
            &turn,
            Some(0),
            ts,
            EventKind::TurnStart {
                model: s(attrs, "model").map(owned),
                provider: (agent == "gemini-cli").then_some(Cow::Borrowed("gemini")),
                session: (!session.is_empty()).then(|| owned(session)),
                agent: Some(Cow::Owned(agent.to_owned())),
                traceparent: None,
                wire_only: false,
                requested_model: None,
            },
        ));
        // The request is the call's first attempt beginning: a call whose answer was never
        // logged (the file's tail lost, the client killed) still had it.
        out.push(Event::owned(
            &turn,
            Some(0),
            ts,
            EventKind::AttemptStart {
                model: s(attrs, "model").map(owned),
                request_id: None,
            },
        ));
        lane.cur = Some(Call {
            turn,
            session: session.to_owned(),
            history_models: models.map(|m| m.len()),
            ..Call::default()
        });
    }
}
