//! Errors of the page pool.

use std::fmt;

use mmkit_core::page_alloc::{AllocError, FreeError};
use mmkit_core::{SettingsError, TopologyError};

/// What went wrong in a pool call. A failed call changes nothing.
#[derive(Debug)]
pub enum PoolError {
    /// The allocator refused (out of memory, bad flags).
    Alloc(AllocError),
    /// Fault injection made this allocation fail (`fail_page_alloc`).
    Injected,
    /// A bad free.
    Free(FreeError),
    /// The address is not inside the pool's arena.
    OutsideArena(usize),
    /// The address is not page aligned.
    Misaligned(usize),
    /// Building the pool: impossible settings.
    Settings(SettingsError),
    /// Building the pool: impossible layout.
    Topology(TopologyError),
    /// Building the pool: the OS refused the mapping or a thread.
    Os(std::io::Error),
    /// Building the pool: an impossible request, in words.
    Invalid(String),
}

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoolError::Alloc(e) => write!(f, "allocation failed: {e}"),
            PoolError::Injected => write!(f, "allocation failed: injected fault"),
            PoolError::Free(e) => write!(f, "free refused: {e}"),
            PoolError::OutsideArena(addr) => write!(f, "address {addr:#x} is outside the pool"),
            PoolError::Misaligned(addr) => write!(f, "address {addr:#x} is not page aligned"),
            PoolError::Settings(e) => write!(f, "invalid settings: {e}"),
            PoolError::Topology(e) => write!(f, "invalid layout: {e}"),
            PoolError::Os(e) => write!(f, "the OS refused: {e}"),
            PoolError::Invalid(why) => write!(f, "{why}"),
        }
    }
}

impl std::error::Error for PoolError {}

impl From<AllocError> for PoolError {
    fn from(e: AllocError) -> PoolError {
        PoolError::Alloc(e)
    }
}

impl From<FreeError> for PoolError {
    fn from(e: FreeError) -> PoolError {
        PoolError::Free(e)
    }
}

impl From<std::io::Error> for PoolError {
    fn from(e: std::io::Error) -> PoolError {
        PoolError::Os(e)
    }
}
