//! The proxy's transports: upstream HTTPS with rustls (HTTP/2 or HTTP/1.1 by ALPN, a test CA
//! given with `ca_file`), and the listener's HTTP/2 without TLS (h2c), where an injected
//! reset is a `RST_STREAM` of that stream only.

use crate::proxy_support;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use proxy_support::{Lines, in_repo, load_from, request_for};
use retryscope::proxy::{How, InjectRule, Point, Proxy, ProxySettings, Tracker, UpstreamSettings};

/// A TLS upstream for 127.0.0.1 signed by a throwaway CA (written to `dir/ca.pem`),
/// speaking the ALPN protocols given; it answers every request with `body` as SSE and
/// records each request's HTTP version.
async fn tls_upstream(
    dir: &std::path::Path,
    alpn: &[&[u8]],
    body: Bytes,
) -> (std::net::SocketAddr, Arc<Mutex<Vec<http::Version>>>) {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca =
        CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("key")).expect("ca");
    let key = KeyPair::generate().expect("key");
    let cert = CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .expect("params")
        .signed_by(&key, &ca)
        .expect("cert");
    std::fs::write(dir.join("ca.pem"), ca.pem()).expect("write");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(cert.der().to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .expect("cert");
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let versions = Arc::new(Mutex::new(Vec::new()));
    let seen = versions.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, seen, body) = (acceptor.clone(), seen.clone(), body.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let svc = hyper::service::service_fn(move |req: http::Request<Incoming>| {
                    let (seen, body) = (seen.clone(), body.clone());
                    async move {
                        seen.lock().expect("lock").push(req.version());
                        let _ = req.into_body().collect().await;
                        let mut resp = http::Response::new(Full::new(body));
                        resp.headers_mut()
                            .insert("content-type", "text/event-stream".parse().expect("ct"));
                        Ok::<_, Infallible>(resp)
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    (addr, versions)
}

async fn proxy_to(
    url: String,
    ca_file: Option<std::path::PathBuf>,
    inject: Option<InjectRule>,
) -> (std::net::SocketAddr, Lines) {
    let settings = ProxySettings {
        upstream: vec![UpstreamSettings {
            prefix: "/".into(),
            url,
            strip_prefix: None,
            inject,
        }],
        ca_file,
        ..ProxySettings::default()
    };
    let lines = Lines::default();
    let proxy = Arc::new(
        Proxy::new(
            &settings,
            Tracker::new(Box::new(lines.clone()), "t".into()),
            Box::new(|_| {}),
        )
        .expect("proxy"),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(retryscope::proxy::serve(
        listener,
        proxy,
        std::future::pending(),
    ));
    (addr, lines)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_upstream_over_http2_and_http11_by_alpn() {
    let s = load_from(&in_repo(), "anthropic", "duplicate-message-start.sse");
    let body = Bytes::from(s.body());
    for (alpn, want) in [
        (&[b"h2".as_slice(), b"http/1.1"][..], http::Version::HTTP_2),
        (&[b"http/1.1".as_slice()][..], http::Version::HTTP_11),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let (up, versions) = tls_upstream(dir.path(), alpn, body.clone()).await;
        let (addr, lines) = proxy_to(
            format!("https://127.0.0.1:{}", up.port()),
            Some(dir.path().join("ca.pem")),
            None,
        )
        .await;
        let got = proxy_support::post(addr, &s.path, &request_for(&s.path, "hi"), &[]).await;
        assert_eq!(got.status, 200);
        assert_eq!(got.body, s.body());
        assert_eq!(versions.lock().expect("lock").as_slice(), [want]);
        assert!(!lines.of_type("provider_chunk").is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_upstream_with_an_unknown_ca_is_a_502_and_an_error() {
    let s = load_from(&in_repo(), "anthropic", "duplicate-message-start.sse");
    let dir = tempfile::tempdir().expect("tempdir");
    let (up, versions) = tls_upstream(dir.path(), &[b"h2"], Bytes::from(s.body())).await;
    let (addr, lines) = proxy_to(format!("https://127.0.0.1:{}", up.port()), None, None).await;
    let got = proxy_support::post(addr, &s.path, &request_for(&s.path, "hi"), &[]).await;
    assert_eq!(got.status, 502);
    assert!(versions.lock().expect("lock").is_empty());
    let errors = lines.of_type("error");
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0]["code"], "upstream_error");
}

/// An h2c (prior knowledge) client.
async fn h2c(addr: std::net::SocketAddr) -> hyper::client::conn::http2::SendRequest<Full<Bytes>> {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .expect("h2 handshake");
    tokio::spawn(conn);
    send
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_listener_passes_streams_and_resets_only_the_cut_stream() {
    let s = load_from(
        &in_repo(),
        "openai-chat",
        "whole-call-usage-on-finish.chunks.txt",
    );
    let mock = proxy_support::Mock::start(vec![s.clone()], None).await;
    let rule = InjectRule {
        point: Point::BeforeFinish,
        how: How::Reset,
        first: Some(1),
        fraction: None,
        seed: 0,
        matches: retryscope::proxy::InjectMatch::All,
    };
    let (addr, lines) = proxy_to(format!("http://{}", mock.addr), None, Some(rule)).await;
    let mut send = h2c(addr).await;
    let req = || {
        http::Request::post(format!("http://{addr}{}", s.path))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(request_for(&s.path, "hi"))))
            .expect("request")
    };
    // The first stream is cut: its body fails with a stream error, not the connection.
    let resp = send.send_request(req()).await.expect("response head");
    assert_eq!(resp.version(), http::Version::HTTP_2);
    assert!(
        resp.into_body().collect().await.is_err(),
        "the cut stream ends in an error"
    );
    // The same connection carries the retry, whole.
    let resp = send
        .send_request(req())
        .await
        .expect("the connection survives");
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    assert_eq!(body.as_ref(), s.body().as_slice());
    assert_eq!(lines.of_type("retry").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_cancelled_before_the_upstream_answers_ends_its_attempt() {
    // An attempt left open is a response in flight for the correlator (it holds a wire-only
    // turn past the idle timeout): a client that gives up while the upstream has not yet
    // answered (here an h2c RST_STREAM) must end it, as `client_closed`.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let up = silent.local_addr().expect("addr");
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((tcp, _)) = silent.accept().await {
            held.push(tcp);
        }
    });
    let (addr, lines) = proxy_to(format!("http://{up}"), None, None).await;
    let mut send = h2c(addr).await;
    let path = "/v1/chat/completions";
    let req = http::Request::post(format!("http://{addr}{path}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(request_for(path, "hi"))))
        .expect("request");
    let pending = send.send_request(req);
    let gave_up = tokio::time::timeout(std::time::Duration::from_millis(300), pending).await;
    assert!(gave_up.is_err(), "the silent upstream never answers");
    let mut errors = Vec::new();
    for _ in 0..100 {
        errors = lines.of_type("error");
        if !errors.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(lines.of_type("attempt_start").len(), 1);
    assert_eq!(errors.len(), 1, "{:?}", lines.values());
    assert_eq!(errors[0]["code"], "client_closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_body_that_trickles_past_the_body_deadline_is_answered_408_and_counted() {
    // Issue 24: the proxy read request bodies without a deadline, so a client sending a byte
    // now and then (or nothing after the headers) held its connection until the per-peer cap.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let settings = ProxySettings {
        upstream: vec![UpstreamSettings {
            prefix: "/".into(),
            url: "http://127.0.0.1:9".into(), // never reached
            strip_prefix: None,
            inject: None,
        }],
        ..ProxySettings::default()
    };
    let proxy = Arc::new(
        Proxy::new(
            &settings,
            Tracker::new(Box::new(Lines::default()), "t".into()),
            Box::new(|_| {}),
        )
        .expect("proxy"),
    );
    let metrics =
        Arc::new(retryscope::sink::metrics::Metrics::new(Default::default()).expect("metrics"));
    let limits = retryscope::listener::Limits {
        body_timeout_ms: 300,
        ..retryscope::listener::Limits::default()
    };
    let gate = retryscope::listener::Gate::new(
        retryscope::listener::Name::Proxy,
        limits,
        Some(metrics.clone()),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(retryscope::proxy::serve_gated(
        listener,
        proxy,
        gate,
        std::future::pending(),
    ));
    let mut tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    tcp.write_all(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"mo",
    )
    .await
    .expect("send the start");
    let started = std::time::Instant::now();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        tcp.read_to_end(&mut answer),
    )
    .await;
    assert!(read.is_ok(), "the proxy answered and closed within 5 s");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(250),
        "after the deadline, not before"
    );
    let (_, text) = metrics.render();
    let text = String::from_utf8_lossy(&text);
    assert!(
        text.contains("retryscope_listener_connections_refused_total{listener=\"proxy\",reason=\"body_timeout\"} 1"),
        "{text}"
    );
}
