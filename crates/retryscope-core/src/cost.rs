//! Prices and billed cost: a price table in LiteLLM's JSON format and the USD cost of usage.
//!
//! The default table ships in `prices/default.json` (each entry cites its source and date);
//! `--prices FILE` replaces it with any `model_prices_and_context_window.json` users already
//! keep. Model names match exactly first, then without a provider prefix (`openai/`,
//! `models/`), then without a date or version suffix (`-20250929`, `-2024-08-06`, `@20240620`,
//! `-latest`, `-001`).

use std::collections::HashMap;
use std::path::Path;

use serde::Deserialize;

use crate::event::Usage;

const DEFAULT_TABLE: &str = include_str!("../../../prices/default.json");

/// USD per token for one model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Price {
    /// Uncached input token.
    pub input: f64,
    /// Output token (reasoning included).
    pub output: f64,
    /// Input token read from a prompt cache.
    pub cache_read: f64,
    /// Input token written to a prompt cache.
    pub cache_write: f64,
}

impl Price {
    /// USD cost of `usage` at this price. `input_tokens` includes cached and cache-write tokens.
    pub(crate) fn cost(&self, usage: &Usage) -> f64 {
        let special = usage
            .cached_input_tokens
            .saturating_add(usage.cache_write_tokens);
        let plain_input = usage.input_tokens.saturating_sub(special);
        plain_input as f64 * self.input
            + usage.cached_input_tokens as f64 * self.cache_read
            + usage.cache_write_tokens as f64 * self.cache_write
            + usage.output_tokens as f64 * self.output
            // -0.0 + 0.0 is 0.0: no negative zero reaches a report.
            + 0.0
    }
}

/// Why a price table could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum PriceError {
    /// The file could not be read.
    #[error("cannot read price table {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not a LiteLLM-style JSON object.
    #[error("price table {path} is not valid LiteLLM JSON: {source}")]
    Parse {
        /// The file.
        path: String,
        /// The JSON error.
        source: serde_json::Error,
    },
    /// No entry had usable prices.
    #[error("price table {path} has no entry with input and output prices")]
    Empty {
        /// The file.
        path: String,
    },
}

#[derive(Deserialize)]
struct Entry {
    input_cost_per_token: Option<f64>,
    output_cost_per_token: Option<f64>,
    cache_read_input_token_cost: Option<f64>,
    cache_creation_input_token_cost: Option<f64>,
}

/// Model name → price.
#[derive(Debug, Clone, Default)]
pub struct PriceTable {
    prices: HashMap<String, Price>,
}

impl PriceTable {
    /// The table shipped with retryscope.
    pub fn builtin() -> Self {
        // The shipped table is checked by a unit test; an error here is a build defect.
        Self::parse(DEFAULT_TABLE, "prices/default.json").unwrap_or_default()
    }

    /// Load a LiteLLM-format table from a file.
    pub(crate) fn load(path: &Path) -> Result<Self, PriceError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| PriceError::Read {
            path: name.clone(),
            source,
        })?;
        Self::parse(&text, &name)
    }

    /// Parse a LiteLLM-format table. Entries without both input and output prices (images,
    /// embeddings, `sample_spec`) and keys starting with `_` are skipped.
    pub(crate) fn parse(text: &str, name: &str) -> Result<Self, PriceError> {
        let raw: HashMap<String, serde_json::Value> =
            serde_json::from_str(text).map_err(|source| PriceError::Parse {
                path: name.to_owned(),
                source,
            })?;
        let mut prices = HashMap::new();
        for (model, value) in raw {
            if model.starts_with('_') || model == "sample_spec" {
                continue;
            }
            let Ok(entry) = serde_json::from_value::<Entry>(value) else {
                continue;
            };
            let (Some(input), Some(output)) =
                (entry.input_cost_per_token, entry.output_cost_per_token)
            else {
                continue;
            };
            let sane = |p: f64| p.is_finite() && p >= 0.0;
            let extra = [
                entry.cache_read_input_token_cost,
                entry.cache_creation_input_token_cost,
            ];
            if !sane(input) || !sane(output) || extra.into_iter().flatten().any(|p| !sane(p)) {
                // A negative or infinite price would make costs go backwards or overflow.
                continue;
            }
            prices.insert(
                model.to_ascii_lowercase(),
                Price {
                    input,
                    output,
                    cache_read: entry.cache_read_input_token_cost.unwrap_or(input),
                    cache_write: entry.cache_creation_input_token_cost.unwrap_or(input),
                },
            );
        }
        if prices.is_empty() {
            return Err(PriceError::Empty {
                path: name.to_owned(),
            });
        }
        Ok(PriceTable { prices })
    }

    /// The built-in table with `path`'s entries layered over it (a model in both takes the
    /// file's price); without a path, the built-in table.
    pub fn builtin_with(path: Option<&Path>) -> Result<Self, PriceError> {
        let mut table = Self::builtin();
        if let Some(path) = path {
            table.prices.extend(Self::load(path)?.prices);
        }
        Ok(table)
    }

    /// Number of priced models.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.prices.len()
    }

    /// Find the price of `model`: exact, then without provider prefix, then without a date or
    /// version suffix.
    pub(crate) fn lookup(&self, model: &str) -> Option<Price> {
        let lower = model.trim().to_ascii_lowercase();
        if let Some(p) = self.prices.get(&lower) {
            return Some(*p);
        }
        let mut candidates = vec![lower.clone()];
        if let Some((_, rest)) = lower.rsplit_once('/') {
            candidates.push(rest.to_owned());
        }
        for name in candidates {
            if let Some(p) = self.prices.get(&name) {
                return Some(*p);
            }
            let mut base = name.as_str();
            while let Some(stripped) = strip_suffix_once(base) {
                if let Some(p) = self.prices.get(stripped) {
                    return Some(*p);
                }
                base = stripped;
            }
        }
        None
    }
}

/// Strip one date/version suffix: `-20250929`, `-2024-08-06`, `@20240620`, `-latest`,
/// `-preview`, `-001`, `-v1:0`.
fn strip_suffix_once(name: &str) -> Option<&str> {
    if let Some((head, _)) = name.rsplit_once('@') {
        return Some(head);
    }
    // -YYYY-MM-DD
    // The date is ASCII: a split inside a multi-byte character cannot be one (and would panic).
    if name.len() > 11 && name.is_char_boundary(name.len() - 11) {
        let (head, tail) = name.split_at(name.len() - 11);
        let t = tail.as_bytes();
        if t[0] == b'-'
            && t[5] == b'-'
            && t[8] == b'-'
            && tail[1..5].bytes().all(|c| c.is_ascii_digit())
            && tail[6..8].bytes().all(|c| c.is_ascii_digit())
            && tail[9..].bytes().all(|c| c.is_ascii_digit())
        {
            return Some(head);
        }
    }
    let (head, last) = name.rsplit_once('-')?;
    let is_version = last.len() >= 3 && last.bytes().all(|c| c.is_ascii_digit());
    let is_tag = matches!(last, "latest" | "preview" | "exp")
        || (last.starts_with('v') && last.contains(':'));
    if (is_version || is_tag) && !head.is_empty() {
        Some(head)
    } else {
        None
    }
}

/// Estimated output tokens for text and argument characters (about four characters a token).
pub(crate) fn estimate_tokens(chars: u64) -> u64 {
    chars.div_ceil(4)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> PriceTable {
        PriceTable::parse(
            r#"{
              "sample_spec": {"input_cost_per_token": 0, "output_cost_per_token": 0},
              "_meta": {"note": "skip"},
              "gpt-4o": {"input_cost_per_token": 2.5e-6, "output_cost_per_token": 1e-5, "cache_read_input_token_cost": 1.25e-6},
              "claude-sonnet-4-5": {"input_cost_per_token": 3e-6, "output_cost_per_token": 1.5e-5, "cache_read_input_token_cost": 3e-7, "cache_creation_input_token_cost": 3.75e-6},
              "text-embedding-3-small": {"input_cost_per_token": 2e-8},
              "gemini-2.5-flash": {"input_cost_per_token": 3e-7, "output_cost_per_token": 2.5e-6}
            }"#,
            "test",
        )
        .unwrap()
    }

    #[test]
    fn builtin_table_loads_and_prices_major_models() {
        let t = PriceTable::builtin();
        assert!(t.len() >= 10, "builtin table has {} models", t.len());
        for model in ["gpt-4o", "claude-sonnet-4-5", "gemini-2.5-pro"] {
            assert!(t.lookup(model).is_some(), "{model} unpriced");
        }
    }

    #[test]
    fn lookup_strips_prefix_and_suffixes() {
        let t = table();
        assert_eq!(t.len(), 3, "entries without output price are skipped");
        assert!(t.lookup("gpt-4o").is_some());
        assert!(t.lookup("openai/gpt-4o-2024-08-06").is_some());
        assert!(t.lookup("claude-sonnet-4-5-20250929").is_some());
        assert!(t.lookup("anthropic/claude-sonnet-4-5@20250929").is_some());
        assert!(t.lookup("models/gemini-2.5-flash-001").is_some());
        assert!(t.lookup("GPT-4o").is_some());
        assert!(t.lookup("gpt-4").is_none());
        assert!(t.lookup("llama-3.3-70b").is_none());
    }

    #[test]
    fn cost_splits_cached_and_cache_write() {
        let p = table().lookup("claude-sonnet-4-5").unwrap();
        let u = Usage {
            input_tokens: 1_000_000,
            output_tokens: 100_000,
            cached_input_tokens: 500_000,
            cache_write_tokens: 100_000,
            reasoning_tokens: 0,
        };
        // 400k plain * 3e-6 + 500k * 3e-7 + 100k * 3.75e-6 + 100k * 1.5e-5
        let expected = 1.2 + 0.15 + 0.375 + 1.5;
        assert!((p.cost(&u) - expected).abs() < 1e-9, "{}", p.cost(&u));
        let no_cache = table().lookup("gemini-2.5-flash").unwrap();
        assert_eq!(no_cache.cache_read, no_cache.input);
    }

    #[test]
    fn bad_tables_are_errors() {
        assert!(matches!(
            PriceTable::parse("[1]", "x"),
            Err(PriceError::Parse { .. })
        ));
        assert!(matches!(
            PriceTable::parse("{}", "x"),
            Err(PriceError::Empty { .. })
        ));
    }

    /// Found by the fault suite's hostile bytes: a model name whose 11th byte from the end
    /// falls inside a multi-byte character panicked the date-suffix check.
    #[test]
    fn model_names_with_multibyte_characters_do_not_panic() {
        let t = PriceTable::builtin();
        for name in [
            "é\u{1b}\u{202e}\u{feff}",
            "modelé-2025-01-0é",
            "ééééééééééé",
        ] {
            assert!(t.lookup(name).is_none());
        }
    }
}
