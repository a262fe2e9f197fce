//! Simulated storage (being written).
/// Placeholder.
#[derive(Debug)]
pub struct SimStorage;
