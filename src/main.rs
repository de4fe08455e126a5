//! The `retryscope` binary: a thin command line over the library.

mod cli;

use std::process::ExitCode;

/// mimalloc instead of glibc malloc: the OTLP receiver path allocates per record, and under
/// glibc `malloc`/`free` (with `malloc_consolidate` and `unlink_chunk`) took ~36% of the
/// collector's cycles (perf, `bench_otlp --sessions 60000`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    cli::main()
}
