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

/// Lazy arena commit. The purge delay stays at mimalloc's 1 s: at 10 ms, `check` and
/// `run` lost 5–15% to purging (`bench_floor`), for 2 MiB less peak RSS.
const TUNING: [(libmimalloc_sys::mi_option_t, &CStr, std::ffi::c_long); 1] = [(
    MI_OPTION_ARENA_EAGER_COMMIT,
    c"MIMALLOC_ARENA_EAGER_COMMIT",
    0,
)];

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
    /// it. Reading the options back also proves the option numbers name the options meant
    /// (mimalloc's default is 2).
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
}
