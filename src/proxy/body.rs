//! The response body: each upstream chunk goes to the client as it arrives while the
//! tracker sees its payloads; a stream chosen for injection is forwarded frame by frame and
//! cut where its cutter says (then reset, ended, or ended after the provider's error event).
//! Owns telling the tracker how each response ended: complete, upstream error, client gone,
//! or cut; and the response's side of the feed's back-pressure: while its lines waiting for
//! the engine are over the bound (`feed.rs`), it forwards what it has read and reads no more.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame as BodyFrame};
use hyper::body::Incoming;

use super::attempts::{AttemptRef, End};
use super::conn::ConnCtl;
use super::feed::Backlog;
use super::forward::{Proxy, ProxyNote, error_chain, now_ms};
use super::frames::{Framer, Framing};
use super::inject::{Cutter, Decision, How, Injector};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What the tracker learns from one response.
pub(super) struct Observer {
    pub(super) proxy: Arc<Proxy>,
    pub(super) route: usize,
    pub(super) attempt: AttemptRef,
    pub(super) framer: Framer,
    /// Whether the body is a model stream (a 2xx), whose payloads are decoded.
    pub(super) decode: bool,
    pub(super) ended: bool,
    /// Its request's lines waiting for the engine.
    pub(super) backlog: Arc<Backlog>,
    /// Waiting for the engine to take them down to the bound.
    pub(super) waiting: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
}

/// What a complete non-streaming answer tells the tracker.
enum Whole {
    /// Its provider's chunks.
    Chunks(Vec<String>),
    /// Finished, with this reason (over the cap, or a shape this proxy cannot reshape).
    Finished(String),
    Nothing,
}

impl Observer {
    fn chunk(&self, data: &str) {
        if self.decode {
            let a = &self.attempt;
            self.proxy
                .track(&self.backlog, |t| t.chunk(a, data, now_ms()));
        }
    }

    fn chunks(&self, frames: &[super::frames::Frame]) {
        if self.decode && !frames.is_empty() {
            let now = now_ms();
            let a = &self.attempt;
            self.proxy.track(&self.backlog, |t| {
                for f in frames {
                    t.chunk(a, &f.data, now);
                }
            });
        }
    }

    /// Ready when the request may read on: its lines waiting for the engine are within the
    /// bound (`feed.rs`). Pending registers the wake-up.
    fn poll_backlog(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.waiting.is_none() {
            if !self.proxy.feed.must_wait(&self.backlog) {
                return Poll::Ready(());
            }
            let (proxy, backlog) = (self.proxy.clone(), self.backlog.clone());
            self.waiting = Some(Box::pin(async move { proxy.feed.ready(&backlog).await }));
        }
        match self.waiting.as_mut().map(|w| w.as_mut().poll(cx)) {
            Some(Poll::Pending) => Poll::Pending,
            _ => {
                self.waiting = None;
                Poll::Ready(())
            }
        }
    }

    /// A complete answer's body, reshaped (outside the tracker's lock).
    fn whole(&mut self) -> Whole {
        if self.framer.unobserved() {
            // Over the cap: the client got it whole, the tracker saw none of it.
            return Whole::Finished("unobserved".to_owned());
        }
        // A non-streaming answer: as the chunks its provider would have streamed; one this
        // proxy cannot reshape is recorded as finished.
        let (frame, _) = self.framer.finish();
        let Some(f) = frame else {
            return Whole::Nothing;
        };
        let chunks = super::whole::as_chunks(self.attempt.api, &f.data);
        if !chunks.is_empty() {
            return Whole::Chunks(chunks);
        }
        let reason = serde_json::from_str::<serde_json::Value>(&f.data)
            .ok()
            .and_then(|v| {
                v.get("stop_reason")
                    .or_else(|| v.pointer("/choices/0/finish_reason"))
                    .or_else(|| v.get("status"))
                    .and_then(|r| r.as_str().map(str::to_owned))
            })
            .unwrap_or_else(|| "stop".to_owned());
        Whole::Finished(reason)
    }

    fn end(&mut self, how: End) {
        if self.ended {
            return;
        }
        self.ended = true;
        let now = now_ms();
        let whole = if self.decode
            && how == End::Complete
            && (self.framer.unobserved() || self.framer.framing() == Framing::Whole)
        {
            self.whole()
        } else {
            Whole::Nothing
        };
        let a = &self.attempt;
        self.proxy.track(&self.backlog, |t| {
            match &whole {
                Whole::Chunks(chunks) => {
                    for c in chunks {
                        t.chunk(a, c, now);
                    }
                }
                Whole::Finished(reason) => t.complete_whole(a, reason, now),
                Whole::Nothing => {}
            }
            t.end(a, &how, now);
        });
    }
}

/// A response body streamed from upstream to the client as it arrives.
pub struct ObservedBody {
    pub(super) inner: Option<Incoming>,
    pub(super) observer: Option<Observer>,
    pub(super) cutter: Option<Cutter>,
    /// Forward whole frames (a stream chosen for injection) rather than chunks as they come.
    pub(super) framed: bool,
    pub(super) ctl: Option<Arc<ConnCtl>>,
    pub(super) pending: VecDeque<Bytes>,
    /// After `pending`: end the body, or reset.
    pub(super) then: Option<How>,
    /// Before a reset: time for the last bytes to leave and reach the client (a RST drops
    /// whatever is still queued, on either side).
    pub(super) reset_wait: Option<Pin<Box<tokio::time::Sleep>>>,
}

/// How long the bytes before an injected reset get to reach the client.
const RESET_DELAY: std::time::Duration = std::time::Duration::from_millis(100);

impl ObservedBody {
    /// Cut now: `pending` holds what is still forwarded.
    fn cut(&mut self, how: How) {
        let Some(cutter) = self.cutter.take() else {
            return;
        };
        self.inner = None; // the upstream sees us go away, as after a real cut
        if let Some(obs) = &mut self.observer {
            if how == How::Error {
                let (bytes, data) = cutter.error_bytes(obs.framer.framing());
                self.pending.push_back(Bytes::from(bytes));
                obs.chunk(&data);
            }
            let (point, how_s) = (cutter.point().as_str(), how.as_str());
            (obs.proxy.notes)(ProxyNote::Cut {
                point,
                how: how_s,
                target: cutter.target().cloned(),
            });
            obs.end(End::Injected { point, how: how_s });
        }
        self.then = Some(if how == How::Reset {
            How::Reset
        } else {
            How::Eof
        });
    }

    /// Framed forwarding of a data chunk: frames as they complete, cut where the rule says.
    fn framed_chunk(&mut self, data: &[u8]) {
        let frames = match &mut self.observer {
            Some(obs) => obs.framer.push(data),
            None => {
                self.pending.push_back(Bytes::copy_from_slice(data));
                return;
            }
        };
        for f in frames {
            let decision = match &mut self.cutter {
                Some(c) => c.decide(&f),
                None => Decision::Forward,
            };
            let claimed = decision != Decision::Forward && self.claim();
            if decision != Decision::Forward && !claimed {
                // Another stream took the last cut: this one passes untouched.
                self.cutter = None;
            }
            let how = self.cutter.as_ref().map(Cutter::how).unwrap_or_default();
            match decision {
                Decision::CutAfter { bytes, data } if claimed => {
                    self.pending.push_back(Bytes::from(bytes));
                    if let Some(o) = &self.observer {
                        o.chunk(&data);
                    }
                    self.cut(how);
                    return;
                }
                Decision::CutBefore if claimed => {
                    self.cut(how);
                    return;
                }
                _ => {
                    if let Some(o) = &self.observer {
                        o.chunk(&f.data);
                    }
                    self.pending.push_back(Bytes::from(f.bytes));
                }
            }
        }
    }

    /// Whether the upstream body has nothing more (read to its length, or its end seen).
    fn upstream_at_end(&self) -> bool {
        self.inner.as_ref().is_some_and(Body::is_end_stream)
    }

    /// The upstream body ended: flush the framer (a last event without its blank line, a JSON
    /// array's closing bracket) and tell the tracker the response is complete.
    fn upstream_done(&mut self) {
        self.inner = None;
        if let Some(obs) = &mut self.observer {
            if obs.framer.framing() != Framing::Whole {
                let (last, tail) = obs.framer.finish();
                if let Some(f) = last {
                    obs.chunk(&f.data);
                    if self.framed {
                        self.pending.push_back(Bytes::from(f.bytes));
                    }
                }
                if self.framed && !tail.is_empty() {
                    self.pending.push_back(Bytes::from(tail));
                }
            }
            obs.end(End::Complete);
        }
    }

    /// Take one of the upstream's cuts.
    fn claim(&self) -> bool {
        self.observer.as_ref().is_some_and(|o| {
            o.proxy.routes[o.route]
                .injector
                .as_ref()
                .is_some_and(Injector::claim)
        })
    }
}

impl Body for ObservedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<BodyFrame<Bytes>, BoxError>>> {
        let this = &mut *self;
        loop {
            if let Some(b) = this.pending.pop_front() {
                return Poll::Ready(Some(Ok(BodyFrame::data(b))));
            }
            match this.then.take() {
                Some(How::Reset) => {
                    let wait = this
                        .reset_wait
                        .get_or_insert_with(|| Box::pin(tokio::time::sleep(RESET_DELAY)));
                    if wait.as_mut().poll(cx).is_pending() {
                        this.then = Some(How::Reset);
                        return Poll::Pending;
                    }
                    if let Some(ctl) = &this.ctl {
                        ctl.reset();
                    }
                    return Poll::Ready(Some(Err("retryscope proxy: injected reset".into())));
                }
                Some(_) => return Poll::Ready(None),
                None => {}
            }
            // Read on only while this request's lines waiting for the engine are within the
            // bound; what was read has been forwarded above.
            if this.inner.is_some()
                && let Some(obs) = &mut this.observer
                && obs.poll_backlog(cx).is_pending()
            {
                return Poll::Pending;
            }
            let Some(inner) = this.inner.as_mut() else {
                return Poll::Ready(None);
            };
            match Pin::new(inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    this.upstream_done();
                    if this.pending.is_empty() {
                        return Poll::Ready(None);
                    }
                }
                Poll::Ready(Some(Err(e))) => {
                    this.inner = None;
                    if let Some(obs) = &mut this.observer {
                        (obs.proxy.notes)(ProxyNote::UpstreamError);
                        obs.end(End::Upstream(error_chain(&e)));
                    }
                    return Poll::Ready(Some(Err(Box::new(e))));
                }
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        if this.framed {
                            this.framed_chunk(&data);
                            if this.upstream_at_end() {
                                this.upstream_done();
                            }
                            continue;
                        }
                        if let Some(obs) = &mut this.observer {
                            let held = std::time::Instant::now();
                            if obs.framer.framing() == Framing::Whole {
                                let was = obs.framer.unobserved();
                                obs.framer.push(&data);
                                if !was && obs.framer.unobserved() {
                                    (obs.proxy.notes)(ProxyNote::Unobserved);
                                }
                            } else {
                                let frames = obs.framer.push(&data);
                                obs.chunks(&frames);
                            }
                            if obs.decode {
                                let nanos = held.elapsed().as_nanos();
                                (obs.proxy.notes)(ProxyNote::Held {
                                    nanos: u64::try_from(nanos).unwrap_or(u64::MAX),
                                });
                            }
                        }
                        // A body with a length ends with its last byte: the server may not
                        // poll again (then this body is dropped, and must not look cut).
                        if this.upstream_at_end() {
                            this.upstream_done();
                        }
                        return Poll::Ready(Some(Ok(BodyFrame::data(data))));
                    }
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_none() && self.pending.is_empty() && self.then.is_none()
    }
}

impl Drop for ObservedBody {
    fn drop(&mut self) {
        if self.upstream_at_end() {
            self.upstream_done();
        }
        if let Some(obs) = &mut self.observer
            && !obs.ended
        {
            obs.end(End::ClientGone);
        }
    }
}
