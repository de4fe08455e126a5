//! The OTLP receivers of `otlp_receiver.rs` behind TLS, for export tests: a throwaway CA made
//! with rcgen in the test, a server certificate for 127.0.0.1 and `localhost` signed by it,
//! and optionally a client certificate the server requires (mTLS). rustls on `ring`, served
//! with tokio-rustls; gRPC negotiates `h2` by ALPN, as tonic's client expects.
#![allow(dead_code)] // each test crate uses a different part of it

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hyper_util::rt::{TokioExecutor, TokioIo};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::TraceServiceServer;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::otlp_receiver::{Grpc, Seen, handle_http};

/// A CA with one server and one client certificate, written as PEM files into a temp dir.
pub struct Pki {
    pub dir: tempfile::TempDir,
    ca_der: CertificateDer<'static>,
    server_chain: Vec<CertificateDer<'static>>,
    server_key: Vec<u8>,
}

impl Pki {
    /// `ca.pem`, `client.pem`, `client.key`, `server.pem` and `server.key` in a fresh temp dir
    /// (the server's files for servers run as processes: nats-server).
    pub fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "retryscope test CA");
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();

        let server_key = KeyPair::generate().unwrap();
        let server = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .unwrap()
            .signed_by(&server_key, &ca)
            .unwrap();
        let client_key = KeyPair::generate().unwrap();
        let mut client_params = CertificateParams::new(vec!["retryscope".to_owned()]).unwrap();
        client_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "retryscope");
        let client = client_params.signed_by(&client_key, &ca).unwrap();

        std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
        std::fs::write(dir.path().join("client.pem"), client.pem()).unwrap();
        std::fs::write(dir.path().join("client.key"), client_key.serialize_pem()).unwrap();
        std::fs::write(dir.path().join("server.pem"), server.pem()).unwrap();
        std::fs::write(dir.path().join("server.key"), server_key.serialize_pem()).unwrap();
        Pki {
            ca_der: ca.der().clone(),
            server_chain: vec![server.der().clone()],
            server_key: server_key.serialize_der(),
            dir,
        }
    }

    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }
    pub fn client_cert(&self) -> PathBuf {
        self.dir.path().join("client.pem")
    }
    pub fn client_key(&self) -> PathBuf {
        self.dir.path().join("client.key")
    }
    pub fn server_cert(&self) -> PathBuf {
        self.dir.path().join("server.pem")
    }
    pub fn server_key_file(&self) -> PathBuf {
        self.dir.path().join("server.key")
    }

    /// The server's TLS configuration; with `require_client` only clients with a certificate
    /// from this CA get through.
    pub fn server_config(&self, alpn: &[u8], require_client: bool) -> Arc<rustls::ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap();
        let builder = if require_client {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(self.ca_der.clone()).unwrap();
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .unwrap();
            builder.with_client_cert_verifier(verifier)
        } else {
            builder.with_no_client_auth()
        };
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.server_key.clone()));
        let mut config = builder
            .with_single_cert(self.server_chain.clone(), key)
            .unwrap();
        config.alpn_protocols = vec![alpn.to_vec()];
        Arc::new(config)
    }
}

/// Writes a second, unrelated CA to `path` (a CA file that does not sign the server).
pub fn write_other_ca(path: &Path) {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
    std::fs::write(path, ca.pem()).unwrap();
}

/// The gRPC receiver over TLS. Failed handshakes are counted in the returned counter.
pub async fn serve_grpc_tls(
    seen: Seen,
    config: Arc<rustls::ServerConfig>,
) -> (SocketAddr, Arc<std::sync::atomic::AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let failed = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let acceptor = TlsAcceptor::from(config);
    let svc = TraceServiceServer::new(Grpc(seen));
    let counter = failed.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let svc = hyper_util::service::TowerToHyperService::new(svc.clone());
            let acceptor = acceptor.clone();
            let counter = counter.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else {
                    counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    return;
                };
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    (addr, failed)
}

/// The HTTP (`POST /v1/traces`, protobuf) receiver over TLS.
pub async fn serve_http_tls(
    seen: Seen,
    config: Arc<rustls::ServerConfig>,
) -> (SocketAddr, Arc<std::sync::atomic::AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let failed = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let acceptor = TlsAcceptor::from(config);
    let counter = failed.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let seen = seen.clone();
            let acceptor = acceptor.clone();
            let counter = counter.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else {
                    counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    return;
                };
                let svc = hyper::service::service_fn(move |req| handle_http(seen.clone(), req));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    (addr, failed)
}
