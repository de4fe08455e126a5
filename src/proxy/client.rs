//! The client kind of a proxied request, from its `User-Agent`: the `agent` of the turns the
//! proxy writes, a bounded set (a metric label), never the raw header.
//!
//! The prefixes are the real clients' own (read from their captured requests in
//! `tests/fixtures/agents/*/*/mock-log.jsonl` and Qwen Code's source): `claude-cli/2.1.328
//! (external, sdk-cli)`, `codex_exec/0.169.0 (...)` (`codex_cli_rs/` interactive),
//! `GeminiCLI-tui/0.61.0/gemini-3.1-pro-preview (...)`, `QwenCode/0.24.4 (...)`.

/// A request whose `User-Agent` is missing or names no known client.
pub const OTHER: &str = "other";

/// Product-token prefixes (lower case) and the client kind they name.
const KNOWN: &[(&str, &str)] = &[
    ("claude-cli", "claude-code"),
    ("claude-code", "claude-code"),
    ("codex", "codex"),
    ("geminicli", "gemini-cli"),
    ("gemini-cli", "gemini-cli"),
    ("qwencode", "qwen-code"),
    ("qwen-code", "qwen-code"),
];

/// The client kind named by a `User-Agent` value.
pub fn kind(user_agent: Option<&str>) -> &'static str {
    let Some(ua) = user_agent else { return OTHER };
    let ua = ua.trim_start().to_ascii_lowercase();
    KNOWN
        .iter()
        .find(|(prefix, _)| ua.starts_with(prefix))
        .map_or(OTHER, |(_, kind)| kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_real_clients_user_agents() {
        for (ua, want) in [
            ("claude-cli/2.1.328 (external, sdk-cli)", "claude-code"),
            (
                "codex_exec/0.169.0 (Debian 12.0.0; x86_64) xterm (codex_exec; 0.169.0)",
                "codex",
            ),
            ("codex_cli_rs/0.169.0 (Debian 12.0.0; x86_64)", "codex"),
            (
                "GeminiCLI-tui/0.61.0/gemini-3.1-pro-preview (linux; x64; terminal)",
                "gemini-cli",
            ),
            ("GeminiCLI/0.61.0/gemini-2.5-pro (linux; x64)", "gemini-cli"),
            ("QwenCode/0.24.4 (linux; x64)", "qwen-code"),
            ("OpenAI/Python 3.51.0", OTHER),
            ("curl/8.5.0", OTHER),
            ("", OTHER),
        ] {
            assert_eq!(kind(Some(ua)), want, "{ua}");
        }
        assert_eq!(kind(None), OTHER);
    }
}
