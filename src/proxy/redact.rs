//! What `--record` must not write: secrets, found by rule rather than by a list of names.
//!
//! Owns the rules, applied to what the recording holds:
//! - **Header names and query parameter names** containing `key`, `token`, `auth`, `secret`,
//!   `signature`, `session`, `cookie`, `credential` or `passw` (case-insensitive), and the
//!   parameters `sig` (Azure SAS) and `pwd`: the value is redacted whatever it looks like
//!   (`x-amz-security-token`, `ocp-apim-subscription-key`, `helicone-auth`, `api-key`,
//!   `access_token=`, `apikey=`, …).
//! - **Header and query values, whatever their name**: redacted when they look like a
//!   credential: an authorization scheme with credentials (`Bearer …`, `Basic …`), a key with
//!   a known provider prefix (`sk-`, `AIza`, `ghp_`, `AKIA`, … see [`KEY_PREFIXES`]), or one
//!   long high-entropy token (32+ characters of letters, digits, `_+/=` without a `-` or `.`
//!   between them, letters and digits both present, at least 3.5 bits per character, 2.5 for
//!   a hex token). A few headers whose values are ids by definition (trace context, request
//!   ids, content headers) are left to the name rule only.
//! - **Bodies** (the request as sent, and the event lines of the recording): only keys with a
//!   known provider prefix followed by 20+ key characters are redacted, in place. Bodies hold
//!   conversations, code, base64 images and hashes: a generic entropy rule would destroy
//!   ordinary content, so it is not applied there.
//!
//! A redacted value is replaced by `[redacted]`; its length and content are not kept.

use std::borrow::Cow;

/// What replaces a secret.
pub const REDACTED: &str = "[redacted]";

/// Parts of a header or parameter name that mark its value as a secret.
const SECRET_NAME_PARTS: [&str; 9] = [
    "key",
    "token",
    "auth",
    "secret",
    "signature",
    "session",
    "cookie",
    "credential",
    "passw",
];

/// Short parameter names that are secrets by convention (Azure SAS `sig`, `pwd`).
const SECRET_PARAMS: [&str; 2] = ["sig", "pwd"];

/// Headers whose values are ids or content descriptions by definition: only the name rule
/// applies to them (their ids would look like high-entropy tokens).
const ID_HEADERS: [&str; 10] = [
    "traceparent",
    "tracestate",
    "x-request-id",
    "x-client-request-id",
    "content-type",
    "content-length",
    "content-encoding",
    "accept",
    "accept-encoding",
    "user-agent",
];

/// Known key prefixes of model providers, gateways and code hosts (`sk-ant-`, `sk-proj-` are
/// covered by `sk-`). A match needs 20+ key characters after the prefix.
pub const KEY_PREFIXES: [&str; 14] = [
    "sk-",
    "sk_",
    "AIza",
    "ghp_",
    "gho_",
    "ghs_",
    "github_pat_",
    "glpat-",
    "xoxb-",
    "xoxp-",
    "hf_",
    "gsk_",
    "AKIA",
    "ASIA",
];

/// Whether a header or query parameter with this name carries a secret.
pub fn secret_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    SECRET_NAME_PARTS.iter().any(|p| lower.contains(p)) || SECRET_PARAMS.contains(&lower.as_str())
}

fn key_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_')
}

/// Whether `value` (a header or parameter value) looks like a credential.
pub fn secret_value(value: &str) -> bool {
    let v = value.trim();
    if let Some((scheme, rest)) = v.split_once(' ') {
        let scheme = scheme.to_ascii_lowercase();
        if matches!(
            scheme.as_str(),
            "bearer" | "basic" | "digest" | "token" | "apikey" | "hmac" | "aws4-hmac-sha256"
        ) && !rest.trim().is_empty()
        {
            return true;
        }
    }
    v.split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_')))
        .any(|t| known_key(t.as_bytes()))
        // Without `-` and `.`: dates, versions and hyphenated words are not one long token.
        || v.split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '+' | '/' | '=')))
            .any(high_entropy)
}

/// A token that starts with a known prefix and has 20+ key characters after it.
fn known_key(t: &[u8]) -> bool {
    KEY_PREFIXES.iter().any(|p| {
        t.strip_prefix(p.as_bytes())
            .is_some_and(|rest| rest.iter().take_while(|&&b| key_char(b)).count() >= 20)
    })
}

/// 32+ characters, letters and digits both present, and entropy per character near what a
/// random draw from the token's alphabet gives: at least 3.5 bits for a mixed alphabet
/// (base64, alphanumerics: random ones give 3.9+), at least [`HEX_MIN_BITS`] for a hex token.
/// English words and version strings stay far below.
///
/// Hex has only 16 symbols, so a random 32-character hex key measures 3.66 bits on average
/// and under 3.5 about one time in five (48 characters: one in a hundred): a single 3.5-bit
/// threshold let random hex keys through.
fn high_entropy(t: &str) -> bool {
    let b = t.as_bytes();
    if b.len() < 32 || !b.iter().any(u8::is_ascii_digit) || !b.iter().any(u8::is_ascii_alphabetic) {
        return false;
    }
    let min_bits = if b.iter().all(u8::is_ascii_hexdigit) {
        HEX_MIN_BITS
    } else {
        3.5
    };
    let mut counts = [0u32; 256];
    for &c in b {
        counts[c as usize] += 1;
    }
    let n = b.len() as f64;
    let bits: f64 = counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = f64::from(c) / n;
            -p * p.log2()
        })
        .sum();
    bits >= min_bits
}

/// The entropy a hex token must reach: random 32-character hex measured at least 2.8 bits in
/// 20,000 draws; repeated short patterns (`abcd1234abcd1234…`, 3 bits) are redacted too,
/// which costs nothing outside the id headers.
const HEX_MIN_BITS: f64 = 2.5;

/// The value to record for header `name`.
pub fn header_value<'a>(name: &str, value: &'a str) -> Cow<'a, str> {
    let lower = name.to_ascii_lowercase();
    if secret_name(&lower) || (!ID_HEADERS.contains(&lower.as_str()) && secret_value(value)) {
        Cow::Borrowed(REDACTED)
    } else {
        Cow::Borrowed(value)
    }
}

/// `path?query` with secret parameters redacted (by name or by value).
pub fn query(path_and_query: &str) -> String {
    let Some((path, query)) = path_and_query.split_once('?') else {
        return path_and_query.to_owned();
    };
    let parts: Vec<String> = query
        .split('&')
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            let decoded_name = percent_decode(k);
            let decoded_value = percent_decode(v);
            if secret_name(&decoded_name) || secret_value(&decoded_value) {
                format!("{k}={REDACTED}")
            } else {
                kv.to_owned()
            }
        })
        .collect();
    format!("{path}?{}", parts.join("&"))
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).and_then(|&c| hex(c)),
            b.get(i + 2).and_then(|&c| hex(c)),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b'+', _, _) => {
                out.push(b' ');
                i += 1;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `body` with every key of a known provider prefix replaced (see the module documentation).
/// Borrowed when there is none.
pub fn body(body: &[u8]) -> Cow<'_, [u8]> {
    let mut out: Option<Vec<u8>> = None;
    let mut copied = 0;
    let mut i = 0;
    while i < body.len() {
        // A key starts a token: not preceded by a key character.
        let starts = i == 0 || !key_char(body[i - 1]);
        if starts
            && let Some(p) = KEY_PREFIXES
                .iter()
                .find(|p| body[i..].starts_with(p.as_bytes()))
        {
            let rest = &body[i + p.len()..];
            let n = rest.iter().take_while(|&&b| key_char(b)).count();
            if n >= 20 {
                let o = out.get_or_insert_with(|| Vec::with_capacity(body.len()));
                o.extend_from_slice(&body[copied..i]);
                o.extend_from_slice(REDACTED.as_bytes());
                i += p.len() + n;
                copied = i;
                continue;
            }
        }
        i += 1;
    }
    match out {
        Some(mut o) => {
            o.extend_from_slice(&body[copied..]);
            Cow::Owned(o)
        }
        None => Cow::Borrowed(body),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Header names real gateways and providers use for credentials (their docs):
    /// AWS (SigV4 session token), Azure API Management, Azure OpenAI, Portkey, Helicone,
    /// OpenAI/Anthropic pass-through gateways, OpenStack/Keystone, Google, Cloudflare AI
    /// Gateway, Anthropic, LiteLLM, OpenRouter via Authorization, Kong, Vercel.
    pub(crate) const GATEWAY_HEADERS: &[&str] = &[
        "authorization",
        "proxy-authorization",
        "x-amz-security-token",
        "ocp-apim-subscription-key",
        "api-key",
        "x-portkey-api-key",
        "x-portkey-virtual-key",
        "helicone-auth",
        "openai-api-key",
        "anthropic-api-key",
        "X-Auth-Token",
        "x-goog-api-key",
        "cf-aig-authorization",
        "x-api-key",
        "x-litellm-api-key",
        "apikey",
        "cookie",
        "x-session-token",
        "x-client-secret",
        "x-vercel-oidc-token",
    ];

    /// Query parameters that carry credentials.
    pub(crate) const GATEWAY_PARAMS: &[&str] = &[
        "access_token",
        "api-key",
        "apikey",
        "api_key",
        "token",
        "sig",
        "key",
        "X-Amz-Signature",
        "X-Amz-Security-Token",
        "client_secret",
    ];

    #[test]
    fn every_gateway_header_name_is_secret() {
        for h in GATEWAY_HEADERS {
            assert!(secret_name(h), "{h}");
            assert_eq!(header_value(h, "plain-value"), REDACTED, "{h}");
        }
        for h in [
            "content-type",
            "anthropic-version",
            "anthropic-beta",
            "openai-organization",
            "x-stainless-retry-count",
            "accept",
            "host",
        ] {
            assert!(!secret_name(h), "{h}");
        }
    }

    #[test]
    fn every_gateway_parameter_is_redacted() {
        for p in GATEWAY_PARAMS {
            let q = query(&format!("/v1/x?alt=sse&{p}=SECRETVALUE&n=1"));
            assert_eq!(q, format!("/v1/x?alt=sse&{p}={REDACTED}&n=1"), "{p}");
        }
        assert_eq!(query("/v1/messages"), "/v1/messages");
        // By value: a key under an innocent name, percent-encoded or not.
        let q = query("/v1/x?q=AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUv&alt=sse");
        assert!(!q.contains("AIza"), "{q}");
        let q = query("/x?u=Bearer%20abc.def");
        assert!(q.contains(REDACTED), "{q}");
    }

    #[test]
    fn values_that_look_like_credentials_are_redacted_whatever_the_header() {
        for v in [
            "Bearer abc",
            "BEARER 1234",
            "Basic dXNlcjpwYXNz",
            "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz012345",
            "sk-proj-AbCdEfGhIjKlMnOpQrStUvWx",
            "AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUv",
            "ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
            "AKIAIOSFODNN7EXAMPLEXXXXXXXX",
            "9f8e7d6c5b4a39281706f5e4d3c2b1a0a1b2c3d4",
            "xK3mP9qR2sT7vW4yZ8aB1cD6eF0gH5jL",
        ] {
            assert!(secret_value(v), "{v}");
            assert_eq!(header_value("x-custom", v), REDACTED, "{v}");
        }
        for v in [
            "application/json",
            "OpenAI/Python 1.51.0",
            "2023-06-01",
            "prompt-caching-2024-07-31,interleaved-thinking-2025-05-14",
            "sk-short",
            "gzip, deflate, br",
            "claude-sonnet-4-5-20250929",
        ] {
            assert!(!secret_value(v), "{v}");
        }
        // Ids by definition keep their values.
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(header_value("traceparent", tp), tp);
    }

    /// Random keys of every length from 32 on, drawn deterministically (splitmix64), hex and
    /// base64url: each is redacted. The 48-character hex key is the one CI found recorded.
    #[test]
    fn random_hex_and_base64_keys_are_redacted_at_every_length() {
        assert!(secret_value(
            "d5605a6959d1f7d388a393a404aa60aae4cdad8aa59a6afd"
        ));
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = || {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        const HEX: &[u8] = b"0123456789abcdef";
        const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        for len in [32, 40, 48, 64] {
            for _ in 0..5_000 {
                let hex: String = (0..len)
                    .map(|_| HEX[(next() % 16) as usize] as char)
                    .collect();
                let b64: String = (0..len)
                    .map(|_| B64[(next() % 64) as usize] as char)
                    .collect();
                // a draw without a letter or without a digit is not a key by the rule
                for key in [hex, b64.replace(['-', '_'], "x")] {
                    let mixed = key.bytes().any(|b| b.is_ascii_digit())
                        && key.bytes().any(|b| b.is_ascii_alphabetic());
                    if mixed {
                        assert!(secret_value(&key), "{key}");
                    }
                }
            }
        }
    }

    #[test]
    fn bodies_lose_only_keys_with_a_known_prefix() {
        let b = br#"{"messages":[{"role":"user","content":"my key is sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz and the hash 9f8e7d6c5b4a39281706f5e4d3c2b1a0a1b2c3d4, ask-me, sk-short"}]}"#;
        let r = body(b);
        let text = String::from_utf8_lossy(&r);
        assert!(!text.contains("AbCdEfGh"), "{text}");
        assert!(
            text.contains("my key is [redacted] and the hash 9f8e7d6c5b4a"),
            "{text}"
        );
        assert!(text.contains("ask-me, sk-short"), "{text}");
        // Nothing to redact: borrowed, unchanged.
        let plain = br#"{"model":"m","messages":[{"role":"user","content":"risk-free desk-top"}]}"#;
        assert!(matches!(body(plain), Cow::Borrowed(_)));
        // A prefix inside a word is not a key start.
        assert!(matches!(
            body(b"task-AbCdEfGhIjKlMnOpQrStUvWxYz"),
            Cow::Borrowed(_)
        ));
    }
}
