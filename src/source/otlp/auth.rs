//! The receiver's credentials: the bearer token clients must send
//! (`--otlp-listen-token-file`), compared in constant time, and the TLS server configuration
//! from PEM certificate and key files (`--otlp-tls-cert`, `--otlp-tls-key`; rustls with the
//! ring provider, the one crypto provider of the build).

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use sha2::{Digest, Sha256};

/// A bearer token. Only its digest is kept; `Debug` never shows it.
#[derive(Clone)]
pub struct Token {
    digest: [u8; 32],
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(..)")
    }
}

/// Why credentials could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The token file.
    #[error("cannot read the token file {path}: {source}")]
    TokenFile {
        /// Where.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The token file holds no token.
    #[error("the token file {0} is empty")]
    EmptyToken(String),
    /// A certificate or key file.
    #[error("cannot load TLS {what} from {path}: {why}")]
    Tls {
        /// Certificate or key.
        what: &'static str,
        /// Where.
        path: String,
        /// Why.
        why: String,
    },
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

impl Token {
    /// A token (surrounding whitespace is not part of it).
    pub fn new(token: &str) -> Self {
        Token {
            digest: digest(token.trim().as_bytes()),
        }
    }

    /// Read the token from a file (its first line, trimmed).
    pub fn from_file(path: &Path) -> Result<Self, AuthError> {
        let text = std::fs::read_to_string(path).map_err(|source| AuthError::TokenFile {
            path: path.display().to_string(),
            source,
        })?;
        let token = text.lines().next().unwrap_or("").trim();
        if token.is_empty() {
            return Err(AuthError::EmptyToken(path.display().to_string()));
        }
        Ok(Token::new(token))
    }

    /// Whether `authorization: Bearer <token>` carries this token. The scheme is
    /// case-insensitive (RFC 7235 §2.1: `BEARER`, `bearer`), followed by one or more spaces.
    /// The comparison takes the same time wherever the tokens differ (digests compared
    /// without an early exit).
    pub fn matches_header(&self, header: Option<&[u8]>) -> bool {
        let Some(h) = header else {
            return false;
        };
        let Some(space) = h.iter().position(|&b| b == b' ') else {
            return false;
        };
        let (scheme, given) = h.split_at(space);
        if !scheme.eq_ignore_ascii_case(b"bearer") {
            return false;
        }
        let d = digest(given.trim_ascii());
        d.iter()
            .zip(self.digest.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
}

/// The TLS server configuration for the listeners, from PEM files. `alpn` lists the
/// protocols offered (`h2` for gRPC, `http/1.1` for OTLP/HTTP).
pub fn tls_config(
    cert: &Path,
    key: &Path,
    alpn: &[&[u8]],
) -> Result<Arc<rustls::ServerConfig>, AuthError> {
    let err = |what, path: &Path, why: String| AuthError::Tls {
        what,
        path: path.display().to_string(),
        why,
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| err("certificate", cert, e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| err("certificate", cert, e.to_string()))?;
    if certs.is_empty() {
        return Err(err(
            "certificate",
            cert,
            "no certificate in the file".into(),
        ));
    }
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| err("key", key, e.to_string()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| err("certificate", cert, e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key_der)
        .map_err(|e| err("key", key, e.to_string()))?;
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}

/// The warning to give at start for a listener on `addr`: beyond loopback without a token,
/// anyone who can reach it can send records; with a token but without TLS, the token crosses
/// the network in clear text, readable by anyone on the path. `None` on loopback.
pub fn exposure_warning(
    addr: &std::net::SocketAddr,
    token: bool,
    tls: bool,
) -> Option<&'static str> {
    match (addr.ip().is_loopback(), token, tls) {
        (true, _, _) => None,
        (false, false, _) => Some(
            "listens beyond loopback without a token: anyone who can reach it can send records (set --otlp-listen-token-file)",
        ),
        (false, true, false) => Some(
            "listens beyond loopback with a token but without TLS: the token crosses the network in clear text, readable by anyone on the path (set --otlp-tls-cert and --otlp-tls-key)",
        ),
        (false, true, true) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scheme_is_case_insensitive() {
        let t = Token::new("s3cret");
        for h in [
            &b"BEARER s3cret"[..],
            b"bEaReR s3cret",
            b"Bearer  s3cret",
            b"bearer s3cret",
        ] {
            assert!(t.matches_header(Some(h)), "{}", String::from_utf8_lossy(h));
        }
        assert!(!t.matches_header(Some(b"Basic s3cret")));
        assert!(!t.matches_header(Some(b"Bearers3cret")));
        assert!(!t.matches_header(Some(b"Bearer")));
        assert!(!t.matches_header(Some(b"Token s3cret")));
    }

    #[test]
    fn warns_for_a_cleartext_token_beyond_loopback_only() {
        let lo: std::net::SocketAddr = "127.0.0.1:4318".parse().expect("addr");
        let v6lo: std::net::SocketAddr = "[::1]:4318".parse().expect("addr");
        let any: std::net::SocketAddr = "0.0.0.0:4318".parse().expect("addr");
        let lan: std::net::SocketAddr = "10.1.2.3:4317".parse().expect("addr");
        for a in [lo, v6lo] {
            for (token, tls) in [(false, false), (true, false), (true, true)] {
                assert_eq!(exposure_warning(&a, token, tls), None);
            }
        }
        for a in [any, lan] {
            assert!(
                exposure_warning(&a, false, true).is_some_and(|w| w.contains("without a token"))
            );
            assert!(exposure_warning(&a, true, false).is_some_and(|w| w.contains("clear text")));
            assert_eq!(exposure_warning(&a, true, true), None);
        }
    }

    #[test]
    fn bearer_token_matches_only_itself() {
        let t = Token::new("s3cret");
        assert!(t.matches_header(Some(b"Bearer s3cret")));
        assert!(t.matches_header(Some(b"bearer s3cret ")));
        assert!(!t.matches_header(Some(b"Bearer s3cre")));
        assert!(!t.matches_header(Some(b"Bearer s3cret2")));
        assert!(!t.matches_header(Some(b"s3cret")));
        assert!(!t.matches_header(None));
        assert_eq!(format!("{t:?}"), "Token(..)");
    }
}
