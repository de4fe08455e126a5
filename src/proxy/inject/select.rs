//! Which requests an injection rule aims at (`--inject-match`, the config's `match`).
//!
//! Owns: the selector (`tools`: requests that offer the model tools, the default; `all`;
//! `path=GLOB`; `model=GLOB`, `*` and `?` wildcards) and what is known of a request when its
//! stream is chosen ([`Target`]), which is also what a cut reports about the request it cut.
//! A client's side calls (a title, a routing classifier, a token count) offer no tools: with
//! the default, `--inject-first N` counts and cuts only the agent's own model calls. The
//! selector's words ([`Match`], parsed and shown) are the config file's (`config::proxy`).

pub use crate::config::proxy::Match;

/// What the proxy knows of a model request when its stream may be chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// HTTP method.
    pub method: String,
    /// Request path, without the query.
    pub path: String,
    /// The model asked for, when the body says (Gemini: the path).
    pub model: Option<String>,
    /// Whether the request offers the model tools.
    pub tools: bool,
}

impl Match {
    /// Whether `t` is aimed at.
    pub fn matches(&self, t: &Target) -> bool {
        match self {
            Match::Tools => t.tools,
            Match::All => true,
            Match::Path(g) => glob(g, &t.path),
            Match::Model(g) => t.model.as_deref().is_some_and(|m| glob(g, m)),
        }
    }
}

/// `*` (any run of characters, `/` included) and `?` (one character); the rest literal.
fn glob(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    // The last `*` seen and the text position it matched up to (backtracking point).
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ti));
                pi += 1;
            }
            Some(&c) if c == '?' || c == t[ti] => {
                pi += 1;
                ti += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    pi = sp + 1;
                    ti = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(path: &str, model: Option<&str>, tools: bool) -> Target {
        Target {
            method: "POST".to_owned(),
            path: path.to_owned(),
            model: model.map(str::to_owned),
            tools,
        }
    }

    #[test]
    fn globs() {
        assert!(glob("*/chat/completions", "/v1/chat/completions"));
        assert!(glob("claude-*", "claude-sonnet-4-5"));
        assert!(glob("gpt-4?", "gpt-4o"));
        assert!(glob("*", ""));
        assert!(glob("a*b*c", "a-x-b-y-b-c"));
        assert!(!glob("claude-*", "gpt-5"));
        assert!(!glob("gpt-4?", "gpt-4"));
        assert!(!glob("/v1/messages", "/v1/messages/count_tokens"));
    }

    #[test]
    fn parse_show_and_match() {
        for s in ["tools", "all", "path=*/messages", "model=claude-*"] {
            let m: Match = s.parse().expect(s);
            assert_eq!(m.to_string(), s);
        }
        assert!("path=".parse::<Match>().is_err());
        assert!("tool".parse::<Match>().is_err());
        let main = target("/v1/messages", Some("claude-sonnet-4-5"), true);
        let title = target("/v1/messages", Some("claude-haiku-4-5"), false);
        assert_eq!(Match::default(), Match::Tools);
        assert!(Match::Tools.matches(&main) && !Match::Tools.matches(&title));
        assert!(Match::All.matches(&title));
        let haiku: Match = "model=*haiku*".parse().expect("glob");
        assert!(haiku.matches(&title) && !haiku.matches(&main));
        let count: Match = "path=*/count_tokens".parse().expect("glob");
        assert!(!count.matches(&main));
        assert!(
            !haiku.matches(&target("/x", None, true)),
            "no model: no match"
        );
    }
}
