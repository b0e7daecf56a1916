//! glibc malloc tuning: one arena for every thread, and freed pages handed back after a burst of
//! work (the proxy after each sync, the apiserver after rewriting its store file).
//! glibc gives each thread that allocates its own arena: the sync thread's (the model it builds,
//! the rules it writes) stayed mapped beside the main one — ~6 MiB at 10,000 services.

#![allow(unsafe_code)]

#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod glibc {
    use std::ffi::c_int;

    /// `M_ARENA_MAX` in glibc's malloc.h.
    const M_ARENA_MAX: c_int = -8;

    extern "C" {
        fn mallopt(param: c_int, value: c_int) -> c_int;
        fn malloc_trim(pad: usize) -> c_int;
    }

    pub fn single_arena() -> bool {
        // SAFETY: mallopt only sets an allocator parameter; M_ARENA_MAX accepts any value >= 1.
        unsafe { mallopt(M_ARENA_MAX, 1) == 1 }
    }

    pub fn trim() {
        // SAFETY: malloc_trim takes no pointers; it walks glibc's own free lists under its locks.
        unsafe {
            malloc_trim(0);
        }
    }
}

/// Makes every thread allocate from the main arena (call early in `main`). False where the
/// allocator is not glibc's or refused.
pub fn single_arena() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    return glibc::single_arena();
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    false
}

/// Hands free memory back to the kernel: the top of the heap and whole free pages inside it.
pub fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    glibc::trim();
}
