//! Integration tests against a real control plane (see `harness`).

mod application;
mod bench;
mod cluster;
mod dev;
mod harness;
mod hostile;
mod leader;
mod proxy;
mod redis;
mod reliability;
mod ship;
mod transients;
