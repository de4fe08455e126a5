//! Unit tests of the trace export settings: the endpoint rules, the environment, TLS files.

use super::*;

fn env(vars: &[(&str, &str)]) -> Result<TraceExportConfig, TraceError> {
    let vars: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    TraceExportConfig::from_lookup(|k| vars.get(k).cloned())
}

#[test]
fn off_without_an_endpoint() {
    let cfg = env(&[]).unwrap();
    assert!(!cfg.is_enabled());
    assert_eq!(cfg.traces_endpoint(), None);
    assert_eq!(cfg.protocol, Protocol::HttpProtobuf);
    assert_eq!(cfg.timeout, Duration::from_secs(10));
    assert_eq!(cfg.service_name, "retryscope");
    assert!(!cfg.capture_content);
    assert!(!env(&[(ENV_ENDPOINT, "  ")]).unwrap().is_enabled());
}

#[test]
fn http_endpoint_rules() {
    // The generic variable is a base URL: the signal path is appended.
    let cfg = env(&[(ENV_ENDPOINT, "http://otel:4318/")]).unwrap();
    assert_eq!(
        cfg.traces_endpoint().as_deref(),
        Some("http://otel:4318/v1/traces")
    );
    let cfg = env(&[(ENV_ENDPOINT, "http://gw/otlp")]).unwrap();
    assert_eq!(
        cfg.traces_endpoint().as_deref(),
        Some("http://gw/otlp/v1/traces")
    );
    // The traces variable is a full URL and wins over the generic one.
    let mut cfg = env(&[
        (ENV_ENDPOINT, "http://otel:4318"),
        (ENV_TRACES_ENDPOINT, "http://gw/custom/traces"),
    ])
    .unwrap();
    assert_eq!(
        cfg.traces_endpoint().as_deref(),
        Some("http://gw/custom/traces")
    );
    // An explicit endpoint overrides the environment and gets the rule for given URLs.
    cfg.endpoint = Some("http://other:4318".to_owned());
    assert_eq!(
        cfg.traces_endpoint().as_deref(),
        Some("http://other:4318/v1/traces")
    );
    cfg.endpoint = Some("http://other:4318/v1/traces".to_owned());
    assert_eq!(
        cfg.traces_endpoint().as_deref(),
        Some("http://other:4318/v1/traces")
    );
}

#[test]
fn grpc_endpoint_is_used_as_given() {
    let cfg = env(&[(ENV_ENDPOINT, "http://otel:4317"), (ENV_PROTOCOL, "grpc")]).unwrap();
    assert_eq!(cfg.protocol, Protocol::Grpc);
    assert_eq!(cfg.traces_endpoint().as_deref(), Some("http://otel:4317"));
    // The traces-specific protocol wins.
    let cfg = env(&[
        (ENV_PROTOCOL, "grpc"),
        (ENV_TRACES_PROTOCOL, "http/protobuf"),
    ])
    .unwrap();
    assert_eq!(cfg.protocol, Protocol::HttpProtobuf);
}

#[test]
fn bad_values_name_their_variable() {
    let err = env(&[(ENV_PROTOCOL, "http/json")]).unwrap_err().to_string();
    assert!(err.contains(ENV_PROTOCOL), "{err}");
    let err = env(&[(ENV_TRACES_TIMEOUT, "5s")]).unwrap_err().to_string();
    assert!(err.contains(ENV_TRACES_TIMEOUT), "{err}");
    let err = env(&[(ENV_HEADERS, "novalue")]).unwrap_err().to_string();
    assert!(err.contains(ENV_HEADERS), "{err}");
}

#[test]
fn headers_and_timeout_from_env() {
    let cfg = env(&[
        (
            ENV_HEADERS,
            "Authorization=Bearer%20tok%3D%3D, x-team = a%2Cb ,",
        ),
        (ENV_TIMEOUT, "2500"),
    ])
    .unwrap();
    assert_eq!(
        cfg.headers,
        vec![
            ("Authorization".to_owned(), "Bearer tok==".to_owned()),
            ("x-team".to_owned(), "a,b".to_owned()),
        ]
    );
    assert_eq!(cfg.timeout, Duration::from_millis(2500));
    let cfg = env(&[(ENV_HEADERS, "a=1"), (ENV_TRACES_HEADERS, "b=2")]).unwrap();
    assert_eq!(cfg.headers, vec![("b".to_owned(), "2".to_owned())]);
    assert!(parse_headers("a=%zz").is_err());
    assert!(parse_headers("=v").is_err());
    // Debug output shows header names, never values (they are usually secrets).
    let shown = format!("{cfg:?}");
    assert!(
        shown.contains("\"b\"") && !shown.contains("\"2\""),
        "{shown}"
    );
}

#[test]
fn tls_files_from_env_traces_variables_win() {
    let cfg = env(&[
        (ENV_CERTIFICATE, "/etc/ca.pem"),
        (ENV_TRACES_CERTIFICATE, "/etc/traces-ca.pem"),
        (ENV_CLIENT_CERTIFICATE, "/etc/c.pem"),
        (ENV_CLIENT_KEY, "/etc/c.key"),
    ])
    .unwrap();
    assert_eq!(
        cfg.tls.ca_file.as_deref(),
        Some(std::path::Path::new("/etc/traces-ca.pem"))
    );
    assert_eq!(
        cfg.tls.client_cert.as_deref(),
        Some(std::path::Path::new("/etc/c.pem"))
    );
    assert_eq!(
        cfg.tls.client_key.as_deref(),
        Some(std::path::Path::new("/etc/c.key"))
    );
}

#[test]
fn a_bad_endpoint_names_where_it_came_from() {
    let mut cfg = env(&[(ENV_ENDPOINT, "ftp://otel:21")]).unwrap();
    let err = cfg.prepare().unwrap_err().to_string();
    assert!(err.contains(ENV_ENDPOINT) && err.contains("ftp"), "{err}");
    let traces = env(&[(ENV_TRACES_ENDPOINT, "grpc://otel:4317")]).unwrap();
    let err = traces.prepare().unwrap_err().to_string();
    assert!(err.contains(ENV_TRACES_ENDPOINT), "{err}");
    cfg.endpoint = Some("gopher://x".to_owned());
    let err = cfg.prepare().unwrap_err().to_string();
    assert!(err.contains("--otlp-endpoint"), "{err}");
    // Scheme-less is http://, for both protocols.
    cfg.endpoint = Some("otel:4317".to_owned());
    cfg.protocol = Protocol::Grpc;
    let target = cfg.prepare().unwrap().unwrap();
    assert_eq!(target.endpoint.url, "http://otel:4317");
    assert!(target.tls.is_none());
    cfg.protocol = Protocol::HttpProtobuf;
    assert_eq!(
        cfg.traces_endpoint().as_deref(),
        Some("http://otel:4317/v1/traces")
    );
}

#[test]
fn certificate_files_need_an_https_endpoint() {
    let mut cfg = env(&[(ENV_ENDPOINT, "http://otel:4318")]).unwrap();
    cfg.tls.ca_file = Some("/nonexistent/ca.pem".into());
    let err = cfg.prepare().unwrap_err().to_string();
    assert!(err.contains("not https://"), "{err}");
    // With https:// the file is read at startup, and a missing one is named.
    cfg.endpoint = Some("https://otel:4318".to_owned());
    let err = cfg.prepare().unwrap_err().to_string();
    assert!(
        err.contains("/nonexistent/ca.pem") && err.contains("--otlp-ca-file"),
        "{err}"
    );
}
