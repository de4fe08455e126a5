//! The NATS JetStream cluster (`ship`, `run --nats`) against a real nats-server.
//!
//! One test binary per area (one link step each): each module was its own binary before.

mod clocks;
mod cluster;
mod conformance;
mod dead_letters;
mod decoder_state;
mod deploy;
mod faults;
#[path = "../common/harness.rs"]
mod harness;
mod joined;
mod lagging;
mod nats_support;
#[path = "../common/otlp_post.rs"]
mod otlp_post;
#[path = "../common/otlp_receiver.rs"]
mod otlp_receiver;
#[path = "../proxy/proxy_support/mod.rs"]
mod proxy_support;
mod receiver;
mod spread;
#[path = "../common/tls_receiver.rs"]
mod tls_receiver;
mod traces;
