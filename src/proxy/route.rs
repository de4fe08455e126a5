//! Routing: which upstream a request path goes to (the longest matching prefix), and the
//! upstream URL it becomes (prefix removed unless `strip_prefix = false`, the upstream URL's
//! own path put in front).

use http::Uri;

use super::ProxyError;
use super::inject::{InjectRule, Injector};
use crate::config::proxy::UpstreamSettings;

/// One upstream and the paths routed to it.
pub(super) struct Route {
    pub(super) prefix: String,
    strip: bool,
    scheme: http::uri::Scheme,
    authority: http::uri::Authority,
    base_path: String,
    pub(super) injector: Option<Injector>,
}

/// A URL as it may be shown: anything before an `@` (credentials) left out.
fn shown(url: &str) -> String {
    let tail = url.rsplit_once('@').map_or(url, |(_, t)| t);
    retryscope_core::sanitize::display(tail).into_owned()
}

impl Route {
    pub(super) fn new(
        u: &UpstreamSettings,
        default_inject: Option<&InjectRule>,
    ) -> Result<Self, ProxyError> {
        let uri: Uri = u
            .url
            .parse()
            .map_err(|e| ProxyError::Config(format!("upstream url `{}`: {e}", shown(&u.url))))?;
        let (Some(scheme), Some(authority)) = (uri.scheme().cloned(), uri.authority().cloned())
        else {
            return Err(ProxyError::Config(format!(
                "upstream url `{}` needs a scheme and a host (http://… or https://…)",
                shown(&u.url)
            )));
        };
        if authority.as_str().contains('@') {
            // Credentials in the URL would be logged with it: they belong in headers.
            return Err(ProxyError::Config(
                "upstream url: no user or password in it (the client's headers carry keys)"
                    .to_owned(),
            ));
        }
        if uri.query().is_some() {
            return Err(ProxyError::Config(format!(
                "upstream url `{}`: no query string (put keys in headers)",
                retryscope_core::sanitize::display(uri.path())
            )));
        }
        let prefix = if u.prefix.is_empty() {
            "/".to_owned()
        } else {
            u.prefix.clone()
        };
        if !prefix.starts_with('/') {
            return Err(ProxyError::Config(format!(
                "upstream prefix `{prefix}` must start with /"
            )));
        }
        Ok(Route {
            strip: u.strip_prefix.unwrap_or(prefix != "/"),
            prefix,
            scheme,
            authority,
            base_path: uri.path().trim_end_matches('/').to_owned(),
            injector: u
                .inject
                .clone()
                .or_else(|| default_inject.cloned())
                .map(Injector::new),
        })
    }

    pub(super) fn matches(&self, path: &str) -> bool {
        self.prefix == "/"
            || path == self.prefix
            || path.starts_with(&self.prefix)
                && (self.prefix.ends_with('/')
                    || path.as_bytes().get(self.prefix.len()) == Some(&b'/'))
    }

    /// The upstream URI for a request's path and query.
    pub(super) fn target(&self, path_and_query: &str) -> Result<Uri, http::Error> {
        let rest = if self.strip && self.prefix != "/" {
            let r = &path_and_query[self.prefix.trim_end_matches('/').len()..];
            if r.starts_with('/') {
                r.to_owned()
            } else {
                format!("/{r}")
            }
        } else {
            path_and_query.to_owned()
        };
        Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(format!("{}{rest}", self.base_path))
            .build()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(prefix: &str, url: &str) -> Route {
        Route::new(
            &UpstreamSettings {
                prefix: prefix.to_owned(),
                url: url.to_owned(),
                strip_prefix: None,
                inject: None,
            },
            None,
        )
        .expect("route")
    }

    #[test]
    fn prefixes_are_stripped_and_base_paths_prepended() {
        let r = route("/anthropic", "https://api.anthropic.com");
        assert!(r.matches("/anthropic/v1/messages"));
        assert!(!r.matches("/anthropicx/v1/messages"));
        assert_eq!(
            r.target("/anthropic/v1/messages?beta=true")
                .expect("uri")
                .to_string(),
            "https://api.anthropic.com/v1/messages?beta=true"
        );
        let r = route("/", "http://127.0.0.1:9000/v1beta/");
        assert!(r.matches("/anything"));
        assert_eq!(
            r.target("/models/m:streamGenerateContent?alt=sse")
                .expect("uri")
                .to_string(),
            "http://127.0.0.1:9000/v1beta/models/m:streamGenerateContent?alt=sse"
        );
    }

    #[test]
    fn unusable_upstreams_are_refused() {
        for (prefix, url) in [
            ("/", "https://user:secret@api.openai.com"),
            ("/", "api.openai.com"),
            ("/", "https://h/?key=x"),
            ("v1", "http://h"),
        ] {
            let r = Route::new(
                &UpstreamSettings {
                    prefix: prefix.to_owned(),
                    url: url.to_owned(),
                    strip_prefix: None,
                    inject: None,
                },
                None,
            );
            assert!(r.is_err(), "{prefix} {url}");
        }
    }
}
