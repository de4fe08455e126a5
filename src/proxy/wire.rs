//! What the proxy changes between the client's connection and the upstream's, and reads
//! without changing.
//!
//! Owns: the hop-by-hop headers dropped in both directions (RFC 9110 §7.6.1), and reading a
//! request body's content coding (gzip is decompressed for the tracker to read; the original
//! bytes are what is forwarded).

use http::header::{self, HeaderMap, HeaderName};

/// Headers that belong to one connection, never forwarded (RFC 9110 §7.6.1), plus those the
/// `Connection` header names.
pub(super) fn strip_hop_by_hop(h: &mut HeaderMap) {
    let named: Vec<HeaderName> = h
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for n in named {
        h.remove(n);
    }
    for n in [
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    ] {
        h.remove(n);
    }
}

/// The request body's `content-encoding`, when it has one (`identity` is none).
pub(super) fn request_encoding(h: &HeaderMap) -> Option<&str> {
    h.get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|e| !e.is_empty() && !e.eq_ignore_ascii_case("identity"))
}

/// A gzip body, decompressed up to `limit` bytes, for reading (what is forwarded is the
/// original).
pub(super) fn gunzip(body: &[u8], limit: usize) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(body)
        .take(limit as u64)
        .read_to_end(&mut out)
        .ok()?;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn gzip_request_bodies_are_read_and_other_codings_skipped() {
        use std::io::Write;
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(b"{\"model\":\"m\"}").expect("write");
        let gz = enc.finish().expect("finish");
        assert_eq!(
            gunzip(&gz, 1 << 20).as_deref(),
            Some(b"{\"model\":\"m\"}".as_slice())
        );
        assert_eq!(gunzip(b"not gzip", 1 << 20), None);
        let mut h = HeaderMap::new();
        assert_eq!(request_encoding(&h), None);
        h.insert(
            header::CONTENT_ENCODING,
            HeaderValue::from_static("identity"),
        );
        assert_eq!(request_encoding(&h), None);
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("zstd"));
        assert_eq!(request_encoding(&h), Some("zstd"));
    }

    #[test]
    fn hop_by_hop_headers_and_those_connection_names_are_removed() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, x-trace-hop"),
        );
        h.insert("x-trace-hop", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        h.insert("x-api-key", HeaderValue::from_static("k"));
        strip_hop_by_hop(&mut h);
        let left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        assert_eq!(left, ["x-api-key"]);
    }
}
