//! Deterministic workload generators.

pub mod code;
pub mod rng;
pub mod source_tree;
