//! Integration tests against a real control plane (see `harness`).

mod application;
mod cluster;
mod harness;
mod redis;
mod ship;
