//! The OTLP endpoint as the exporters need it: a scheme-less `host:port` means `http://`
//! (the OTLP exporter would otherwise assume `https://` for gRPC and fail on a plain
//! collector), only `http` and `https` are accepted, and a host is required. A bad endpoint
//! is a [`TraceError::Endpoint`] naming the setting it came from, at startup.

use super::TraceError;

/// An endpoint that passed [`parse`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The full URL, with its scheme.
    pub url: String,
    /// Whether it is `https://`.
    pub https: bool,
}

/// Add `http://` to a scheme-less endpoint; anything else is returned as given (trimmed).
pub fn with_scheme(raw: &str) -> String {
    let raw = raw.trim();
    if raw.contains("://") {
        raw.to_owned()
    } else {
        format!("http://{raw}")
    }
}

/// Check `raw` (from `setting`) and give it a scheme.
pub fn parse(raw: &str, setting: &str) -> Result<Endpoint, TraceError> {
    let bad = |message: String| TraceError::Endpoint {
        setting: setting.to_owned(),
        endpoint: raw.trim().to_owned(),
        message,
    };
    let url = with_scheme(raw);
    let scheme = url.split("://").next().unwrap_or_default();
    let https = match scheme.to_ascii_lowercase().as_str() {
        "http" => false,
        "https" => true,
        other => {
            return Err(bad(format!(
                "unsupported scheme `{other}` (use http:// or https://)"
            )));
        }
    };
    let uri: http::Uri = url.parse().map_err(|e| bad(format!("not a URL ({e})")))?;
    match uri.host() {
        Some(host) if !host.is_empty() => {}
        _ => return Err(bad("no host".to_owned())),
    }
    Ok(Endpoint { url, https })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scheme_less_endpoint_is_http() {
        let e = parse("127.0.0.1:4317", "--otlp-endpoint").unwrap();
        assert_eq!(e.url, "http://127.0.0.1:4317");
        assert!(!e.https);
        let e = parse(" collector.internal:4318/otlp ", "x").unwrap();
        assert_eq!(e.url, "http://collector.internal:4318/otlp");
        let e = parse("HTTPS://otel.example.com", "x").unwrap();
        assert!(e.https);
    }

    #[test]
    fn bad_endpoints_name_their_setting() {
        for (raw, why) in [
            ("ftp://otel:21", "unsupported scheme `ftp`"),
            ("unix:///tmp/otel.sock", "unsupported scheme `unix`"),
            ("http://", "not a URL"),
            ("http://exa mple:4317", "not a URL"),
        ] {
            let err = parse(raw, "OTEL_EXPORTER_OTLP_ENDPOINT")
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("OTEL_EXPORTER_OTLP_ENDPOINT") && err.contains(why),
                "{raw}: {err}"
            );
        }
    }
}
