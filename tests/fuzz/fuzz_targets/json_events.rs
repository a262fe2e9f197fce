//! Fuzz target `json_events`: see `jpstore_tests::fuzz_targets::json_events`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    jpstore_tests::fuzz_targets::json_events(data);
});
