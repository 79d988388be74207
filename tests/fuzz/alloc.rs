//! A global allocator that counts: the biggest single request, the live
//! total and its peak. A request that would pass [`crate::MEMORY_LIMIT`]
//! (alone or on top of what is live) is never made: the thread records it
//! and waits for the watchdog, which keeps the input and ends the run.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

pub struct Tracking;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static BIGGEST: AtomicUsize = AtomicUsize::new(0);
static OVER: AtomicUsize = AtomicUsize::new(0);

/// The biggest single allocation so far, in bytes.
pub fn biggest() -> usize {
    BIGGEST.load(Ordering::Relaxed)
}

/// Starts counting the biggest allocation afresh.
pub fn reset_biggest() {
    BIGGEST.store(0, Ordering::Relaxed);
}

/// The most memory live at once so far, in bytes.
pub fn peak() -> usize {
    PEAK.load(Ordering::Relaxed)
}

/// The size of a request refused for passing the limit; 0 if none was.
pub fn over() -> usize {
    OVER.load(Ordering::SeqCst)
}

fn admit(size: usize) {
    BIGGEST.fetch_max(size, Ordering::Relaxed);
    let live = LIVE.fetch_add(size, Ordering::Relaxed) + size;
    PEAK.fetch_max(live, Ordering::Relaxed);
    if size > crate::MEMORY_LIMIT || live > crate::MEMORY_LIMIT {
        // Never made, so not live: the watchdog must still be able to allocate.
        LIVE.fetch_sub(size, Ordering::Relaxed);
        OVER.store(size.max(1), Ordering::SeqCst);
        // Sleeping allocates nothing; the watchdog ends the process.
        loop {
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
    }
}

// SAFETY: every call is forwarded to `System` unchanged; only counters are kept.
unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        admit(layout.size());
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        admit(layout.size());
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        admit(new_size);
        // SAFETY: `ptr` came from `alloc` with `layout`; `new_size` is the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
