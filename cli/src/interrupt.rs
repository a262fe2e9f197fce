//! Ctrl-C for long read-only runs (`fsck`, `blob verify`): the first SIGINT
//! or SIGTERM sets a flag the library looks at between units of work, so the
//! run stops cleanly and says so; a second one ends the process at once
//! (for a run stuck in I/O).

use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::Result;

/// The exit status of a run stopped by SIGINT (128 + 2), as shells report it.
pub const INTERRUPTED_STATUS: u8 = 130;

/// A flag set by the first SIGINT or SIGTERM; the second one exits with
/// [`INTERRUPTED_STATUS`].
pub fn flag() -> Result<Arc<AtomicBool>> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    use signal_hook::flag;
    let set = Arc::new(AtomicBool::new(false));
    for signal in [SIGINT, SIGTERM] {
        // Registered first, so it sees the flag before the second handler
        // sets it: only a signal arriving when it is already set exits.
        flag::register_conditional_shutdown(
            signal,
            i32::from(INTERRUPTED_STATUS),
            Arc::clone(&set),
        )?;
        flag::register(signal, Arc::clone(&set))?;
    }
    Ok(set)
}

/// Whether `e` is the library's report of a run stopped by its flag.
pub fn is_interrupted(e: &jpstore_engine::error::Error) -> bool {
    matches!(
        e,
        jpstore_engine::error::Error::Interrupted
            | jpstore_engine::error::Error::Blob(jpstore_blobstore::Error::Interrupted)
    )
}

/// What a command says and returns when it was interrupted.
pub fn stopped(what: &str) -> ExitCode {
    crate::errln!("jp-store: {what} interrupted before the end; run it again to check everything");
    ExitCode::from(INTERRUPTED_STATUS)
}
