//! Decoders and the offline `check` against real recordings, the shared provider fixtures, fuzzed and property-tested input.
//!
//! One test binary per area (one link step each): each module was its own binary before.

mod check_otlp;
mod check_parallel;
#[path = "../common/mod.rs"]
mod common;
mod correlator_props;
mod fuzz_decoders;
mod long_tool;
mod otlp_genai;
#[path = "../common/otlp_post.rs"]
mod otlp_post;
#[path = "../common/otlp_receiver.rs"]
mod otlp_receiver;
mod providers;
mod real_agents;
mod shared_fixtures;
mod trust_check;
