# podkeeper tasks. `just --list` shows them.

kind_cluster := "podkeeper"
image := "podkeeper:dev"
target_dir := env_var_or_default("CARGO_TARGET_DIR", "target")

# Run the operator on a local control plane with kwok nodes (built on first use).
dev *ARGS:
    cargo run -- dev {{ARGS}}

# Run the operator against the cluster from KUBECONFIG / ~/.kube/config / in-cluster.
run *ARGS:
    cargo run -p podkeeper -- run {{ARGS}}

# Every test of both crates: unit tests and the integration suites on a real control plane.
test *ARGS:
    cargo test {{ARGS}}

# Regenerate manifests/crds from the Rust types.
crds:
    cargo run -q -p podkeeper -- crd --out-dir manifests/crds

# The self-contained release binary the image ships (glibc, crt-static).
static:
    RUSTFLAGS="-C target-feature=+crt-static" cargo build -p podkeeper --release --locked --target x86_64-unknown-linux-gnu

# Build the operator image from the `just static` binary (needs a Docker engine; pulls nothing).
image: static
    mkdir -p target/image
    cp {{target_dir}}/x86_64-unknown-linux-gnu/release/podkeeper target/image/podkeeper
    cp /etc/ssl/certs/ca-certificates.crt target/image/ca-certificates.crt
    docker build -t {{image}} -f Dockerfile target/image

# The kind cluster (1 control plane, 2 workers) with real containers: builds the kind binary,
# the node image and the Redis/httpd images from source on first use (cached), creates the
# cluster unless it exists, and loads the images. See README "kind".
kind-up:
    cargo run -q -- kind up --name {{kind_cluster}}

# Load the operator image into kind (imagePullPolicy is IfNotPresent).
kind-load:
    cargo run -q -- kind load --name {{kind_cluster}} {{image}}

# Delete the kind cluster.
kind-down:
    cargo run -q -- kind down --name {{kind_cluster}}

# Install CRDs, RBAC and the operator with kustomize.
deploy:
    kubectl apply -k manifests/

# Remove the operator, its RBAC and its CRDs (and with them every Redis and Application).
undeploy:
    kubectl delete -k manifests/ --ignore-not-found

# The integration suite on kind (default) against the deployed operator, or on the local
# control plane (`just e2e local`). Extra arguments go to `cargo test --test it`.
e2e target="kind" *ARGS:
    #!/usr/bin/env bash
    set -euo pipefail
    if [ "{{target}}" = "local" ]; then exec cargo test --test it {{ARGS}}; fi
    kc=$(cargo run -q -- kind up --name {{kind_cluster}} --object-store --network-policies)
    export KUBECONFIG="$kc"
    just kind_cluster={{kind_cluster}} image kind-load
    kubectl apply -k manifests/
    kubectl -n podkeeper-system rollout restart deploy/podkeeper
    kubectl -n podkeeper-system rollout status deploy/podkeeper --timeout=300s
    PODKEEPER_TEST_KUBECONFIG="$kc" PODKEEPER_TEST_OPERATOR=deployed PODKEEPER_TEST_IMAGES=kind cargo test --test it --features podkeeper/kind-e2e,podkeeper-dev/kind-e2e {{ARGS}}

# Benchmarks (release build): see BENCHMARKS.md.
bench *ARGS:
    cargo run --release -- bench {{ARGS}}

# Reliability soak: the chaos tests for SECONDS each (default 600); SEED replays a printed seed.
soak seconds="600" seed="":
    PODKEEPER_CHAOS_SECONDS={{seconds}} {{ if seed != "" { "PODKEEPER_CHAOS_SEED=" + seed } else { "" } }} cargo test --release --test it reliability::chaos -- --nocapture --test-threads 1

# Redis failover, switchover, image rollout and scale-down measured on kind by a client Pod
# writing through the Service: sets up the cluster and the operator as `just e2e` does, then
# runs `podkeeper-dev bench-redis ARGS` (e.g. --failovers 5 --json target/bench-redis.json), which
# prints the figures as Markdown with their method and load averages.
bench-redis *ARGS:
    #!/usr/bin/env bash
    set -euo pipefail
    kc=$(cargo run -q -- kind up --name {{kind_cluster}} --object-store)
    export KUBECONFIG="$kc"
    just kind_cluster={{kind_cluster}} image kind-load
    kubectl apply -k manifests/
    kubectl -n podkeeper-system rollout restart deploy/podkeeper
    kubectl -n podkeeper-system rollout status deploy/podkeeper --timeout=300s
    cargo run -q --release -- bench-redis {{ARGS}}
