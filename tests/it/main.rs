//! Integration tests against a real control plane (see `harness`).

mod cluster;
mod harness;
mod redis;
