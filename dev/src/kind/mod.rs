//! kind on machines that cannot pull images: the kind binary, a node image
//! and every image a cluster needs, built from Go modules and Debian's
//! packages, cached by version; and the cluster itself (`podkeeper-dev kind up`,
//! used by `just e2e` and `podkeeper-dev dev --kind`).
//!
//! - [`versions`]: what is built, pinned in one place.
//! - [`tools`]: the Go builds (kind, containerd, runc, crictl, CNI plugins,
//!   kubelet/kubeadm/kubectl/kube-proxy, CoreDNS, our pause).
//! - [`rootfs`]: Debian root filesystems by debootstrap.
//! - [`images`]: the cluster and workload images.
//! - [`node_image`]: the node image.
//! - [`cluster`]: the kind configuration, the cluster and its Pod network.
//! - [`storage`]: the default StorageClass and its provisioner
//!   (local-path-provisioner).
//! - [`object_store`]: an S3-compatible object store (versitygw), deployed
//!   only on request (`kind up --object-store`).
//! - [`network_policies`]: NetworkPolicy enforcement (kube-router, firewall only),
//!   only on request (`kind up --network-policies`).
//! - [`preflight`]: whether an engine answers and a first build can run,
//!   for `dev`'s choice of cluster.

pub mod cluster;
pub mod command;
pub mod dev;
mod docker;
mod hash;
pub mod images;
pub mod network_policies;
pub mod node_image;
pub mod object_store;
pub mod preflight;
pub mod rootfs;
pub mod storage;
pub mod tools;
pub mod versions;

use std::fs::File;
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

pub use cluster::UpOptions;

use crate::localcluster::binaries::cache_root;

/// Why building or starting kind failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Build(#[from] crate::localcluster::Error),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{what} failed:\n{detail}")]
    Step { what: String, detail: String },
}

impl Error {
    pub(crate) fn io(context: String, source: std::io::Error) -> Self {
        Error::Io { context, source }
    }
}

/// Progress lines on stderr, timestamped from the first one.
pub(crate) fn progress(message: &str) {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let start = START.get_or_init(Instant::now);
    progress!(
        "podkeeper kind [{:>4}s]: {message}",
        start.elapsed().as_secs()
    );
}

/// Runs `cmd`, keeping its output unless it fails.
pub(crate) fn run_quiet(cmd: &mut Command, what: &str) -> Result<(), Error> {
    let out = cmd.output().map_err(|e| Error::Step {
        what: what.to_string(),
        detail: format!("could not run it: {e}"),
    })?;
    if out.status.success() {
        return Ok(());
    }
    let mut detail = String::from_utf8_lossy(&out.stdout).into_owned();
    detail.push_str(&String::from_utf8_lossy(&out.stderr));
    let lines: Vec<&str> = detail.lines().collect();
    let tail = lines[lines.len().saturating_sub(40)..].join("\n");
    Err(Error::Step {
        what: what.to_string(),
        detail: format!("{}\n{tail}", out.status),
    })
}

/// Holds the kind build lock, so concurrent callers build once.
fn build_lock() -> Result<File, Error> {
    let dir = cache_root().join("kind");
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    let lock = File::create(dir.join("build.lock"))
        .map_err(|e| Error::io("opening the kind build lock".into(), e))?;
    if lock.try_lock().is_err() {
        progress("another process is building; waiting for its lock");
        lock.lock()
            .map_err(|e| Error::io("waiting for the kind build lock".into(), e))?;
    }
    Ok(lock)
}

/// The node image (built if missing), and the tools it was built with.
pub fn ensure_node_image() -> Result<(String, tools::Tools), Error> {
    let _lock = build_lock()?;
    let tools = tools::ensure_tools()?;
    let tag = node_image::ensure(&tools, &cache_root())?;
    Ok((tag, tools))
}

/// The workload images (Redis, httpd), built if missing.
pub fn ensure_workload_images() -> Result<Vec<String>, Error> {
    let _lock = build_lock()?;
    let cache = cache_root();
    let busybox = images::ensure_busybox(&cache)?;
    let index = cache.join("kind").join("httpd-index.html");
    let page =
        "<html><body><h1>podkeeper.dev/httpd</h1><p>served by busybox httpd</p></body></html>\n";
    std::fs::write(&index, page).map_err(|e| Error::io("writing the httpd page".into(), e))?;
    let specs = [images::redis_image(), images::httpd_image(busybox, index)];
    let mut names = Vec::new();
    for (spec, aliases) in specs.iter().zip([
        versions::REDIS_ROLLOUT_IMAGES,
        versions::HTTPD_ROLLOUT_IMAGES,
    ]) {
        spec.ensure(&cache)?;
        names.push(spec.name.clone());
        // Each rollout image is an image of its own (the same layers under
        // a config with one more label), not a second tag of one image:
        // container runtimes report a container's image by the image's ID,
        // so with shared IDs a container on `-rollout-2` could be reported
        // as running the first tag.
        for alias in aliases {
            docker::Context::new(&format!(
                "FROM {}\nLABEL dev.podkeeper.rollout-image=\"{alias}\"\n",
                spec.name
            ))?
            .build(alias)?;
            names.push(alias.to_string());
        }
    }
    Ok(names)
}

/// The images of the default StorageClass's provisioner ([`storage`]):
/// the local-path-provisioner's and its helper Pods' busybox, built if
/// missing.
pub fn ensure_storage_images(tools: &tools::Tools) -> Result<Vec<String>, Error> {
    let _lock = build_lock()?;
    let cache = cache_root();
    let busybox = images::ensure_busybox(&cache)?;
    let specs = [
        images::local_path_provisioner_image(tools),
        images::local_path_helper_image(busybox),
    ];
    for spec in &specs {
        spec.ensure(&cache)?;
    }
    Ok(specs.into_iter().map(|s| s.name).collect())
}

/// The object store's image ([`object_store`]), built if missing, with
/// versitygw itself: only a cluster asked for the object store needs them.
pub fn ensure_object_store_image() -> Result<String, Error> {
    let _lock = build_lock()?;
    let spec = images::versitygw_image(tools::ensure_object_store_tool()?);
    spec.ensure(&cache_root())?;
    Ok(spec.name)
}

/// kube-router's image ([`network_policies`]), built if missing.
pub fn ensure_network_policies_image() -> Result<String, Error> {
    let _lock = build_lock()?;
    let spec = images::network_policies_image(tools::ensure_network_policies_tool()?);
    spec.ensure(&cache_root())?;
    Ok(spec.name)
}

/// Everything for a working cluster: the node image, the cluster (created
/// unless it exists), its Pod network, the workload images loaded, the
/// default StorageClass's provisioner deployed and Ready (on a reused
/// cluster too), with `opts.network_policies` NetworkPolicies enforced, and
/// with `opts.object_store` the object store deployed and Ready. Returns
/// the path of a kubeconfig for it.
pub fn up(opts: &UpOptions) -> Result<PathBuf, Error> {
    let started = Instant::now();
    let (node_image, tools) = ensure_node_image()?;
    let workload = ensure_workload_images()?;
    let storage_images = ensure_storage_images(&tools)?;
    let mut optional_images = Vec::new();
    if opts.object_store {
        optional_images.push(ensure_object_store_image()?);
    }
    if opts.network_policies {
        optional_images.push(ensure_network_policies_image()?);
    }
    cluster::create(&tools.kind, &node_image, opts)?;
    cluster::load(
        &tools.kind,
        &opts.name,
        &[workload, storage_images, optional_images].concat(),
    )?;
    storage::install(&opts.name)?;
    if opts.network_policies {
        network_policies::install(&opts.name)?;
    }
    if opts.object_store {
        object_store::install(&opts.name)?;
    }
    let path = cache_root()
        .join("kind")
        .join(format!("{}.kubeconfig", opts.name));
    std::fs::write(&path, cluster::kubeconfig(&tools.kind, &opts.name)?)
        .map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
    progress(&format!(
        "cluster {} ready in {}s; kubeconfig {}",
        opts.name,
        started.elapsed().as_secs(),
        path.display()
    ));
    Ok(path)
}
