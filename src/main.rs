//! The `retryscope` binary: a thin command line over the library.

mod allocator;
mod cli;

use std::process::ExitCode;

#[global_allocator]
static GLOBAL: allocator::Allocator = allocator::Allocator;

fn main() -> ExitCode {
    cli::main()
}
