//! TLS for OTLP export: which certificates to trust (the system's roots plus an optional CA
//! file) and an optional client certificate and key (mTLS), read once at startup and turned
//! into the two clients' configurations: a rustls [`ClientConfig`] behind hyper for
//! OTLP/HTTP, a tonic `ClientTlsConfig` for OTLP/gRPC. rustls runs on the `ring` provider
//! only (the one async-nats uses), so the process has one crypto provider.
//!
//! Every problem is a [`TraceError::Tls`] naming the setting and the file, at startup: an
//! unreadable file, a file with no certificate or no key, a certificate without its key, and
//! an `https://` endpoint with nothing to trust (no system roots and no CA file).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};

use super::TraceError;

/// The setting that names a CA file, as the user may have spelled it.
pub const CA_FILE_SETTING: &str =
    "--otlp-ca-file / [otlp] ca_file / OTEL_EXPORTER_OTLP_CERTIFICATE";
/// The setting that names a client certificate file.
pub const CLIENT_CERT_SETTING: &str =
    "--otlp-client-cert / [otlp] client_cert / OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE";
/// The setting that names a client key file.
pub const CLIENT_KEY_SETTING: &str =
    "--otlp-client-key / [otlp] client_key / OTEL_EXPORTER_OTLP_CLIENT_KEY";

/// Certificate files for export over TLS; all optional.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM file of CA certificates trusted in addition to the system's roots.
    pub ca_file: Option<PathBuf>,
    /// PEM file of the client certificate (chain) for mTLS; needs `client_key`.
    pub client_cert: Option<PathBuf>,
    /// PEM file of the client's private key for mTLS; needs `client_cert`.
    pub client_key: Option<PathBuf>,
}

impl TlsFiles {
    /// Whether any file is set.
    pub fn is_set(&self) -> bool {
        self.ca_file.is_some() || self.client_cert.is_some() || self.client_key.is_some()
    }
}

/// The certificates of [`TlsFiles`], read and checked, plus the system roots.
#[derive(Debug, Clone)]
pub struct LoadedTls {
    /// Trusted roots: the system's, then the CA file's.
    roots: Vec<CertificateDer<'static>>,
    /// The CA file as read (PEM), for tonic.
    ca_pem: Option<Vec<u8>>,
    /// Whether any system root was found.
    has_system_roots: bool,
    /// Client certificate chain and key, PEM, for mTLS.
    identity: Option<Identity>,
}

#[derive(Clone)]
struct Identity {
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
    certs: Vec<CertificateDer<'static>>,
    key: Arc<PrivateKeyDer<'static>>,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print key material.
        f.debug_struct("Identity")
            .field("certs", &self.certs.len())
            .finish_non_exhaustive()
    }
}

fn tls_error(setting: &'static str, path: &Path, message: impl std::fmt::Display) -> TraceError {
    TraceError::Tls {
        setting,
        message: format!("`{}`: {message}", path.display()),
    }
}

fn read(setting: &'static str, path: &Path) -> Result<Vec<u8>, TraceError> {
    std::fs::read(path).map_err(|e| tls_error(setting, path, e))
}

fn certs_in(
    setting: &'static str,
    path: &Path,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, TraceError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| tls_error(setting, path, format!("not a PEM certificate file: {e}")))?;
    if certs.is_empty() {
        return Err(tls_error(setting, path, "holds no PEM certificate"));
    }
    Ok(certs)
}

impl LoadedTls {
    /// Read `files` and the system roots (`system_roots`: false skips them, for tests that
    /// must not trust anything but their own CA).
    pub fn load(files: &TlsFiles, system_roots: bool) -> Result<LoadedTls, TraceError> {
        let mut roots = Vec::new();
        if system_roots {
            // Unreadable individual system certificates are skipped, as browsers do.
            let found = rustls_native_certs::load_native_certs();
            for e in &found.errors {
                tracing::debug!(error = %e, "skipping a system CA certificate");
            }
            roots.extend(found.certs);
        }
        let has_system_roots = !roots.is_empty();
        let mut ca_pem = None;
        if let Some(path) = &files.ca_file {
            let pem = read(CA_FILE_SETTING, path)?;
            roots.extend(certs_in(CA_FILE_SETTING, path, &pem)?);
            ca_pem = Some(pem);
        }
        let identity = match (&files.client_cert, &files.client_key) {
            (None, None) => None,
            (Some(_), None) => {
                return Err(TraceError::Tls {
                    setting: CLIENT_KEY_SETTING,
                    message: "a client certificate is set but no client key".to_owned(),
                });
            }
            (None, Some(_)) => {
                return Err(TraceError::Tls {
                    setting: CLIENT_CERT_SETTING,
                    message: "a client key is set but no client certificate".to_owned(),
                });
            }
            (Some(cert), Some(key)) => {
                let cert_pem = read(CLIENT_CERT_SETTING, cert)?;
                let certs = certs_in(CLIENT_CERT_SETTING, cert, &cert_pem)?;
                let key_pem = read(CLIENT_KEY_SETTING, key)?;
                let parsed = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
                    tls_error(CLIENT_KEY_SETTING, key, format!("no PEM private key: {e}"))
                })?;
                Some(Identity {
                    cert_pem,
                    key_pem,
                    certs,
                    key: Arc::new(parsed),
                })
            }
        };
        Ok(LoadedTls {
            roots,
            ca_pem,
            has_system_roots,
            identity,
        })
    }

    /// An error when an `https://` endpoint could not be verified: nothing to trust.
    pub fn check_usable(&self) -> Result<(), TraceError> {
        if self.roots.is_empty() {
            return Err(TraceError::Tls {
                setting: CA_FILE_SETTING,
                message: "the endpoint is https:// but no system CA certificates were found \
                          and no CA file is set"
                    .to_owned(),
            });
        }
        Ok(())
    }

    /// The rustls configuration for OTLP/HTTP (ring provider, TLS 1.2 and 1.3).
    pub fn rustls_config(&self) -> Result<ClientConfig, TraceError> {
        let mut store = RootCertStore::empty();
        let (added, ignored) = store.add_parsable_certificates(self.roots.iter().cloned());
        if ignored > 0 {
            tracing::debug!(added, ignored, "some CA certificates could not be used");
        }
        let builder =
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .map_err(|e| TraceError::Tls {
                    setting: CA_FILE_SETTING,
                    message: format!("cannot set up rustls: {e}"),
                })?
                .with_root_certificates(store);
        let config = match &self.identity {
            None => builder.with_no_client_auth(),
            Some(id) => builder
                .with_client_auth_cert(id.certs.clone(), id.key.clone_key())
                .map_err(|e| TraceError::Tls {
                    setting: CLIENT_KEY_SETTING,
                    message: format!("the client certificate and key do not go together: {e}"),
                })?,
        };
        Ok(config)
    }

    /// The tonic configuration for OTLP/gRPC: the system roots (when any were found), the
    /// CA file and the client identity.
    pub fn tonic_config(&self) -> tonic::transport::ClientTlsConfig {
        use tonic::transport::{Certificate, ClientTlsConfig, Identity as TonicIdentity};
        let mut config = ClientTlsConfig::new();
        if self.has_system_roots {
            config = config.with_native_roots();
        }
        if let Some(pem) = &self.ca_pem {
            config = config.ca_certificate(Certificate::from_pem(pem));
        }
        if let Some(id) = &self.identity {
            config = config.identity(TonicIdentity::from_pem(&id.cert_pem, &id.key_pem));
        }
        config
    }
}

type Hyper = opentelemetry_http::hyper::HyperClient<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
>;

/// hyper's client for OTLP/HTTP: plain `http://`, or `https://` with TLS. A failed request
/// is logged with its whole cause chain (the exporter itself reports only "network error",
/// which hides a refused certificate).
#[derive(Debug, Clone)]
pub struct OtlpHttpClient(Hyper);

/// "outer: inner: innermost", each cause once.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = vec![e.to_string()];
    let mut source = e.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = cause.source();
    }
    parts.join(": ")
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for OtlpHttpClient {
    async fn send_bytes(
        &self,
        request: opentelemetry_http::Request<opentelemetry_http::Bytes>,
    ) -> Result<
        opentelemetry_http::Response<opentelemetry_http::Bytes>,
        opentelemetry_http::HttpError,
    > {
        let result = self.0.send_bytes(request).await;
        if let Err(e) = &result {
            // Rate-limited per call site by the log layer (`telemetry::logs`).
            tracing::warn!(error = %chain(e.as_ref()), "OTLP/HTTP request failed");
        }
        result
    }
}

/// The OTLP/HTTP client; `tls` is `None` for an `http://` endpoint.
pub fn http_client(
    tls: Option<&LoadedTls>,
    timeout: std::time::Duration,
) -> Result<OtlpHttpClient, TraceError> {
    let config = match tls {
        Some(tls) => tls.rustls_config()?,
        // Never used for http://, but the connector needs one: trust nothing.
        None => {
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .map_err(|e| TraceError::Tls {
                    setting: CA_FILE_SETTING,
                    message: format!("cannot set up rustls: {e}"),
                })?
                .with_root_certificates(RootCertStore::empty())
                .with_no_client_auth()
        }
    };
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_or_http()
        .enable_http1()
        .build();
    Ok(OtlpHttpClient(opentelemetry_http::hyper::HyperClient::new(
        connector, timeout, None,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(dir: &tempfile::TempDir, name: &str, body: &str) -> PathBuf {
        let p = dir.path().join(name);
        std::fs::write(&p, body).unwrap();
        p
    }

    #[test]
    fn bad_files_name_their_setting() {
        let dir = tempfile::tempdir().unwrap();
        let missing = TlsFiles {
            ca_file: Some(dir.path().join("nope.pem")),
            ..TlsFiles::default()
        };
        let err = LoadedTls::load(&missing, false).unwrap_err().to_string();
        assert!(
            err.contains("--otlp-ca-file") && err.contains("nope.pem"),
            "{err}"
        );

        let empty = TlsFiles {
            ca_file: Some(file(&dir, "empty.pem", "not a certificate\n")),
            ..TlsFiles::default()
        };
        let err = LoadedTls::load(&empty, false).unwrap_err().to_string();
        assert!(err.contains("no PEM certificate"), "{err}");

        let half = TlsFiles {
            client_cert: Some(file(&dir, "c.pem", "x")),
            ..TlsFiles::default()
        };
        let err = LoadedTls::load(&half, false).unwrap_err().to_string();
        assert!(err.contains("--otlp-client-key"), "{err}");
    }

    #[test]
    fn https_with_nothing_to_trust_is_an_error() {
        let none = LoadedTls::load(&TlsFiles::default(), false).unwrap();
        let err = none.check_usable().unwrap_err().to_string();
        assert!(err.contains("no CA file"), "{err}");
    }
}
