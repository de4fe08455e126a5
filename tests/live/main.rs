//! The live engine (`run`): tailing, stdin, sharded workers, checkpoints, `/metrics`, its own telemetry, hostile input.
//!
//! One test binary per area (one link step each): each module was its own binary before.

#[path = "../common/harness.rs"]
mod harness;
mod metrics_http;
mod one_ingest_path;
mod otlp_pause;
#[path = "../common/otlp_post.rs"]
mod otlp_post;
#[path = "../common/otlp_receiver.rs"]
mod otlp_receiver;
mod run_collector;
mod run_harness;
mod run_sharded;
mod self_telemetry;
mod tail_notify;
mod tail_rotation;
mod trust_run;
mod trust_surface;
mod trust_tail;
