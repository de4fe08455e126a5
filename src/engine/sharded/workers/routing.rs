//! Where the engine thread puts each stream's lines (the routing of `engine/sharded.rs`'s module
//! docs): [`StreamState`], what it knows of a stream, and the [`Workers`] methods that
//! open, feed and end streams, filling each worker's batch with its share: every line while a
//! stream's format is unknown, its own turns' native lines, or all of a stream it reads whole.

use super::{Op, Workers};
use retryscope_core::correlate::Output;
use retryscope_core::decode::Format;
use retryscope_core::ingest::{self, Source, StreamId};
use retryscope_core::turn_route::{self, Routing};

/// A stream as the engine thread knows it.
pub(in crate::engine::sharded) struct StreamState {
    source: Source,
    name: String,
    /// Lines so far (the workers are handed explicit numbers).
    pub(in crate::engine::sharded) lines: u64,
    /// How its lines are shared out, once known (from its forced format at open, else from
    /// worker 0's word once its format is decided): native lines to their turn's worker, a
    /// stream read whole to its route's worker; unknown: to every worker.
    pub(in crate::engine::sharded) routing: Option<Routing>,
    /// Opened on every worker (its routing was unknown then), so it ends on every worker.
    on_all: bool,
}

impl Workers {
    /// The worker that reads the streams of `route`.
    fn owner(&self, route: turn_route::Route) -> usize {
        turn_route::shard_of_route(route, self.txs.len() as u32) as usize
    }

    pub(in crate::engine::sharded) fn stream(
        &mut self,
        source: Source,
        name: &str,
        format: Option<Format>,
    ) -> StreamId {
        if let Some(id) = self.by_name[source as usize].get(name) {
            return StreamId::from_index(*id);
        }
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        // A forced format read whole (the OTLP receiver's streams, `--format`) is routed from
        // its first line, exactly as the workers' `Ingest` routes it (it joins sessions, OTLP
        // streams when `join_otlp`); a native or sniffed stream waits for worker 0's word.
        let forced = format.unwrap_or(self.format);
        let routing =
            match ingest::routing_for(forced, name, ingest::feeds_joiner(forced, self.join_otlp)) {
                Some(whole @ Routing::Whole(_)) => Some(whole),
                _ => None,
            };
        self.streams.insert(
            id,
            StreamState {
                source,
                name: name.to_owned(),
                lines: 0,
                routing,
                on_all: routing.is_none(),
            },
        );
        self.by_name[source as usize].insert(name.to_owned(), id);
        self.push_stream(
            id,
            &Op::Open {
                id,
                source,
                name: name.to_owned(),
                format,
            },
        );
        StreamId::from_index(id)
    }

    /// A line: to its turn's worker once the stream is known to be native (others would skip
    /// it), to its route's worker once it is known to be read whole (others would ignore
    /// it), to every worker until then (each sniffs it alike).
    pub(in crate::engine::sharded) fn line(
        &mut self,
        id: u32,
        number: Option<u64>,
        bytes: &[u8],
        arrival_ms: Option<i64>,
        out: &mut Vec<Output>,
    ) {
        let Some(st) = self.streams.get_mut(&id) else {
            return;
        };
        st.lines = number.unwrap_or(st.lines + 1);
        let number = st.lines;
        let owner = match st.routing {
            Some(Routing::ByTurn) => {
                // A blank native line is no record: skipped, not counted (as `Ingest` does).
                if bytes.iter().all(u8::is_ascii_whitespace) {
                    return;
                }
                Some(turn_route::shard_of_line(bytes, self.txs.len() as u32) as usize)
            }
            Some(Routing::Whole(route)) => Some(self.owner(route)),
            None => None,
        };
        match owner {
            Some(owner) => {
                if let Some(b) = self.batches.get_mut(owner) {
                    b.line(id, number, bytes, arrival_ms);
                }
                self.batched_bytes += bytes.len();
                self.sent(owner, id);
            }
            None => {
                for b in &mut self.batches {
                    b.line(id, number, bytes, arrival_ms);
                }
                self.batched_bytes += bytes.len() * self.batches.len();
                for worker in 0..self.batches.len() {
                    self.sent(worker, id);
                }
            }
        }
        self.maybe_send();
        out.append(&mut self.pending);
    }

    #[cfg(test)]
    fn sent(&mut self, worker: usize, id: u32) {
        if let Some(counts) = self.lines_sent.get_mut(worker) {
            *counts.entry(id).or_insert(0) += 1;
        }
    }

    #[cfg(not(test))]
    fn sent(&mut self, _: usize, _: u32) {}

    /// A line of stream `id` skipped for its length (`number` given): to the workers that
    /// read the stream (the one that counts it among them).
    pub(in crate::engine::sharded) fn too_long(&mut self, id: u32, number: Option<u64>, len: u64) {
        let Some(st) = self.streams.get_mut(&id) else {
            return;
        };
        st.lines = number.unwrap_or(st.lines + 1);
        let number = Some(st.lines);
        self.push_stream(id, &Op::TooLong { id, number, len });
    }

    pub(in crate::engine::sharded) fn end(
        &mut self,
        id: StreamId,
        arrival_ms: Option<i64>,
        park: bool,
        out: &mut Vec<Output>,
    ) {
        let index = id.index();
        let Some(st) = self.streams.get(&index) else {
            return;
        };
        // Ended wherever it was opened: a worker that never reads it still frees its slot.
        let op = Op::End {
            id: index,
            arrival_ms,
            park,
        };
        if st.on_all {
            self.push_all(&op);
        } else {
            self.push_stream(index, &op);
        }
        if let Some(st) = self.streams.remove(&index) {
            self.by_name[st.source as usize].remove(&st.name);
        }
        self.maybe_send();
        out.append(&mut self.pending);
    }

    /// Queue `op` about stream `id` for the worker that reads it whole, or for every worker
    /// while its routing is unknown or by turn.
    fn push_stream(&mut self, id: u32, op: &Op) {
        match self.streams.get(&id).and_then(|st| st.routing) {
            Some(Routing::Whole(route)) => {
                let owner = self.owner(route);
                if let Some(b) = self.batches.get_mut(owner) {
                    b.ops.push(op.clone());
                }
            }
            _ => self.push_all(op),
        }
    }
}
