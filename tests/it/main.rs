//! Integration tests against a real control plane (see `harness`).

mod application;
mod bench;
mod cluster;
mod harness;
mod hostile;
mod redis;
mod reliability;
mod ship;
mod transients;
