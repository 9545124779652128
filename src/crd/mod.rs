//! The custom resources podkeeper serves, group `podkeeper.dev`, version `v1`.

pub mod redis;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

pub use redis::{Redis, RedisSpec, RedisStatus};

pub const GROUP: &str = "podkeeper.dev";

/// Every CRD podkeeper serves.
pub fn all() -> Vec<CustomResourceDefinition> {
    vec![Redis::crd()]
}

/// Every CRD as one multi-document YAML stream.
pub fn to_yaml() -> String {
    all()
        .iter()
        .map(|crd| serde_yaml_ng::to_string(crd).unwrap_or_default())
        .collect::<Vec<_>>()
        .join("---\n")
}

/// `podkeeper crd`.
pub fn print_all() -> Result<(), crate::Error> {
    print!("{}", to_yaml());
    Ok(())
}
