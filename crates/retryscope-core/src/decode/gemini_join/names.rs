//! The telemetry's names of a joined session's calls, mapped to the stream-json's
//! ([`CallNames`]). The telemetry names calls by prompt id (the session id for gemini-cli,
//! `<session id>########<n>` for Qwen Code), the stream-json by session id; both number a
//! session's calls in order (`<id>`, `<id>#2`, ...), so the k-th call the telemetry logged is
//! the stream-json's k-th: `<session>` or `<session>#k`. A live collector joins a session in
//! batches, one per quiet spell (a tool running longer than the quiet time makes two), so
//! the count is kept across them, and checkpointed with the joiner.

use std::collections::{HashMap, HashSet};

use super::{Source, session_of};
use crate::event::Event;

/// Release calls ([`super::SessionJoiner::release_quiet`], a tick each) a session's names are
/// kept after its last batch: an hour. A session quiet for longer numbers its next calls
/// from one again.
const KEPT_RELEASES: u32 = 3600;

/// One session's calls named so far.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SessionCalls {
    /// Main calls the telemetry logged.
    pub count: usize,
    /// The telemetry's name of each → the stream-json's.
    pub names: HashMap<String, String>,
    /// Release calls since a batch of the session was last joined.
    pub idle: u32,
}

/// Every joined session's calls named so far.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct CallNames(HashMap<String, SessionCalls>);

impl CallNames {
    /// The names as a checkpoint keeps them, by session.
    pub(super) fn snapshot(&self) -> Vec<(String, SessionCalls)> {
        let mut all: Vec<_> = self.0.iter().map(|(s, c)| (s.clone(), c.clone())).collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    pub(super) fn restore(all: Vec<(String, SessionCalls)>) -> Self {
        CallNames(all.into_iter().collect())
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// One more release: forget sessions idle for [`KEPT_RELEASES`].
    pub(super) fn age(&mut self) {
        self.0.retain(|_, c| {
            c.idle = c.idle.saturating_add(1);
            c.idle <= KEPT_RELEASES
        });
    }

    /// The stream-json's name of each main call the telemetry logged in `held`, of the
    /// sessions `shown` (those with a stream-json). Other roles' calls (`~<role>`) have no
    /// counterpart and keep their names.
    pub(super) fn map(
        &mut self,
        held: &[(Source, Event<'static>)],
        shown: &HashSet<String>,
    ) -> HashMap<String, String> {
        let mut names = HashMap::new();
        for (source, e) in held {
            let turn = e.turn.as_ref();
            let session = session_of(turn);
            if *source != Source::Telemetry
                || turn.contains('~')
                || !shown.contains(session)
                || names.contains_key(turn)
            {
                continue;
            }
            let calls = self.0.entry(session.to_owned()).or_default();
            calls.idle = 0;
            if let Some(name) = calls.names.get(turn) {
                names.insert(turn.to_owned(), name.clone());
                continue;
            }
            calls.count += 1;
            let name = if in_screen_scheme(turn, session) {
                // gemini-cli's telemetry numbers its calls as the screen does.
                turn.to_owned()
            } else if calls.count == 1 {
                session.to_owned()
            } else {
                format!("{session}#{}", calls.count)
            };
            calls.names.insert(turn.to_owned(), name.clone());
            names.insert(turn.to_owned(), name);
        }
        names
    }
}

/// Whether a call's name is the session's own numbering: `<session>` or `<session>#<k>`.
pub(super) fn in_screen_scheme(turn: &str, session: &str) -> bool {
    match turn.strip_prefix(session) {
        Some("") => true,
        Some(rest) => rest
            .strip_prefix('#')
            .is_some_and(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit())),
        None => false,
    }
}
