//! How retryscope meets a NATS deployment: the connection (URL, credentials, TLS) and what it
//! creates there (replicas and retention of its streams and key-value buckets).
//!
//! Owns: [`Deploy`], shared by `ship` and `run --nats`, and [`Deploy::connect`]. What exists
//! already is used as it is: replicas and retention apply when retryscope creates a stream or
//! bucket, never to one an operator made (or changed) before.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::NatsError;

/// A NATS deployment as retryscope uses it.
#[derive(Debug, Clone)]
pub struct Deploy {
    /// Server URL(s), comma-separated (`nats://user:password@host:4222` carries a user).
    pub url: String,
    /// A credentials file (user JWT and seed, for servers in operator mode).
    pub creds: Option<PathBuf>,
    /// CA certificates (PEM) to trust for the server's certificate; implies TLS.
    pub ca: Option<PathBuf>,
    /// A client certificate and key (PEM) for servers that verify clients.
    pub client_cert: Option<(PathBuf, PathBuf)>,
    /// Replicas of every stream and bucket retryscope creates (a clustered JetStream: 3).
    pub replicas: usize,
    /// Shipped lines are kept this long (zero: until the disk limit of the server).
    pub events_max_age: Duration,
    /// Findings are kept this long (zero: forever).
    pub findings_max_age: Duration,
}

/// Credentials in a server URL.
#[derive(Debug, PartialEq, Eq)]
enum UrlAuth {
    /// `nats://user:password@host`.
    UserPassword(String, String),
    /// `nats://token@host` (NATS's convention for a bare user part).
    Token(String),
}

/// The credentials of the first URL that has some (async-nats 0.50 sends none it finds in a
/// URL; every server of one deployment takes the same).
fn url_auth(urls: &str) -> Option<UrlAuth> {
    urls.split(',').find_map(|u| {
        let u = url::Url::parse(u.trim()).ok()?;
        let decode = |s: &str| {
            url::form_urlencoded::parse(format!("x={s}").as_bytes())
                .next()
                .map(|(_, v)| v.into_owned())
        };
        let user = decode(u.username()).filter(|s| !s.is_empty())?;
        Some(match u.password() {
            Some(p) => UrlAuth::UserPassword(user, decode(p).unwrap_or_default()),
            None => UrlAuth::Token(user),
        })
    })
}

/// The URLs as they may be logged: without a user, password or token (which a URL may carry).
fn without_secrets(urls: &str) -> String {
    urls.split(',')
        .map(|u| match url::Url::parse(u.trim()) {
            Ok(mut u) if !u.cannot_be_a_base() => {
                let _ = u.set_username("");
                let _ = u.set_password(None);
                u.to_string()
            }
            // Not a URL with a host (`host:4222`): shown as it is unless it may hold a secret.
            _ if !u.contains('@') => u.trim().to_string(),
            _ => "(a URL that could not be read)".to_string(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Shipped lines are needed until every partition's checkpoint has passed them.
pub const DEFAULT_EVENTS_MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);
/// Findings are the cluster's output, read by people and alerting.
pub const DEFAULT_FINDINGS_MAX_AGE: Duration = Duration::from_secs(30 * 24 * 3600);

impl Deploy {
    /// `url` with no credentials or TLS, one replica and the default retention.
    pub fn plain(url: &str) -> Self {
        Deploy {
            url: url.to_string(),
            creds: None,
            ca: None,
            client_cert: None,
            replicas: 1,
            events_max_age: DEFAULT_EVENTS_MAX_AGE,
            findings_max_age: DEFAULT_FINDINGS_MAX_AGE,
        }
    }

    /// Connect with a name (shown in the server's connection list); once connected, the
    /// client reconnects by itself when the server goes away. A credentials or certificate
    /// file that cannot be read is an error here, before any connection is tried; so is a
    /// server that refuses the credentials (a user it does not know, a wrong password): that
    /// is the server's answer, and asking again would get the same. A server not reachable
    /// yet is waited for, trying again every 2 s at most (`RETRY_MAX`), until it answers (then
    /// its refusal is an error too, as at the first try) or `shutdown` is set (`None`).
    pub async fn connect(
        &self,
        name: &str,
        shutdown: &AtomicBool,
    ) -> Result<Option<async_nats::Client>, NatsError> {
        let creds = match &self.creds {
            Some(path) => {
                let text = tokio::fs::read_to_string(path).await.map_err(|e| {
                    NatsError::new(
                        "reading the NATS credentials file",
                        format!("{}: {e}", path.display()),
                    )
                })?;
                Some((path, text))
            }
            None => None,
        };
        for (what, path) in [("CA", self.ca.as_ref())].into_iter().chain(
            self.client_cert
                .iter()
                .flat_map(|(c, k)| [("client certificate", Some(c)), ("client key", Some(k))]),
        ) {
            if let Some(path) = path
                && let Err(e) = std::fs::metadata(path)
            {
                return Err(NatsError::new(
                    "reading a NATS TLS file",
                    format!("{what} {}: {e}", path.display()),
                ));
            }
        }
        let options = || -> Result<async_nats::ConnectOptions, NatsError> {
            let mut opts = async_nats::ConnectOptions::new().name(name);
            if let Some((path, text)) = &creds {
                opts = opts.credentials(text).map_err(|e| {
                    NatsError::new(
                        "reading the NATS credentials file",
                        format!("{}: {e}", path.display()),
                    )
                })?;
            }
            if let Some(auth) = url_auth(&self.url) {
                opts = match auth {
                    UrlAuth::UserPassword(user, password) => opts.user_and_password(user, password),
                    UrlAuth::Token(token) => opts.token(token),
                };
            }
            if let Some(ca) = &self.ca {
                opts = opts.add_root_certificates(ca.clone()).require_tls(true);
            }
            if let Some((cert, key)) = &self.client_cert {
                opts = opts
                    .add_client_certificate(cert.clone(), key.clone())
                    .require_tls(true);
            }
            Ok(opts)
        };
        // One attempt at a time, each to hear the server's answer: the client's own retry of
        // the initial connect (`retry_on_initial_connect`) retries a refusal too, for ever
        // and quietly, so a command given a user the server does not know, or a server that
        // came up after it and refuses it, would hang (and `ship`'s first requests timed out
        // meanwhile, ending it with a misleading error).
        let mut delay = RETRY_FIRST;
        let mut waiting = false;
        loop {
            match options()?.connect(self.url.as_str()).await {
                Ok(client) => {
                    if waiting {
                        tracing::info!(url = %without_secrets(&self.url), "NATS reached");
                    }
                    return Ok(Some(client));
                }
                Err(e) => {
                    if let Some(reason) = refusal(&e) {
                        return Err(NatsError::new(
                            "connecting to NATS",
                            format!(
                                "the server refused the credentials ({reason}); check \
                                 --nats-creds or the user in the URL"
                            ),
                        ));
                    }
                    // The server answered and TLS with it failed (its certificate is not
                    // signed by the CA given, names another host, or it wants a client
                    // certificate): waiting will not mend it, and "not reachable yet" hid it.
                    if let Some(reason) = tls_failure(&e) {
                        return Err(NatsError::new(
                            "connecting to NATS",
                            format!(
                                "TLS with the server failed ({reason}); check --nats-ca (the \
                                 CA that signed the server's certificate), the host in the URL \
                                 (the certificate's name) and --nats-cert/--nats-key"
                            ),
                        ));
                    }
                    if !waiting {
                        waiting = true;
                        tracing::warn!(error = %e, url = %without_secrets(&self.url),
                            "NATS not reachable yet; waiting for it");
                    }
                }
            }
            // Until the next attempt, stopping as soon as asked.
            let next = Instant::now() + delay;
            while let Some(left) = next.checked_duration_since(Instant::now()) {
                if shutdown.load(Ordering::SeqCst) {
                    return Ok(None);
                }
                tokio::time::sleep(left.min(SHUTDOWN_CHECK)).await;
            }
            if shutdown.load(Ordering::SeqCst) {
                return Ok(None);
            }
            delay = (delay * 2).min(RETRY_MAX);
        }
    }
}

/// The wait before the second attempt to reach a server; it doubles up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(100);
/// The longest wait between attempts to reach a server not up yet.
const RETRY_MAX: Duration = Duration::from_secs(2);
/// How often a wait for the server looks at the shutdown flag.
const SHUTDOWN_CHECK: Duration = Duration::from_millis(100);

/// The server's reason, if `e` is its refusal of the credentials.
fn refusal(e: &async_nats::ConnectError) -> Option<String> {
    use async_nats::ConnectErrorKind as Kind;
    match e.kind() {
        Kind::AuthorizationViolation | Kind::Authentication => Some(cause(e)),
        _ => None,
    }
}

/// What the error says beneath its kind (its source), or its kind.
fn cause(e: &async_nats::ConnectError) -> String {
    std::error::Error::source(e).map_or_else(|| e.kind().to_string(), |s| s.to_string())
}

/// What went wrong, if `e` is a failed TLS handshake or setup with a server that answered.
/// A handshake's failure comes as an I/O error wrapping rustls' own.
fn tls_failure(e: &async_nats::ConnectError) -> Option<String> {
    if e.kind() == async_nats::ConnectErrorKind::Tls {
        return Some(cause(e));
    }
    let io = std::error::Error::source(e)?.downcast_ref::<std::io::Error>()?;
    let tls = io.get_ref()?.downcast_ref::<rustls::Error>()?;
    Some(tls.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_user_password_or_token_is_read_and_decoded() {
        assert_eq!(
            url_auth("nats://collector:s%40cret@127.0.0.1:4222"),
            Some(UrlAuth::UserPassword("collector".into(), "s@cret".into()))
        );
        assert_eq!(
            url_auth("nats://a:4222, tls://tok3n@b:4222"),
            Some(UrlAuth::Token("tok3n".into()))
        );
        assert_eq!(url_auth("nats://127.0.0.1:4222"), None);
        assert_eq!(url_auth("127.0.0.1:4222"), None);
    }

    #[test]
    fn a_logged_url_carries_no_password_or_token() {
        let logged = without_secrets("nats://collector:s3cret@10.0.0.1:4222, tls://tok3n@b:4222");
        assert!(
            !logged.contains("s3cret") && !logged.contains("tok3n"),
            "{logged}"
        );
        assert!(
            logged.contains("10.0.0.1:4222") && logged.contains("b:4222"),
            "{logged}"
        );
        assert_eq!(without_secrets("127.0.0.1:4222"), "127.0.0.1:4222");
        assert!(!without_secrets("user:pw@host:4222").contains("pw"));
    }

    #[test]
    fn a_refused_login_is_told_from_a_server_not_reachable() {
        use async_nats::{ConnectError, ConnectErrorKind as Kind};
        assert_eq!(
            refusal(&ConnectError::new(Kind::AuthorizationViolation)).as_deref(),
            Some("authorization violation")
        );
        assert!(refusal(&ConnectError::new(Kind::Authentication)).is_some());
        for kind in [Kind::Io, Kind::TimedOut, Kind::Dns, Kind::Tls] {
            assert_eq!(refusal(&ConnectError::new(kind)), None, "{kind:?}");
        }
    }

    #[test]
    fn a_failed_handshake_is_told_from_a_server_not_reachable() {
        use async_nats::{ConnectError, ConnectErrorKind as Kind};
        let handshake = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        );
        let said = tls_failure(&ConnectError::with_source(Kind::Io, handshake));
        assert!(
            said.as_deref().is_some_and(|s| s.contains("UnknownIssuer")),
            "{said:?}"
        );
        assert!(tls_failure(&ConnectError::new(Kind::Tls)).is_some());
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(
            tls_failure(&ConnectError::with_source(Kind::Io, refused)),
            None
        );
        assert_eq!(tls_failure(&ConnectError::new(Kind::TimedOut)), None);
    }
}
