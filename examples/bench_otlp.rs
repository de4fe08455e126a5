//! Benchmark of the OTLP receiver (`retryscope run --otlp-listen`), as a real process fed by
//! OTLP/HTTP protobuf clients. Prints figures; asserts nothing about speed.
//!
//! ```sh
//! cargo build --release && cargo run --release --example bench_otlp -- [--sessions N] [--clients C] [--workers W] [--throughput-only]
//! ```
//! `--workers W` is passed to the collector (`run --workers`, default its own: 1);
//! `--throughput-only` skips the overload part.
//! - throughput: N gemini-cli sessions (the log records of its OTLP export, shaped like the
//!   committed capture: request, cut (`api_error`), retry notice, request, response, and the
//!   abandoned attempt's tool call: 6 records and one `abandoned_tool_executed` finding each),
//!   500 records per request, from C client threads, until `/metrics` shows every record read
//!   and every finding counted;
//! - sustained overload: clients send as fast as they can for 20 s against a small queue,
//!   retrying what is refused (429); the collector's peak resident memory (VmHWM), requests
//!   accepted and refused. Default bounds (100,000 open turns); every session is new, so what
//!   memory holds beyond the queue is open turns and sessions' decoder state.

#[path = "support/scrape.rs"]
mod scrape;
use scrape::scrape;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;

const RECORDS_PER_SESSION: u64 = 6;
const SESSIONS_PER_REQUEST: u64 = 500 / RECORDS_PER_SESSION;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn binary() -> PathBuf {
    let exe = std::env::current_exe().expect("exe");
    exe.parent()
        .and_then(|p| p.parent())
        .expect("target dir")
        .join("retryscope")
}

fn value(text: &str, series: &str) -> f64 {
    labelled(text, series, "")
}

/// The sum of the series starting with `series` whose labels include `label`.
fn labelled(text: &str, series: &str, label: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(series) && l.contains(label))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn kv(key: &str, v: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue { value: Some(v) }),
        ..KeyValue::default()
    }
}

fn s(v: &str) -> any_value::Value {
    any_value::Value::StringValue(v.to_owned())
}

/// One session's records, as gemini-cli 0.61 exports them (attribute names and values of
/// the committed capture; long texts left out).
fn session(n: u64, t0: u64, out: &mut Vec<LogRecord>) {
    let sid = format!("bench-{n:010}");
    let ms = |k: u64| t0 + n * 1_000_000 + k * 100_000_000;
    let ts = |k: u64| {
        let t = ms(k) / 1_000_000;
        let (secs, milli) = (t / 1000, t % 1000);
        // RFC 3339 from epoch seconds (the capture's `event.timestamp` form).
        let days = secs / 86_400;
        let (y, m, d) = civil(days as i64);
        let r = secs % 86_400;
        format!(
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{milli:03}Z",
            r / 3600,
            r / 60 % 60,
            r % 60
        )
    };
    let call = "{\\\"functionCall\\\":{\\\"id\\\":\\\"run_shell_command__b\\\",\\\"name\\\":\\\"run_shell_command\\\",\\\"args\\\":{\\\"command\\\":\\\"touch b\\\"}}}";
    let response = format!(
        "[{{\"candidates\":[{{\"content\":{{\"parts\":[{{\"text\":\"ok\"}},{}]}},\"finishReason\":\"STOP\"}}],\"responseId\":\"r{n}\"}}]",
        call.replace("\\\"", "\"")
    );
    let events: [(&str, Vec<KeyValue>); 6] = [
        (
            "gemini_cli.api_request",
            vec![kv("model", s("gemini-3.8-flash")), kv("role", s("main"))],
        ),
        (
            "gemini_cli.api_error",
            vec![
                kv("model", s("gemini-3.8-flash")),
                kv("role", s("main")),
                kv("error", s("terminated")),
                kv("error.type", s("TypeError")),
            ],
        ),
        (
            "gemini_cli.network_retry_attempt",
            vec![
                kv("attempt", any_value::Value::IntValue(1)),
                kv("error_type", s("ECONNRESET")),
            ],
        ),
        (
            "gemini_cli.api_request",
            vec![kv("model", s("gemini-3.8-flash")), kv("role", s("main"))],
        ),
        (
            "gemini_cli.api_response",
            vec![
                kv("model", s("gemini-2.5-flash")),
                kv("role", s("main")),
                kv("status_code", any_value::Value::IntValue(200)),
                kv("input_token_count", any_value::Value::IntValue(900)),
                kv("output_token_count", any_value::Value::IntValue(37)),
                kv("response_text", s(&response)),
            ],
        ),
        (
            "gemini_cli.tool_call",
            vec![
                kv("function_name", s("run_shell_command")),
                kv("function_args", s("{\"command\":\"touch a\"}")),
                kv("success", any_value::Value::BoolValue(true)),
                kv("decision", s("accept")),
            ],
        ),
    ];
    for (k, (name, attrs)) in events.into_iter().enumerate() {
        let mut a = vec![
            kv("session.id", s(&sid)),
            kv("event.name", s(name)),
            kv("event.timestamp", s(&ts(k as u64))),
            kv("prompt_id", s(&sid)),
        ];
        a.extend(attrs);
        out.push(LogRecord {
            time_unix_nano: ms(k as u64),
            observed_time_unix_nano: ms(k as u64),
            body: Some(AnyValue {
                value: Some(s(name)),
            }),
            attributes: a,
            ..LogRecord::default()
        });
    }
}

/// Days since 1970-01-01 to (year, month, day) (Howard Hinnant's algorithm).
fn civil(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn body(first_session: u64, t0: u64) -> Vec<u8> {
    let mut records = Vec::new();
    for n in first_session..first_session + SESSIONS_PER_REQUEST {
        session(n, t0, &mut records);
    }
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(Resource {
                attributes: vec![kv("service.name", s("gemini-cli"))],
                ..Resource::default()
            }),
            scope_logs: vec![ScopeLogs {
                log_records: records,
                ..ScopeLogs::default()
            }],
            ..ResourceLogs::default()
        }],
    }
    .encode_to_vec()
}

/// A keep-alive OTLP/HTTP client connection.
struct Client {
    s: TcpStream,
    port: u16,
}

impl Client {
    fn new(port: u16) -> Client {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_nodelay(true).ok();
        Client { s, port }
    }

    /// POST; returns the status.
    fn post(&mut self, body: &[u8]) -> u16 {
        for _ in 0..2 {
            let head = format!(
                "POST /v1/logs HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\n\r\n",
                body.len()
            );
            if self.s.write_all(head.as_bytes()).is_ok()
                && self.s.write_all(body).is_ok()
                && let Some(status) = self.read_response()
            {
                return status;
            }
            *self = Client::new(self.port);
        }
        0
    }

    fn read_response(&mut self) -> Option<u16> {
        let mut buf = Vec::with_capacity(512);
        let mut byte = [0u8; 1024];
        loop {
            let n = self.s.read(&mut byte).ok()?;
            if n == 0 {
                return None;
            }
            buf.extend_from_slice(&byte[..n]);
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                while buf.len() < end + 4 + len {
                    let n = self.s.read(&mut byte).ok()?;
                    if n == 0 {
                        return None;
                    }
                    buf.extend_from_slice(&byte[..n]);
                }
                return head.get(9..12)?.parse().ok();
            }
        }
    }
}

fn start(args: &[&str], workers: Option<u64>) -> (Child, u16, u16) {
    let (metrics, otlp) = (free_port(), free_port());
    let mut cmd = Command::new(binary());
    cmd.arg("run");
    if let Some(w) = workers {
        cmd.args(["--workers", &w.to_string()]);
    }
    let child = cmd
        .args(["--metrics-addr", &format!("127.0.0.1:{metrics}")])
        .args(["--otlp-listen", &format!("127.0.0.1:{otlp}")])
        .args(["--findings-out", "", "--idle-timeout-secs", "3600"])
        .args(args)
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("build the release binary first: cargo build --release");
    let deadline = Instant::now() + Duration::from_secs(20);
    while scrape(metrics).is_none() {
        assert!(Instant::now() < deadline, "collector did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    (child, metrics, otlp)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str, default: u64| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let sessions = arg("--sessions", 200_000) / SESSIONS_PER_REQUEST * SESSIONS_PER_REQUEST;
    let clients = arg("--clients", 4);
    let workers = args
        .iter()
        .any(|a| a == "--workers")
        .then(|| arg("--workers", 1));
    let throughput_only = args.iter().any(|a| a == "--throughput-only");
    let t0 = 1_796_227_707_000_000_000u64;

    // Throughput.
    let (mut child, metrics, otlp) = start(&["--max-open-turns", "2000000"], workers);
    let requests = sessions / SESSIONS_PER_REQUEST;
    println!(
        "throughput: {sessions} sessions, {} log records in {requests} OTLP/HTTP protobuf requests of {} records, {clients} clients, workers {}",
        sessions * RECORDS_PER_SESSION,
        SESSIONS_PER_REQUEST * RECORDS_PER_SESSION,
        workers.map_or_else(|| "default".to_owned(), |w| w.to_string())
    );
    let bodies: Arc<Vec<Vec<u8>>> = Arc::new(
        (0..requests)
            .map(|i| body(i * SESSIONS_PER_REQUEST, t0))
            .collect(),
    );
    let next = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|_| {
            let (bodies, next, refused) = (bodies.clone(), next.clone(), refused.clone());
            std::thread::spawn(move || {
                let mut c = Client::new(otlp);
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(b) = bodies.get(i as usize) else {
                        break;
                    };
                    loop {
                        match c.post(b) {
                            200 => break,
                            429 | 503 => {
                                refused.fetch_add(1, Ordering::SeqCst);
                                std::thread::sleep(Duration::from_millis(5));
                            }
                            other => panic!("status {other}"),
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("client");
    }
    let sent = started.elapsed();
    let want = (sessions * RECORDS_PER_SESSION) as f64;
    // By label, not prefix: the series has other labels before `kind` (`agent`).
    let finding = |text: &str| {
        labelled(
            text,
            "retryscope_findings_total{",
            "kind=\"abandoned_tool_executed\"",
        )
    };
    loop {
        let text = scrape(metrics).unwrap_or_default();
        if value(&text, "retryscope_events_read_total{source=\"otlp\"}") >= want
            && finding(&text) >= sessions as f64
        {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(600), "not done");
        std::thread::sleep(Duration::from_millis(20));
    }
    let done = started.elapsed();
    let text = scrape(metrics).unwrap_or_default();
    println!(
        "  all acknowledged after {:.2} s; all read and {} findings after {:.2} s: {:.0} records/s ({:.0} sessions/s); {} requests refused (429) and retried; peak RSS {} MiB",
        sent.as_secs_f64(),
        finding(&text),
        done.as_secs_f64(),
        want / done.as_secs_f64(),
        sessions as f64 / done.as_secs_f64(),
        refused.load(Ordering::SeqCst),
        status_kib(child.id(), "VmHWM:") / 1024
    );
    let _ = child.kill();
    let _ = child.wait();
    if throughput_only {
        return;
    }

    // Sustained overload: a queue of 8 MiB, clients faster than the pipeline for 20 s.
    let dir = std::env::temp_dir().join(format!("bench-otlp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let config = dir.join("run.toml");
    std::fs::write(&config, "[otlp_receiver]\nqueue_bytes = 8388608\n").expect("config");
    let (mut child, metrics, otlp) = start(&["--config", config.to_str().expect("utf-8")], workers);
    let stop = Arc::new(AtomicBool::new(false));
    let accepted = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let clients_overload = clients.max(8);
    let threads: Vec<_> = (0..clients_overload)
        .map(|k| {
            let (stop, accepted, refused) = (stop.clone(), accepted.clone(), refused.clone());
            std::thread::spawn(move || {
                let mut c = Client::new(otlp);
                let mut i = k * 1_000_000;
                while !stop.load(Ordering::SeqCst) {
                    let b = body(i * SESSIONS_PER_REQUEST, t0);
                    match c.post(&b) {
                        200 => {
                            accepted.fetch_add(1, Ordering::SeqCst);
                            i += 1;
                        }
                        _ => {
                            refused.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
            })
        })
        .collect();
    let started = Instant::now();
    let mut peak_queue = 0.0f64;
    while started.elapsed() < Duration::from_secs(20) {
        let text = scrape(metrics).unwrap_or_default();
        peak_queue = peak_queue.max(value(&text, "retryscope_otlp_receiver_queue_bytes"));
        std::thread::sleep(Duration::from_millis(200));
    }
    stop.store(true, Ordering::SeqCst);
    for t in threads {
        t.join().expect("client");
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "overload: {clients_overload} clients for {secs:.0} s against an 8 MiB queue: {} requests accepted ({:.0} records/s), {} refused; queue peak {:.1} MiB; collector peak RSS {} MiB",
        accepted.load(Ordering::SeqCst),
        accepted.load(Ordering::SeqCst) as f64
            * (SESSIONS_PER_REQUEST * RECORDS_PER_SESSION) as f64
            / secs,
        refused.load(Ordering::SeqCst),
        peak_queue / 1_048_576.0,
        status_kib(child.id(), "VmHWM:") / 1024
    );
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
