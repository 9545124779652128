//! Integration tests against a real control plane (see `harness`).

mod application;
mod bench;
mod cluster;
mod harness;
mod hostile;
#[cfg(feature = "kind-e2e")]
mod kind;
mod redis;
mod reliability;
mod ship;
