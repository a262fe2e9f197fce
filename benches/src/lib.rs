//! Workload generators shared by the benchmarks.
