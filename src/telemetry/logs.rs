//! The stderr log line: every field value escaped, every repeated warning rate-limited.
//!
//! Both apply to all `tracing` events, ours and the libraries' (the OTLP exporter's internal
//! logs, hyper, tonic), so no call site has to remember either:
//!
//! * [`fields`] formats field values through [`retryscope_core::sanitize::display`], so a file name or
//!   an error text from a log line cannot move the cursor or set the terminal title;
//! * [`LogLimiter`] lets at most one `WARN` or `ERROR` event per call site through per
//!   interval; the next one that passes is followed by a note saying how many were suppressed.

use std::cell::Cell;
use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tracing::callsite::Identifier;
use tracing::field::Field;
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::field::MakeExt;
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, Writer};
use tracing_subscriber::layer::{Context, Filter};
use tracing_subscriber::registry::LookupSpan;

/// How often one call site may log a warning or an error.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

thread_local! {
    /// Suppressed count of the event the limiter just let through, for the formatter.
    static JUST_SUPPRESSED: Cell<u64> = const { Cell::new(0) };
}

/// Field formatting that escapes control characters in every value.
pub fn fields() -> impl for<'w> FormatFields<'w> + Send + Sync + 'static {
    tracing_subscriber::fmt::format::debug_fn(
        |w: &mut Writer<'_>, field: &Field, value: &dyn fmt::Debug| {
            let text = format!("{value:?}");
            let shown = retryscope_core::sanitize::display(&text);
            if field.name() == "message" {
                write!(w, "{shown}")
            } else {
                write!(w, "{}={shown}", field.name())
            }
        },
    )
    .delimited(" ")
}

/// The one rate limiter of repeated warnings and errors (see the module docs).
#[derive(Debug)]
pub struct LogLimiter {
    every: Duration,
    sites: Mutex<HashMap<Identifier, (Option<Instant>, u64)>>,
}

impl LogLimiter {
    /// At most one warning or error per call site per `every`.
    pub fn new(every: Duration) -> Self {
        LogLimiter {
            every,
            sites: Mutex::new(HashMap::new()),
        }
    }

    /// Whether an event of `meta` may be logged at `now`; when it may, the number suppressed
    /// since the last one is left for the formatter.
    pub fn allow(&self, meta: &Metadata<'_>, now: Instant) -> bool {
        if *meta.level() > Level::WARN {
            return true;
        }
        let Ok(mut sites) = self.sites.lock() else {
            return true;
        };
        let entry = sites.entry(meta.callsite()).or_insert((None, 0));
        match entry.0 {
            Some(last) if now.saturating_duration_since(last) < self.every => {
                entry.1 += 1;
                false
            }
            _ => {
                let suppressed = std::mem::take(&mut entry.1);
                entry.0 = Some(now);
                JUST_SUPPRESSED.with(|c| c.set(suppressed));
                true
            }
        }
    }
}

impl<S> Filter<S> for LogLimiter {
    fn enabled(&self, _meta: &Metadata<'_>, _cx: &Context<'_, S>) -> bool {
        true
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> tracing::subscriber::Interest {
        if meta.is_event() && *meta.level() <= Level::WARN {
            tracing::subscriber::Interest::sometimes()
        } else {
            tracing::subscriber::Interest::always()
        }
    }

    fn event_enabled(&self, event: &Event<'_>, _cx: &Context<'_, S>) -> bool {
        self.allow(event.metadata(), Instant::now())
    }
}

/// An event format that adds, after a rate-limited event, how many like it were suppressed.
#[derive(Debug)]
pub struct NoteSuppressed<F>(pub F);

impl<S, N, F> FormatEvent<S, N> for NoteSuppressed<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        self.0.format_event(ctx, writer.by_ref(), event)?;
        let suppressed = JUST_SUPPRESSED.with(|c| c.replace(0));
        if suppressed > 0 {
            writeln!(
                writer,
                "  ({suppressed} more from the same place suppressed in the last {} s)",
                LOG_EVERY.as_secs()
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_warnings_from_one_place_are_rate_limited() {
        let limiter = LogLimiter::new(Duration::from_secs(10));
        let t0 = Instant::now();
        let meta = warn_meta();
        assert!(limiter.allow(meta, t0));
        let allowed = (1..25)
            .filter(|s| limiter.allow(meta, t0 + Duration::from_secs(*s)))
            .count();
        // 25 warnings in 25 s: the first, then one at 10 s and one at 20 s.
        assert_eq!(allowed, 2);
        assert!(limiter.allow(info_meta(), t0));
        assert!(limiter.allow(info_meta(), t0));
    }

    #[test]
    fn no_field_carries_an_invisible_character_raw() {
        use std::sync::Arc;
        #[derive(Clone, Default)]
        struct Buf(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().map(|mut v| v.extend_from_slice(b)).ok();
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let out = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .fmt_fields(fields())
            .with_ansi(false)
            .with_writer(move || out.clone())
            .finish();
        let hostile = "f\x1b]0;t\x07\u{9b}2J\u{202e}\u{2067}\u{200b}\u{2028}\u{feff}.log";
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(path = %hostile, debug = ?hostile, "read {hostile}");
        });
        let text = String::from_utf8(buf.0.lock().map(|v| v.clone()).unwrap_or_default())
            .unwrap_or_default();
        assert!(text.contains("path=f"), "{text}");
        let raw = text
            .trim_end_matches('\n')
            .chars()
            .find(|&c| retryscope_core::sanitize::is_invisible(c));
        assert_eq!(raw, None, "{text:?}");
    }

    fn warn_meta() -> &'static Metadata<'static> {
        struct Cs;
        static CS: Cs = Cs;
        static META: Metadata<'static> = tracing::metadata! {
            name: "w",
            target: "test",
            level: Level::WARN,
            fields: &[],
            callsite: &CS,
            kind: tracing::metadata::Kind::EVENT,
        };
        impl tracing::Callsite for Cs {
            fn set_interest(&self, _: tracing::subscriber::Interest) {}
            fn metadata(&self) -> &Metadata<'_> {
                &META
            }
        }
        &META
    }

    fn info_meta() -> &'static Metadata<'static> {
        struct Cs;
        static CS: Cs = Cs;
        static META: Metadata<'static> = tracing::metadata! {
            name: "i",
            target: "test",
            level: Level::INFO,
            fields: &[],
            callsite: &CS,
            kind: tracing::metadata::Kind::EVENT,
        };
        impl tracing::Callsite for Cs {
            fn set_interest(&self, _: tracing::subscriber::Interest) {}
            fn metadata(&self) -> &Metadata<'_> {
                &META
            }
        }
        &META
    }
}
