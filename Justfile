# podkeeper tasks. `just --list` shows them.

# Run the operator on a local control plane with kwok nodes (built on first use).
dev *ARGS:
    cargo run -- dev {{ARGS}}

# Run the operator against the cluster from KUBECONFIG / ~/.kube/config / in-cluster.
run *ARGS:
    cargo run -- run {{ARGS}}

# Every test: unit tests and the integration suite on a real control plane.
test *ARGS:
    cargo test {{ARGS}}

# Regenerate manifests/crds from the Rust types.
crds:
    cargo run -q -- crd --out-dir manifests/crds
