//! The binary's global allocator: mimalloc, tuned before its first allocation. The
//! in-process benchmark `bench_nats` includes this file (`#[path]`) and declares it too: on
//! glibc malloc it measured another program (its collectors spent a quarter of their cycles
//! in glibc's `malloc`/`free`, which `run --nats` does not).
//!
//! mimalloc instead of glibc malloc: the OTLP receiver path allocates per record, and under
//! glibc `malloc`/`free` (with `malloc_consolidate` and `unlink_chunk`) took ~36% of the
//! collector's cycles (perf, `bench_otlp --sessions 60000`).
//!
//! Untuned, mimalloc commits its first 1 GiB arena up front on Linux and keeps freed pages
//! resident; `check --json` on 1M events then peaked at 35–41 MiB RSS against 16 MiB with
//! glibc (issue 16 asks for under 32 MiB). The arena is reserved by the very first
//! allocation, before `main`, so the options are set on that first call. A `MIMALLOC_*`
//! variable the user set still wins (mimalloc reads it itself).

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::{CStr, c_char};
use std::sync::atomic::{AtomicBool, Ordering};

use mimalloc::MiMalloc;

/// mimalloc's option number (`mi_option_e` in mimalloc v3's `mimalloc.h`); the crate does
/// not name it.
const MI_OPTION_ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;

/// mimalloc v3's `mi_option_purge_delay`, likewise.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Lazy arena commit, and freed memory given back to the system 10 s after it was freed
/// instead of mimalloc's 1 s. A cluster collector holds a settle time's events (5 s by
/// default) and frees them as it correlates them: purged after 1 s, that memory was
/// faulted in again for the next turns, a third of the collector's page faults (490k of
/// them for 10M events against 310k at 10 s, and no fewer without purging at all:
/// `bench_nats --events 10000000 --collectors 1`, docs/scaling.md). `check`'s peak RSS is the same at
/// either delay (17 MiB on 1M events). At 10 ms, `check` and `run` lost 5–15% to purging
/// (`bench_floor`), for 2 MiB less peak RSS.
const TUNING: [(libmimalloc_sys::mi_option_t, &CStr, std::ffi::c_long); 2] = [
    (
        MI_OPTION_ARENA_EAGER_COMMIT,
        c"MIMALLOC_ARENA_EAGER_COMMIT",
        0,
    ),
    (MI_OPTION_PURGE_DELAY, c"MIMALLOC_PURGE_DELAY", 10_000),
];

unsafe extern "C" {
    /// The C library's `getenv`: reading the environment through `std` would allocate.
    fn getenv(name: *const c_char) -> *mut c_char;
}

static TUNED: AtomicBool = AtomicBool::new(false);

fn tune_once() {
    if TUNED.load(Ordering::Relaxed) {
        return;
    }
    TUNED.store(true, Ordering::Relaxed);
    for (option, var, value) in TUNING {
        // SAFETY: `getenv` reads a NUL-terminated name and allocates nothing; this runs on
        // the first allocation, before `main` and any other thread. `mi_option_set` only
        // stores an integer in mimalloc's option table.
        unsafe {
            if getenv(var.as_ptr()).is_null() {
                libmimalloc_sys::mi_option_set(option, value);
            }
        }
    }
}

/// mimalloc with [`TUNING`] applied before its first allocation.
pub struct Allocator;

// SAFETY: every call is forwarded unchanged to mimalloc, which upholds `GlobalAlloc`.
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        tune_once();
        unsafe { MiMalloc.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        tune_once();
        unsafe { MiMalloc.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { MiMalloc.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        unsafe { MiMalloc.realloc(ptr, layout, new_size) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test binary runs on this allocator too, so by now the first allocation has tuned
    /// it.
    #[test]
    fn options_are_set_before_the_first_allocation() {
        for (option, var, value) in TUNING {
            if std::env::var_os(var.to_str().unwrap_or_default()).is_some() {
                continue;
            }
            // SAFETY: reads an integer from mimalloc's option table.
            let got = unsafe { libmimalloc_sys::mi_option_get(option) };
            assert_eq!(got, value, "{var:?}");
        }
    }

    /// The option numbers name the options meant: this test binary, run again with each
    /// option's variable set to a value of its own (mimalloc reads the variable by the
    /// option's name), finds that value under the option's number.
    #[test]
    fn option_numbers_are_the_options_their_variables_name() {
        const PROBE: &str = "RETRYSCOPE_ALLOCATOR_PROBE";
        let probe = |value: usize| 7 + value as std::ffi::c_long;
        if std::env::var_os(PROBE).is_some() {
            for (i, (option, var, _)) in TUNING.into_iter().enumerate() {
                // SAFETY: reads an integer from mimalloc's option table.
                let got = unsafe { libmimalloc_sys::mi_option_get(option) };
                assert_eq!(got, probe(i), "{var:?} is option {option}");
            }
            return;
        }
        let exe = std::env::current_exe().expect("the test binary");
        let mut run = std::process::Command::new(exe);
        run.args([
            "--exact",
            "allocator::tests::option_numbers_are_the_options_their_variables_name",
            "--test-threads",
            "1",
        ])
        .env(PROBE, "1");
        for (i, (_, var, _)) in TUNING.into_iter().enumerate() {
            run.env(var.to_str().unwrap_or_default(), probe(i).to_string());
        }
        let out = run.output().expect("run the test binary");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("1 passed"),
            "probe run: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
