//! Deterministic workload generators.

pub mod code;
pub mod conversation;
pub mod rng;
pub mod source_tree;
