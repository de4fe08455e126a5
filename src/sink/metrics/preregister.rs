//! Pre-registered series: the zero series that exist before the first event, so that every
//! family is on the first scrape and `rate()` over a label value exists before it first
//! moves. The sink registers its own here; a subsystem registers its label values through
//! [`Metrics::preregister`], and a restore keeps them.

use retryscope_core::decode::BadLineReason;
use retryscope_core::report::{Outcome, TurnStatus, UsageSource};

use super::family::{FAMILIES, FamilyId, FamilyId as F};
use super::state::lock;
use super::{Inner, Metrics, Source, TOKEN_TYPES, UNKNOWN, UNSPECIFIED};

impl Inner {
    /// Zero series for every label value the sink itself knows up front; the subsystems'
    /// come through [`Metrics::preregister`].
    pub(super) fn preregister(&mut self) {
        let t = &mut self.table;
        let (a, m, p) = (UNKNOWN, UNKNOWN, UNKNOWN);
        for s in TurnStatus::ALL {
            t.touch(F::Turns as usize, &[a, m, p, s.as_str()]);
        }
        t.touch(F::Retries as usize, &[a, m, p, UNSPECIFIED]);
        t.touch(F::AttemptsPerTurn as usize, &[m, p]);
        t.touch(F::TurnDuration as usize, &[m, p]);
        for o in Outcome::ALL {
            let o = o.as_str();
            t.touch(F::Attempts as usize, &[m, p, o]);
            t.touch(F::AttemptDuration as usize, &[m, p, o]);
            t.touch(F::BilledCost as usize, &[a, m, p, o]);
            t.touch(F::ToolExecutions as usize, &[UNKNOWN, o]);
            for tt in TOKEN_TYPES {
                for us in UsageSource::ALL {
                    t.touch(F::BilledTokens as usize, &[m, p, tt, o, us.as_str()]);
                }
            }
        }
        for kind in retryscope_core::coverage::InputKind::ALL {
            for sight in kind.sights().missing() {
                t.touch(
                    F::InputBlindSpots as usize,
                    &[kind.as_str(), sight.as_str()],
                );
            }
        }
        for s in Source::ALL {
            let s = s.as_str();
            t.touch(F::EventsRead as usize, &[s]);
            t.touch(F::EventsDecoded as usize, &[s]);
            t.touch(F::UnknownEvents as usize, &[s]);
            t.touch(F::SourceLag as usize, &[s]);
            for r in BadLineReason::ALL {
                t.touch(F::BadLines as usize, &[s, r.as_str()]);
            }
        }
        // A family without labels has one series: it exists from the start, whoever moves it.
        for (fam, family) in FAMILIES.iter().enumerate() {
            if family.labels.is_empty() {
                t.touch(fam, &[]);
            }
        }
        for g in &self.guards {
            t.touch(F::LabelOverflow as usize, &[g.name()]);
        }
        t.set(F::BuildInfo as usize, &[env!("CARGO_PKG_VERSION")], 1.0);
        self.touch_agent(UNKNOWN);
    }
}

impl Metrics {
    /// Zero series, kept across [`Metrics::restore`], for every combination of `values`: one
    /// slice of label values per label of `family`, in its label order. For a subsystem's
    /// label values known up front, so that `rate()` over any of them exists before its
    /// first event.
    pub fn preregister(&self, family: FamilyId, values: &[&[&str]]) {
        let fam = family as usize;
        if values.len() != FAMILIES[fam].labels.len() {
            debug_assert!(false, "{}: wrong number of labels", FAMILIES[fam].name);
            return;
        }
        let mut keys: Vec<Vec<String>> = vec![Vec::new()];
        for label in values {
            keys = keys
                .into_iter()
                .flat_map(|key| {
                    label.iter().map(move |v| {
                        let mut k = key.clone();
                        k.push((*v).to_owned());
                        k
                    })
                })
                .collect();
        }
        let mut inner = lock(&self.inner);
        for key in keys {
            let labels: Vec<&str> = key.iter().map(String::as_str).collect();
            inner.table.touch(fam, &labels);
            inner.registered.insert((fam, key));
        }
    }
}
