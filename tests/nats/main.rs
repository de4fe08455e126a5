//! The NATS JetStream cluster (`ship`, `run --nats`) against a real nats-server.
//!
//! One test binary per area (one link step each): each module was its own binary before.

mod cluster;
mod deploy;
mod nats_support;
#[path = "../common/otlp_receiver.rs"]
mod otlp_receiver;
#[path = "../common/tls_receiver.rs"]
mod tls_receiver;
mod traces;
