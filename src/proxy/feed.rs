//! The tracker's lines on their way to the engine (issue 22).
//!
//! Owns: where lines go once the tracker has built them ([`LineSink`]: the engine's feed
//! channel [`EngineSink`], a recording's `Tee`, a test's vector), the order they arrive in,
//! how long a request waits for them, and counting those a closed engine loses.
//!
//! **Order.** The tracker builds lines under its lock (one `Mutex<Tracker>` per proxy: which
//! request is a retry of which is decided there). Before that lock is released, the lines are
//! appended to one queue ([`Feed::push`]: the queue's own lock, held for the append, never
//! waited on for long), so the queue holds them in the order the tracker built them, across
//! every request. One queue for all requests, not one per request or per turn, because the
//! correlator's view spans requests: a retry is a request of its own whose `retry` must follow
//! the earlier attempt's `error`, and the next step's request writes the previous turn's
//! `tool_exec`, `output` and `turn_end`. Lines leave the queue only from its front and only by
//! the holder of the sink's lock (a second lock, never taken under the tracker's), so the sink
//! sees exactly the tracker's order; a line the sink refuses goes back to the front.
//!
//! **Sending.** After the tracker's lock is released, the request hands the queue to the sink
//! ([`Feed::pump`]) with [`LineSink::offer`], which never waits, and only if the sink's lock
//! is free (`try_lock`: a request never waits for it; its holder looks at the queue again after
//! letting go, so no line is stranded). While the engine keeps up, every line is delivered by
//! the request that built it (or one right behind), at once, as before. When the sink is full,
//! the feed's own thread (`retryscope-proxy-feed`) takes over: it holds the sink's lock and
//! waits for the engine, one blocking send at a time, until the queue is empty. No runtime
//! thread ever waits for the engine.
//!
//! **Back-pressure, per request.** Each request owns a [`Backlog`]: the bytes of its lines not
//! yet taken. A response whose backlog is over [`REQUEST_BACKLOG_BYTES`] stops reading its
//! upstream until the engine has taken enough (`Feed::ready`: the response body's poll is
//! pending, waiting asynchronously); what it has read is forwarded to the client first, so a
//! client never waits on a chunk the proxy holds, only for the next one to be read. A request
//! whose lines are few is not held back by another's, however far behind the engine is, until
//! the lines of all requests together pass [`FEED_BACKLOG_BYTES`] (the memory bound); then
//! every request with lines queued waits for the total to fall under it. A request that must
//! wait once its attempt is begun (a long history read) waits before it goes upstream.
//!
//! **A closed engine** (the channel's receiver gone) takes nothing: each line offered to it is
//! dropped, counted ([`Feed::lost`], reported through the owner's callback), and no request
//! waits for it; responses are proxied as ever.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, TryLockError};

use tokio::sync::Notify;

use crate::run::{Feed as FeedName, FeedItem};

/// The lines of one request that may wait for the engine before its response stops reading
/// its upstream (a few hundred chunks of a typical stream).
pub const REQUEST_BACKLOG_BYTES: usize = 256 << 10;

/// The lines of all requests that may wait for the engine before every request with lines
/// queued waits: the memory the queue holds, beyond one upstream read per response.
pub const FEED_BACKLOG_BYTES: usize = 64 << 20;

/// Where the tracker's lines go (the engine's feed, a recording, a test's vector).
pub trait LineSink: Send {
    /// One native-format line, without its newline; may wait for room. In the proxy only the
    /// feed's thread calls it, never a runtime thread.
    fn line(&mut self, line: Vec<u8>);

    /// One line if it can be taken now, without waiting. The default takes it with
    /// [`LineSink::line`], which is right only for sinks that never wait (a vector, a file):
    /// a sink that can wait must say `Full` instead.
    fn offer(&mut self, line: Vec<u8>) -> Offer {
        self.line(line);
        Offer::Taken
    }

    /// Whether the destination is gone, so that lines given to it are lost.
    fn closed(&self) -> bool {
        false
    }
}

/// What became of a line offered to a sink.
#[derive(Debug, PartialEq, Eq)]
pub enum Offer {
    /// Taken.
    Taken,
    /// No room now: the line, back.
    Full(Vec<u8>),
    /// The destination is gone: the line is lost.
    Closed,
}

impl LineSink for Vec<Vec<u8>> {
    fn line(&mut self, line: Vec<u8>) {
        self.push(line);
    }
}

/// The engine's feed channel (`Engine::with_feed`, `Feed::Proxy`) as a line sink.
pub struct EngineSink {
    tx: SyncSender<FeedItem>,
    closed: bool,
}

impl EngineSink {
    /// Lines go to `tx`, the sender of the channel the engine reads.
    pub fn new(tx: SyncSender<FeedItem>) -> Self {
        EngineSink { tx, closed: false }
    }
}

impl LineSink for EngineSink {
    /// Waits for room (a blocking send): for the feed's thread only.
    fn line(&mut self, bytes: Vec<u8>) {
        if self.closed {
            return;
        }
        let item = FeedItem::Line {
            feed: FeedName::Proxy,
            bytes,
        };
        self.closed = self.tx.send(item).is_err();
    }

    fn offer(&mut self, bytes: Vec<u8>) -> Offer {
        if self.closed {
            return Offer::Closed;
        }
        let item = FeedItem::Line {
            feed: FeedName::Proxy,
            bytes,
        };
        match self.tx.try_send(item) {
            Ok(()) => Offer::Taken,
            Err(TrySendError::Full(FeedItem::Line { bytes, .. })) => Offer::Full(bytes),
            // Only lines are sent.
            Err(TrySendError::Full(_)) => Offer::Closed,
            Err(TrySendError::Disconnected(_)) => {
                self.closed = true;
                Offer::Closed
            }
        }
    }

    fn closed(&self) -> bool {
        self.closed
    }
}

/// Where the tracker writes: to its sink (a tracker on its own), or held for the proxy, which
/// queues them before the tracker's lock is released.
pub(super) enum Out {
    Sink(Box<dyn LineSink>),
    Held(Vec<Vec<u8>>),
}

impl Out {
    pub(super) fn line(&mut self, line: Vec<u8>) {
        match self {
            Out::Sink(s) => s.line(line),
            Out::Held(v) => v.push(line),
        }
    }

    /// From now on, hold the lines written for [`Out::drain`]; the sink they went to (`None`
    /// when they were held already).
    pub(super) fn hold(&mut self) -> Option<Box<dyn LineSink>> {
        match std::mem::replace(self, Out::Held(Vec::new())) {
            Out::Sink(s) => Some(s),
            Out::Held(_) => None,
        }
    }

    /// The lines held since the last call, in the order they were written.
    pub(super) fn drain(&mut self) -> impl Iterator<Item = Vec<u8>> + '_ {
        match self {
            Out::Held(v) => Some(v.drain(..)),
            Out::Sink(_) => None,
        }
        .into_iter()
        .flatten()
    }
}

/// One request's lines not yet taken by the sink.
#[derive(Default)]
pub(super) struct Backlog {
    bytes: AtomicUsize,
    /// Its lines were taken down to the bound.
    room: Notify,
}

impl Backlog {
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Backlog::default())
    }
}

struct Queued {
    line: Vec<u8>,
    backlog: Arc<Backlog>,
}

#[derive(Default)]
struct Queue {
    lines: VecDeque<Queued>,
    /// The sink refused a line: the feed's thread delivers until the queue is empty.
    stalled: bool,
    /// The proxy is gone: the feed's thread delivers what is left, then ends.
    closing: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    /// The sending lock: its holder alone takes lines off the queue.
    sink: Mutex<Box<dyn LineSink>>,
    /// Wakes the feed's thread (with `queue`).
    wake: Condvar,
    /// Bytes of every queued line.
    bytes: AtomicUsize,
    /// The total fell under [`FEED_BACKLOG_BYTES`].
    room: Notify,
    lost: AtomicU64,
    on_lost: Box<dyn Fn(u64) + Send + Sync>,
}

fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    /// A line of `n` bytes of `b` left the queue.
    fn release(&self, b: &Backlog, n: usize) {
        let own = b.bytes.fetch_sub(n, Ordering::SeqCst).saturating_sub(n);
        if own <= REQUEST_BACKLOG_BYTES {
            b.room.notify_one();
        }
        let before = self.bytes.fetch_sub(n, Ordering::SeqCst);
        if before > FEED_BACKLOG_BYTES && before.saturating_sub(n) <= FEED_BACKLOG_BYTES {
            self.room.notify_waiters();
        }
    }

    fn note_lost(&self, n: u64) {
        if n > 0 {
            self.lost.fetch_add(n, Ordering::Relaxed);
            (self.on_lost)(n);
        }
    }

    /// Offer the queue to `sink` (whose lock the caller holds) until it is empty or the sink
    /// is full; `true` when the feed's thread has it (it was or now is stalled).
    fn offer_all(&self, sink: &mut dyn LineSink) -> bool {
        let mut batch = {
            let mut q = lock(&self.queue);
            if q.stalled {
                return true;
            }
            std::mem::take(&mut q.lines)
        };
        let mut lost = 0;
        let mut stalled = false;
        while let Some(Queued { line, backlog }) = batch.pop_front() {
            let n = line.len();
            match sink.offer(line) {
                Offer::Taken => {}
                Offer::Closed => lost += 1,
                Offer::Full(line) => {
                    batch.push_front(Queued { line, backlog });
                    let mut q = lock(&self.queue);
                    // The refused line first, then the rest of the batch, then those queued
                    // since the batch was taken.
                    batch.append(&mut q.lines);
                    q.lines = batch;
                    q.stalled = true;
                    self.wake.notify_one();
                    stalled = true;
                    break;
                }
            }
            self.release(&backlog, n);
        }
        self.note_lost(lost);
        stalled
    }

    /// The feed's thread: waits for the engine whenever a request found it full.
    fn run(&self) {
        loop {
            {
                let mut q = lock(&self.queue);
                loop {
                    if q.stalled || (q.closing && !q.lines.is_empty()) {
                        break;
                    }
                    if q.closing {
                        return;
                    }
                    q = self.wake.wait(q).unwrap_or_else(|p| p.into_inner());
                }
            }
            let mut sink = lock(&self.sink);
            let mut lost = 0;
            loop {
                let next = {
                    let mut q = lock(&self.queue);
                    let next = q.lines.pop_front();
                    if next.is_none() {
                        q.stalled = false;
                    }
                    next
                };
                let Some(Queued { line, backlog }) = next else {
                    break;
                };
                let n = line.len();
                sink.line(line);
                if sink.closed() {
                    lost += 1;
                }
                self.release(&backlog, n);
            }
            drop(sink);
            self.note_lost(lost);
            // A line queued after the queue was found empty, by a request that found the
            // sink's lock held: delivered by the next round.
            let mut q = lock(&self.queue);
            if !q.lines.is_empty() {
                q.stalled = true;
            }
        }
    }
}

/// The queue between the tracker and its sink, and the thread that waits for the sink.
pub(super) struct Feed {
    shared: Arc<Shared>,
}

impl Feed {
    /// Deliver to `sink`; `on_lost` hears how many lines a closed sink lost.
    pub(super) fn start(
        sink: Box<dyn LineSink>,
        on_lost: Box<dyn Fn(u64) + Send + Sync>,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            sink: Mutex::new(sink),
            wake: Condvar::new(),
            bytes: AtomicUsize::new(0),
            room: Notify::new(),
            lost: AtomicU64::new(0),
            on_lost,
        });
        let thread = shared.clone();
        std::thread::Builder::new()
            .name("retryscope-proxy-feed".to_owned())
            .spawn(move || thread.run())?;
        Ok(Feed { shared })
    }

    /// Queue `lines` of the request owning `backlog`: called under the tracker's lock, so the
    /// queue's order is the order the tracker built them in. Never waits for the sink.
    pub(super) fn push(&self, lines: impl Iterator<Item = Vec<u8>>, backlog: &Arc<Backlog>) {
        let mut q = lock(&self.shared.queue);
        for line in lines {
            let n = line.len();
            backlog.bytes.fetch_add(n, Ordering::SeqCst);
            self.shared.bytes.fetch_add(n, Ordering::SeqCst);
            q.lines.push_back(Queued {
                line,
                backlog: backlog.clone(),
            });
        }
    }

    /// Deliver what the sink takes now, if nobody else is delivering: called after the
    /// tracker's lock is released. Never waits.
    pub(super) fn pump(&self) {
        let s = &*self.shared;
        loop {
            let mut sink = match s.sink.try_lock() {
                Ok(g) => g,
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
                // The holder delivers, and looks at the queue again after letting go.
                Err(TryLockError::WouldBlock) => return,
            };
            let handed_over = s.offer_all(&mut **sink);
            drop(sink);
            if handed_over || lock(&s.queue).lines.is_empty() {
                return;
            }
        }
    }

    /// Whether the request owning `b` must wait for the engine before reading more.
    pub(super) fn must_wait(&self, b: &Backlog) -> bool {
        let own = b.bytes.load(Ordering::SeqCst);
        own > REQUEST_BACKLOG_BYTES
            || (own > 0 && self.shared.bytes.load(Ordering::SeqCst) > FEED_BACKLOG_BYTES)
    }

    /// Until the request owning `b` need not wait ([`Feed::must_wait`]).
    pub(super) async fn ready(&self, b: &Backlog) {
        loop {
            let own = b.room.notified();
            let all = self.shared.room.notified();
            tokio::pin!(own, all);
            // `notify_waiters` wakes only waiters that exist: this one does from here on.
            all.as_mut().enable();
            if !self.must_wait(b) {
                return;
            }
            tokio::select! {
                () = &mut own => {}
                () = &mut all => {}
            }
        }
    }

    /// Lines lost so far (the sink was closed).
    pub(super) fn lost(&self) -> u64 {
        self.shared.lost.load(Ordering::Relaxed)
    }

    /// Bytes of lines waiting for the sink.
    #[cfg(test)]
    fn waiting_bytes(&self) -> usize {
        self.shared.bytes.load(Ordering::SeqCst)
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        // The thread delivers what is queued (waiting for the sink as it must), then ends.
        lock(&self.shared.queue).closing = true;
        self.shared.wake.notify_one();
    }
}

#[cfg(test)]
mod tests;
