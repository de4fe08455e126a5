//! The bounded queue between the OTLP receiver (tokio tasks) and the engine thread.
//!
//! Owns: backpressure and the receiver's memory bound. A request's records are accepted whole
//! or not at all: when they do not fit (queued and reserved bytes over the bound) or the queue
//! is closed, [`Queue::offer`] says so and the receiver answers with a retryable status, so
//! nothing acknowledged is ever dropped; a request that could never fit is refused as too
//! large. Requests being read and decoded hold a [`Reservation`] that grows with what they
//! occupy (body, inflated body, the decoding's estimate), so the bound holds for them too and
//! a request is refused before it is decoded when it cannot fit. With a
//! write-ahead spool ([`super::spool`]) a request is written and fsync'd before it is queued,
//! and each batch carries the spool position after it, which the engine's checkpoint records.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::record::Record;
use super::spool::{Spool, SpoolPos};

/// One accepted request's records.
#[derive(Debug)]
pub struct Batch {
    /// The records, in order.
    pub records: Vec<Record>,
    /// Where the spool stands after this batch (with a spool).
    pub spool_end: Option<SpoolPos>,
}

/// Why records were not accepted.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// The queue is full: retry later.
    #[error("the pipeline is behind ({queued} bytes queued, limit {limit}); retry later")]
    Full {
        /// Bytes queued.
        queued: u64,
        /// The bound.
        limit: u64,
    },
    /// The request alone would need more than the bound: not retryable.
    #[error("the request needs {need} bytes decoded, more than the queue's limit of {limit}")]
    TooLarge {
        /// Bytes it needs (at least).
        need: u64,
        /// The bound.
        limit: u64,
    },
    /// Shutting down.
    #[error("shutting down; retry later")]
    Closed,
    /// The spool could not be written (nothing was acknowledged).
    #[error("cannot write the spool: {0}")]
    Spool(std::io::Error),
}

/// The queue.
#[derive(Debug)]
pub struct Queue {
    batches: Mutex<VecDeque<(Batch, u64)>>,
    /// Serializes offers (and spool writes), so batches are queued in spool order.
    spool: Mutex<Option<Spool>>,
    durable: AtomicBool,
    queued_bytes: AtomicU64,
    queued_records: AtomicU64,
    /// Bytes held by requests being read and decoded ([`Reservation`]).
    reserved_bytes: AtomicU64,
    /// [`Spool::bytes`] after the last write or release (read without the spool's lock,
    /// which a write holds through its fsync).
    spool_bytes: AtomicU64,
    limit: u64,
    closed: AtomicBool,
}

/// Memory a request being read or decoded holds under the queue's bound; given back when
/// dropped.
#[derive(Debug)]
pub struct Reservation {
    queue: Arc<Queue>,
    bytes: u64,
}

impl Reservation {
    /// Hold `n` more bytes, or say why they do not fit.
    pub fn grow(&mut self, n: u64) -> Result<(), Refused> {
        let q = &self.queue;
        if q.closed.load(Ordering::SeqCst) {
            return Err(Refused::Closed);
        }
        if self.bytes + n > q.limit {
            return Err(Refused::TooLarge {
                need: self.bytes + n,
                limit: q.limit,
            });
        }
        let mut reserved = q.reserved_bytes.load(Ordering::SeqCst);
        loop {
            let queued = q.queued_bytes.load(Ordering::SeqCst);
            if queued + reserved + n > q.limit {
                return Err(Refused::Full {
                    queued,
                    limit: q.limit,
                });
            }
            match q.reserved_bytes.compare_exchange(
                reserved,
                reserved + n,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => break,
                Err(now) => reserved = now,
            }
        }
        self.bytes += n;
        Ok(())
    }

    /// Give back `n` of the bytes held (memory freed while the request goes on).
    pub fn release(&mut self, n: u64) {
        let n = n.min(self.bytes);
        self.bytes -= n;
        self.queue.reserved_bytes.fetch_sub(n, Ordering::SeqCst);
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The queue's bound (no reservation grows past it).
    pub fn limit(&self) -> u64 {
        self.queue.limit
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.queue
            .reserved_bytes
            .fetch_sub(self.bytes, Ordering::SeqCst);
    }
}

fn size(records: &[Record]) -> u64 {
    records
        .iter()
        .map(|r| (r.line.len() + r.stream.len() + 48) as u64)
        .sum()
}

impl Queue {
    /// A queue holding at most `limit` bytes of records and of requests being read.
    pub fn new(limit: u64) -> Self {
        Queue {
            batches: Mutex::new(VecDeque::new()),
            spool: Mutex::new(None),
            durable: AtomicBool::new(false),
            queued_bytes: AtomicU64::new(0),
            queued_records: AtomicU64::new(0),
            reserved_bytes: AtomicU64::new(0),
            spool_bytes: AtomicU64::new(0),
            limit,
            closed: AtomicBool::new(false),
        }
    }

    /// Write accepted records ahead to `spool` from now on (set by the engine at start-up,
    /// before the receiver accepts anything).
    pub fn attach_spool(&self, spool: Spool) {
        if let Ok(mut s) = self.spool.lock() {
            self.spool_bytes.store(spool.bytes(), Ordering::Relaxed);
            *s = Some(spool);
            self.durable.store(true, Ordering::SeqCst);
        }
    }

    /// Whether accepted records are written ahead to disk.
    pub fn durable(&self) -> bool {
        self.durable.load(Ordering::SeqCst)
    }

    /// Bytes of the spool on disk (0 without one).
    pub fn spool_bytes(&self) -> u64 {
        self.spool_bytes.load(Ordering::Relaxed)
    }

    /// Records and bytes waiting for the engine.
    pub fn depth(&self) -> (u64, u64) {
        (
            self.queued_records.load(Ordering::Relaxed),
            self.queued_bytes.load(Ordering::Relaxed),
        )
    }

    /// A reservation of nothing yet, for a request about to be read.
    pub fn reserve(self: &Arc<Self>) -> Reservation {
        Reservation {
            queue: self.clone(),
            bytes: 0,
        }
    }

    /// Bytes held by requests being read and decoded.
    pub fn reserved(&self) -> u64 {
        self.reserved_bytes.load(Ordering::SeqCst)
    }

    /// Whether `bytes` more fit, besides what is queued and reserved (`own` of the reserved
    /// bytes belong to the asking request and make room for it).
    fn check(&self, bytes: u64, own: u64) -> Result<(), Refused> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(Refused::Closed);
        }
        if bytes > self.limit {
            return Err(Refused::TooLarge {
                need: bytes,
                limit: self.limit,
            });
        }
        let queued = self.queued_bytes.load(Ordering::SeqCst);
        let others = self.reserved().saturating_sub(own);
        if queued + others + bytes > self.limit {
            return Err(Refused::Full {
                queued,
                limit: self.limit,
            });
        }
        Ok(())
    }

    fn enqueue(&self, batch: Batch, bytes: u64) {
        let n = batch.records.len() as u64;
        if let Ok(mut q) = self.batches.lock() {
            q.push_back((batch, bytes));
            self.queued_bytes.fetch_add(bytes, Ordering::SeqCst);
            self.queued_records.fetch_add(n, Ordering::SeqCst);
        }
    }

    /// Accept all of `records` or none. With a spool this blocks on the disk (write and
    /// fsync): call it off the async runtime.
    pub fn offer(&self, records: Vec<Record>) -> Result<(), Refused> {
        self.offer_reserved(records, 0)
    }

    /// [`Queue::offer`] for a request holding `own` reserved bytes (released by its
    /// [`Reservation`] afterwards).
    pub fn offer_reserved(&self, records: Vec<Record>, own: u64) -> Result<(), Refused> {
        if records.is_empty() {
            return self.check(0, own);
        }
        let bytes = size(&records);
        let mut spool = self.spool.lock().map_err(|_| Refused::Closed)?;
        match spool.as_mut() {
            None => {
                self.check(bytes, own)?;
                self.enqueue(
                    Batch {
                        records,
                        spool_end: None,
                    },
                    bytes,
                );
            }
            Some(spool) => {
                // Only this writer adds, so the room seen here cannot shrink before the push.
                self.check(bytes, own)?;
                let end = spool.append(&records).map_err(Refused::Spool)?;
                self.spool_bytes.store(spool.bytes(), Ordering::Relaxed);
                self.enqueue(
                    Batch {
                        records,
                        spool_end: Some(end),
                    },
                    bytes,
                );
            }
        }
        Ok(())
    }

    /// Put back batches read from the spool at start-up (already acknowledged), bypassing
    /// the bound.
    pub fn restore(&self, batch: Batch) {
        let bytes = size(&batch.records);
        self.enqueue(batch, bytes);
    }

    /// Take whole batches, about `max_records` records (at least one batch when any waits).
    pub fn take(&self, max_records: usize, out: &mut Vec<Batch>) {
        let Ok(mut q) = self.batches.lock() else {
            return;
        };
        let mut n = 0;
        while n < max_records {
            let Some((batch, bytes)) = q.pop_front() else {
                break;
            };
            n += batch.records.len();
            self.queued_bytes.fetch_sub(bytes, Ordering::SeqCst);
            self.queued_records
                .fetch_sub(batch.records.len() as u64, Ordering::SeqCst);
            out.push(batch);
        }
    }

    /// Refuse new records from now on (shutdown); what is queued can still be taken.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }

    /// The spool's end, when nothing accepted is waiting for the engine (no request is
    /// half-way through being written either: the spool lock is held while looking).
    pub fn idle_spool_position(&self) -> Option<SpoolPos> {
        let spool = self.spool.lock().ok()?;
        let idle = self.batches.lock().ok()?.is_empty();
        spool.as_ref().filter(|_| idle).map(Spool::position)
    }

    /// The checkpoint covers the spool up to `pos`: delete the segments before it.
    pub fn release_spool(&self, pos: SpoolPos) {
        if let Ok(mut s) = self.spool.lock()
            && let Some(s) = s.as_mut()
        {
            s.release(pos);
            self.spool_bytes.store(s.bytes(), Ordering::Relaxed);
        }
    }
}
