//! The operator's integration tests against a real control plane (see
//! `harness`): the local one built from source, or kind with `just e2e`.
//! The dev tools' own tests (`podkeeper-dev dev`, `bench`) are in
//! dev/tests/it.

mod application;
mod backups;
mod bounds;
mod cluster;
mod harness;
mod hostile;
mod inplace;
#[cfg(feature = "kind-e2e")]
mod kind;
#[cfg(feature = "kind-e2e")]
mod kind_auth;
#[cfg(feature = "kind-e2e")]
mod kind_backup;
#[cfg(feature = "kind-e2e")]
mod kind_metrics;
#[cfg(feature = "kind-e2e")]
mod kind_network;
#[cfg(feature = "kind-e2e")]
mod kind_refusals;
#[cfg(feature = "kind-e2e")]
mod kind_storage;
#[cfg(feature = "kind-e2e")]
mod kind_switchover;
#[cfg(feature = "kind-e2e")]
mod kind_tls;
#[cfg(feature = "kind-e2e")]
mod kind_under_writes;
mod leader;
mod network;
mod proxy;
mod redis;
mod redis_wiring;
mod reliability;
mod scheduling;
mod ship;
mod simulated;
mod storage;
mod storage_refusals;
mod tls;
mod transients;
