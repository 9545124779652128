//! Integration tests against a real control plane (see `harness`).

mod application;
mod bench;
mod bounds;
mod cluster;
mod dev;
#[cfg(feature = "kind-e2e")]
mod dev_kind;
mod harness;
mod hostile;
mod inplace;
#[cfg(feature = "kind-e2e")]
mod kind;
#[cfg(feature = "kind-e2e")]
mod kind_under_writes;
mod leader;
mod proxy;
mod redis;
mod redis_wiring;
mod reliability;
mod ship;
mod transients;
