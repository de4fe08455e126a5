//! The OTLP listeners over TLS (`--otlp-tls-cert`, `--otlp-tls-key`) with a bearer token, as
//! a real process: a certificate made here (rcgen, self-signed for 127.0.0.1) is the client's
//! only trusted root; OTLP/HTTP and OTLP/gRPC (opentelemetry-proto's tonic client over a
//! rustls connection) are accepted, plain-text connections are not.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_client::LogsServiceClient;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::free_port;

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn connector(cert: &[u8]) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from(cert.to_vec()))
        .expect("root");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    tokio_rustls::TlsConnector::from(Arc::new(cfg))
}

#[test]
fn tls_listeners_take_otlp_over_http_and_grpc_with_the_token() {
    let dir = tempfile::tempdir().expect("tmp");
    let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).expect("cert");
    let (cert_pem, key_pem) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_pem, ck.cert.pem()).expect("write");
    std::fs::write(&key_pem, ck.signing_key.serialize_pem()).expect("write");
    let token = dir.path().join("token");
    std::fs::write(&token, "tok-123\n").expect("write");
    let (http, grpc, metrics) = (free_port(), free_port(), free_port());
    let _child = Kill(
        Command::new(env!("CARGO_BIN_EXE_retryscope"))
            .args(["run", "--findings-out", ""])
            .args(["--metrics-addr", &format!("127.0.0.1:{metrics}")])
            .args(["--otlp-listen", &format!("127.0.0.1:{http}")])
            .args(["--otlp-grpc-listen", &format!("127.0.0.1:{grpc}")])
            .args(["--otlp-tls-cert", cert_pem.to_str().expect("utf-8")])
            .args(["--otlp-tls-key", key_pem.to_str().expect("utf-8")])
            .args(["--otlp-listen-token-file", token.to_str().expect("utf-8")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start"),
    );
    let tls = connector(ck.cert.der());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let body = br#"{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"body":{"stringValue":"x"}}]}]}]}"#;
        // OTLP/HTTP over TLS (wait for the listener).
        let deadline = Instant::now() + Duration::from_secs(30);
        let answer = loop {
            let attempt = async {
                let tcp = tokio::net::TcpStream::connect(("127.0.0.1", http)).await?;
                let mut s = tls
                    .connect(ServerName::try_from("127.0.0.1").expect("name"), tcp)
                    .await?;
                let head = format!(
                    "POST /v1/logs HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\nAuthorization: Bearer tok-123\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                );
                s.write_all(head.as_bytes()).await?;
                s.write_all(body).await?;
                let mut out = Vec::new();
                let _ = s.read_to_end(&mut out).await;
                Ok::<_, std::io::Error>(String::from_utf8_lossy(&out).into_owned())
            };
            match attempt.await {
                Ok(a) if !a.is_empty() => break a,
                _ => {
                    assert!(Instant::now() < deadline, "no TLS listener");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        };
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        // Plain text on the TLS port gets no OTLP answer.
        let mut plain = tokio::net::TcpStream::connect(("127.0.0.1", http))
            .await
            .expect("connect");
        plain
            .write_all(b"POST /v1/logs HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
            .await
            .expect("write");
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), plain.read_to_end(&mut out)).await;
        assert!(!String::from_utf8_lossy(&out).contains("200 OK"));
        // OTLP/gRPC over TLS (h2 by ALPN), with and without the token.
        let tls2 = tls.clone();
        let channel = tonic::transport::Endpoint::from_static("http://127.0.0.1")
            .connect_with_connector(tower::service_fn(move |_: http::Uri| {
                let tls = tls2.clone();
                async move {
                    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", grpc)).await?;
                    let s = tls
                        .connect(ServerName::try_from("127.0.0.1").expect("name"), tcp)
                        .await?;
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(s))
                }
            }))
            .await
            .expect("gRPC over TLS");
        let mut client = LogsServiceClient::new(channel);
        let msg: ExportLogsServiceRequest = serde_json::from_slice(body).expect("request");
        let denied = client.export(msg.clone()).await.expect_err("no token");
        assert_eq!(denied.code(), tonic::Code::Unauthenticated);
        let mut req = tonic::Request::new(msg);
        req.metadata_mut()
            .insert("authorization", "Bearer tok-123".parse().expect("ascii"));
        client.export(req).await.expect("accepted over TLS");
    });
}
