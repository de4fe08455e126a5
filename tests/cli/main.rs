//! Command-line behaviour of the real binary: `check`, `report`, `coverage`, the agents' files, the live view, the demo, the HTML picture.
//!
//! One test binary per area (one link step each): each module was its own binary before.

mod agents;
mod check;
mod coverage;
mod demo;
mod explicit_file;
#[path = "../common/harness.rs"]
mod harness;
mod html_overlap;
mod live_view;
mod model_names;
mod report;
mod run_ux;
mod source;
