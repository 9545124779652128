//! The dev tools' tests: `podkeeper-dev dev` on the local control plane (and
//! on kind with `--features kind-e2e`), and a quick `bench`. They share the
//! operator's test harness.

#[allow(unused_imports)]
#[path = "../../../tests/it/harness.rs"]
mod harness;

mod bench;
mod dev;
#[cfg(feature = "kind-e2e")]
mod dev_kind;

/// The dev tools' binary under test.
pub const DEV_BIN: &str = env!("CARGO_BIN_EXE_podkeeper-dev");
