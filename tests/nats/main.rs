//! The NATS JetStream cluster (`ship`, `run --nats`) against a real nats-server.
//!
//! One test binary per area (one link step each): each module was its own binary before.

mod cluster;
mod nats_support;
