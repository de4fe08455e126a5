//! The OTLP receiver and the OTLP trace export, over HTTP and gRPC, plain and TLS, under its limits.
//!
//! One test binary per area (one link step each): each module was its own binary before.

mod backpressure;
mod export;
#[path = "../common/harness.rs"]
mod harness;
mod limits;
mod listen_tls;
#[path = "../common/otlp_post.rs"]
mod otlp_post;
#[path = "../common/otlp_receiver.rs"]
mod otlp_receiver;
mod receiver;
mod tls;
#[path = "../common/tls_receiver.rs"]
mod tls_receiver;
