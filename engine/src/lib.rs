pub fn placeholder() {}

pub mod error;
pub mod log;
