//! Paths of the guest components that `build.rs` builds for the tests.

include!(concat!(env!("OUT_DIR"), "/artifacts.rs"));
