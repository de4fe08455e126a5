//! Interned strings for values that repeat across turns (models, providers, agents, tool
//! names, finish reasons): one shared allocation each instead of one per turn. Bounded: past
//! the cap, values are still returned, just not shared, so odd input cannot grow it forever.

use std::sync::Arc;

use crate::fasthash::FastSet;

/// A shared string.
pub(crate) type Sym = Arc<str>;

/// The interner.
#[derive(Debug, Default)]
pub(crate) struct Interner {
    set: FastSet<Sym>,
}

/// Distinct values kept for sharing.
const MAX_INTERNED: usize = 10_000;

impl Interner {
    /// The shared copy of `s`.
    pub(crate) fn get(&mut self, s: &str) -> Sym {
        if let Some(sym) = self.set.get(s) {
            return sym.clone();
        }
        let sym: Sym = Arc::from(s);
        if self.set.len() < MAX_INTERNED {
            self.set.insert(sym.clone());
        }
        sym
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_values_share_one_allocation_up_to_the_cap() {
        let mut i = Interner::default();
        let a = i.get("claude-sonnet-4-5");
        let b = i.get("claude-sonnet-4-5");
        assert!(Arc::ptr_eq(&a, &b));
        for n in 0..MAX_INTERNED + 10 {
            i.get(&format!("model-{n}"));
        }
        assert_eq!(i.set.len(), MAX_INTERNED);
        assert_eq!(&*i.get("model-beyond-the-cap"), "model-beyond-the-cap");
    }
}
