//! The `retryscope` binary: a thin command line over the library.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    cli::main()
}
