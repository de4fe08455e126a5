//! The accept loop's caps and timeouts, with small settings, over real loopback sockets
//! (peers told apart by their source address: 127.0.0.1, 127.0.0.2, ...).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

use super::*;
use crate::sink::metrics::{Metrics, MetricsConfig};

fn limits() -> Limits {
    Limits {
        max_connections: 3,
        max_connections_per_peer: 2,
        handshake_timeout_ms: 300,
        header_timeout_ms: 300,
        idle_timeout_ms: 300,
        body_timeout_ms: 300,
        max_streams_per_connection: 4,
    }
}

async fn connect_from(peer: u8, to: SocketAddr) -> TcpStream {
    let s = TcpSocket::new_v4().expect("socket");
    s.bind(SocketAddr::new(
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, peer)),
        0,
    ))
    .expect("bind");
    s.connect(to).await.expect("connect")
}

/// Whether the server closed the connection within `within` (EOF or reset on read).
async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 512];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
        }
    }
}

async fn get(s: &mut TcpStream, path: &str) -> String {
    s.write_all(format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let mut buf = vec![0u8; 1 << 20];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
        .await
        .expect("answer in time")
        .expect("read");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// The count once it has settled (a close is seen by the client a moment before it is
/// counted).
async fn counted(metrics: &Metrics, listener: &str, reason: &str) -> f64 {
    let mut last = read_count(metrics, listener, reason);
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(25)).await;
        let now = read_count(metrics, listener, reason);
        if now == last && now > 0.0 {
            break;
        }
        last = now;
    }
    last
}

fn read_count(metrics: &Metrics, listener: &str, reason: &str) -> f64 {
    let (_, text) = metrics.render();
    let text = String::from_utf8_lossy(&text);
    let key = format!(
        "retryscope_listener_connections_refused_total{{listener=\"{listener}\",reason=\"{reason}\"}} "
    );
    text.lines()
        .find_map(|l| l.strip_prefix(&key))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

async fn metrics_server(l: Limits) -> (SocketAddr, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new(MetricsConfig::default()).expect("metrics"));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(crate::server::serve_limited(
        listener,
        metrics.clone(),
        Arc::new(AtomicBool::new(true)),
        l,
        std::future::pending(),
    ));
    (addr, metrics)
}

#[tokio::test]
async fn connections_over_the_caps_are_closed_at_once_and_counted() {
    let (addr, metrics) = metrics_server(Limits {
        header_timeout_ms: 60_000,
        idle_timeout_ms: 60_000,
        ..limits()
    })
    .await;
    // Two from one peer are served and held.
    let mut a = connect_from(1, addr).await;
    let mut b = connect_from(1, addr).await;
    assert!(get(&mut a, "/healthz").await.starts_with("HTTP/1.1 200"));
    assert!(get(&mut b, "/healthz").await.starts_with("HTTP/1.1 200"));
    // A third from the same peer is closed at once.
    let mut c = connect_from(1, addr).await;
    assert!(closed_within(&mut c, Duration::from_secs(2)).await);
    assert_eq!(counted(&metrics, "metrics", "peer_cap").await, 1.0);
    // Another peer still gets in, up to the listener's cap ...
    let mut d = connect_from(2, addr).await;
    assert!(get(&mut d, "/metrics").await.starts_with("HTTP/1.1 200"));
    // ... beyond which everyone is refused.
    let mut e = connect_from(3, addr).await;
    assert!(closed_within(&mut e, Duration::from_secs(2)).await);
    assert_eq!(counted(&metrics, "metrics", "listener_cap").await, 1.0);
    // A slot given back is free again.
    drop(a);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut f = connect_from(3, addr).await;
    assert!(get(&mut f, "/healthz").await.starts_with("HTTP/1.1 200"));
    assert!(!closed_within(&mut b, Duration::from_millis(100)).await);
}

#[tokio::test]
async fn a_connection_with_no_request_is_closed_after_the_header_timeout() {
    let (addr, metrics) = metrics_server(limits()).await;
    let t = Instant::now();
    let mut idle = connect_from(1, addr).await;
    // Half a request line, never finished.
    idle.write_all(b"GET /metr").await.expect("write");
    assert!(closed_within(&mut idle, Duration::from_secs(3)).await);
    assert!(
        t.elapsed() >= Duration::from_millis(250),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(counted(&metrics, "metrics", "header_timeout").await, 1.0);
    // Nothing at all (an HTTP/2 client that never sends its preface looks the same here).
    let mut silent = connect_from(1, addr).await;
    assert!(closed_within(&mut silent, Duration::from_secs(3)).await);
    assert!(counted(&metrics, "metrics", "header_timeout").await >= 2.0);
}

/// A plain HTTP/1 server on the generic loop whose answers take `work`.
async fn slow_server(l: Limits, work: Duration) -> (SocketAddr, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new(MetricsConfig::default()).expect("metrics"));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let gate = Gate::new(Name::Proxy, l, Some(metrics.clone()));
    tokio::spawn(serve(
        listener,
        gate,
        std::future::pending(),
        Duration::ZERO,
        move |stream, conn| async move {
            let svc = conn.track(hyper::service::service_fn(move |_req| async move {
                tokio::time::sleep(work).await;
                Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(
                    bytes::Bytes::from_static(b"done"),
                )))
            }));
            let served = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(conn.watch(stream)), svc);
            conn.run(served, |c| c.graceful_shutdown(), std::future::pending())
                .await;
        },
    ));
    (addr, metrics)
}

#[tokio::test]
async fn idle_connections_are_closed_but_never_while_a_request_is_in_flight() {
    let (addr, metrics) = slow_server(limits(), Duration::from_millis(900)).await;
    let mut s = connect_from(1, addr).await;
    // The answer takes three idle timeouts: the connection stays open for it.
    let answer = get(&mut s, "/").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("done"), "{answer}");
    assert_eq!(read_count(&metrics, "proxy", "idle_timeout"), 0.0);
    // Then nothing happens: closed after the idle timeout.
    let t = Instant::now();
    assert!(closed_within(&mut s, Duration::from_secs(3)).await);
    assert!(
        t.elapsed() >= Duration::from_millis(250),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(counted(&metrics, "proxy", "idle_timeout").await, 1.0);
}

#[tokio::test]
async fn a_tls_handshake_that_never_finishes_is_cut_and_counted() {
    let dir = tempfile::tempdir().expect("tmp");
    let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).expect("cert");
    let (cert, key) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
    std::fs::write(&cert, ck.cert.pem()).expect("write");
    std::fs::write(&key, ck.signing_key.serialize_pem()).expect("write");
    let acceptor = tokio_rustls::TlsAcceptor::from(
        crate::source::otlp::auth::tls_config(&cert, &key, &[b"h2"]).expect("tls"),
    );
    let metrics = Arc::new(Metrics::new(MetricsConfig::default()).expect("metrics"));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let gate = Gate::new(Name::OtlpGrpc, limits(), Some(metrics.clone()));
    tokio::spawn(serve(
        listener,
        gate,
        std::future::pending(),
        Duration::ZERO,
        move |stream, conn| {
            let acceptor = acceptor.clone();
            async move {
                let _ = conn.tls(stream, Some(acceptor)).await;
            }
        },
    ));
    let t = Instant::now();
    let mut s = connect_from(1, addr).await;
    // A TLS record header promising a ClientHello that never comes.
    s.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00])
        .await
        .expect("write");
    assert!(closed_within(&mut s, Duration::from_secs(3)).await);
    assert!(t.elapsed() >= Duration::from_millis(250));
    assert_eq!(
        counted(&metrics, "otlp_grpc", "handshake_timeout").await,
        1.0
    );
}
