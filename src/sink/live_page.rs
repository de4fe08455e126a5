//! `run`'s live page on the metrics port (`/` and `/ui`): the most recent turns with findings
//! or retries, each drawn with the same timeline as `check --html`, under the same summary,
//! refreshing itself every few seconds. Self-contained like the report (no external resource).
//!
//! Owns: the bounded list of recent turns (the engine adds every closed turn; only the last
//! [`RECENT`] worth showing are kept) and the running summary. The page itself is the
//! report's (`check::html`), rendered per request from these few turns.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use crate::check::Summary;
use crate::check::html::{HtmlLimits, HtmlReport};
use retryscope_core::report::TurnReport;

/// Turns kept for the page.
pub const RECENT: usize = 20;

/// Seconds between the page's own reloads.
pub const REFRESH_SECS: u32 = 5;

/// What the live page shows, shared by the engine (writer) and the HTTP server (reader).
#[derive(Debug, Default)]
pub struct LivePage {
    summary: Summary,
    recent: VecDeque<TurnReport>,
}

/// The page as the engine and the server share it.
pub type SharedPage = Arc<Mutex<LivePage>>;

impl LivePage {
    /// A closed turn: counted; kept when it has findings or retries.
    pub fn add(&mut self, r: &TurnReport) {
        self.summary.add_turn(r);
        self.summary.inputs = 0;
        if r.findings.is_empty() && r.retries == 0 {
            return;
        }
        if self.recent.len() == RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back(r.clone());
    }

    /// The page: the report's (most severe, then newest turns first), reloading itself.
    pub fn render(&self) -> String {
        let mut report = HtmlReport::new(HtmlLimits {
            max_rows: RECENT,
            max_timelines: RECENT,
        });
        for r in self.recent.iter().rev() {
            report.add(r);
        }
        let mut page = Vec::new();
        if report.write(&self.summary, &mut page).is_err() {
            return String::new();
        }
        let page = String::from_utf8_lossy(&page);
        // Lines read are the collector's (on /metrics), not this page's.
        page.replacen("<div><dt>lines</dt><dd>0 (0 bad)</dd></div>", "", 1)
            .replacen(
            "<title>retryscope check report</title>",
            &format!(
                "<meta http-equiv=\"refresh\" content=\"{REFRESH_SECS}\">\
                 <title>retryscope live</title>"
            ),
            1,
        )
        .replacen(
            "<h1>retryscope check report</h1>",
            &format!(
                "<h1>retryscope live</h1><p class=\"note\" id=\"live-note\">The last {RECENT} \
                 turns with findings or retries (most severe first, then newest); this page reloads every \
                 {REFRESH_SECS} s. Totals since the collector started.</p>"
            ),
            1,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_turns_worth_showing_and_reloads_itself() {
        let mut page = LivePage::default();
        let clean: TurnReport = serde_json::from_value(serde_json::json!({
            "turn": "clean", "model": null, "provider": null, "status": "completed",
            "closed_by": "turn_end", "retries": 0, "cost_usd": 0.0, "wasted_cost_usd": 0.0,
            "attempts": [], "findings": []
        }))
        .unwrap();
        let mut retried = clean.clone();
        for i in 0..(RECENT + 3) {
            retried.turn = format!("retried-{i}");
            retried.retries = 1;
            page.add(&retried);
        }
        page.add(&clean);
        assert_eq!(page.recent.len(), RECENT);
        assert_eq!(page.summary.turns, RECENT as u64 + 4);
        let html = page.render();
        assert!(html.contains("<meta http-equiv=\"refresh\" content=\"5\">"));
        assert!(html.contains("data-turn=\"retried-22\""));
        assert!(
            !html.contains("data-turn=\"retried-2\""),
            "the oldest are gone"
        );
        assert!(!html.contains("data-turn=\"clean\""));
        let newest = html.find("data-turn=\"retried-22\"").unwrap();
        let older = html.find("data-turn=\"retried-21\"").unwrap();
        assert!(newest < older, "newest first");
    }
}
