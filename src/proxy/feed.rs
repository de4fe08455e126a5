//! The tracker's lines on their way to the engine.
//!
//! Owns: [`EngineSink`], the engine's feed channel (`Engine::with_feed`, `Feed::Proxy`) as a
//! [`LineSink`], with back-pressure like stdin's.

use std::sync::mpsc::{SyncSender, TrySendError};

use super::attempts::LineSink;
use crate::run::{Feed, FeedItem};

/// The engine's feed channel as the tracker's line sink (`retryscope proxy`).
pub struct EngineSink(SyncSender<FeedItem>);

impl EngineSink {
    /// Lines go to `tx`, the sender of the channel the engine reads.
    pub fn new(tx: SyncSender<FeedItem>) -> Self {
        EngineSink(tx)
    }
}

impl LineSink for EngineSink {
    fn line(&mut self, bytes: Vec<u8>) {
        let item = FeedItem::Line {
            feed: Feed::Proxy,
            bytes,
        };
        match self.0.try_send(item) {
            Ok(()) | Err(TrySendError::Disconnected(_)) => {}
            Err(TrySendError::Full(item)) => {
                // The engine is behind: wait for it (this request's task only).
                let _ = tokio::task::block_in_place(|| self.0.send(item));
            }
        }
    }
}
