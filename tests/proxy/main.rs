//! `retryscope proxy` against mock upstreams that replay recorded provider streams.
//!
//! One test binary per area (one link step each): each module was its own binary before.

mod cli;
mod continuation;
mod feed;
mod fidelity;
mod inject;
mod proxy_support;
mod transport;
