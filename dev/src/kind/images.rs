//! The container images podkeeper builds for kind, none pulled: what each
//! holds (a pure plan) and building it with Docker.
//!
//! - cluster images under [`versions::CLUSTER_IMAGE_REPOSITORY`] (etcd, the
//!   control plane, kube-proxy, CoreDNS, pause), preloaded into the node
//!   image;
//! - workload images (Debian's redis-server, busybox's httpd), loaded into
//!   a cluster with `kind load`;
//! - the default StorageClass's provisioner (rancher's local-path-provisioner)
//!   and its helper Pods' busybox, loaded the same way (see
//!   [`super::storage`]);
//! - the object store (versitygw), built and loaded only for a cluster asked
//!   for it (see [`super::object_store`]).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::rootfs::{self, Rootfs};
use super::tools::Tools;
use super::{Error, docker, hash, versions as v};

/// Label holding the hash of an image's inputs; a differing hash rebuilds.
const INPUTS_LABEL: &str = "podkeeper.dev/inputs";

/// What an image starts from.
#[derive(Clone, Debug)]
pub enum Base {
    Scratch,
    Rootfs(Rootfs),
}

/// One image: files copied onto a base, and Dockerfile configuration lines.
#[derive(Clone, Debug)]
pub struct ImageSpec {
    pub name: String,
    pub base: Base,
    /// (source on this machine, path in the image)
    pub files: Vec<(PathBuf, String)>,
    /// Dockerfile lines after the COPYs (ENV, USER, ENTRYPOINT, ...).
    pub config: Vec<String>,
}

const PATH_ENV: &str = "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

impl ImageSpec {
    /// The Dockerfile, given the name of the base image.
    pub fn dockerfile(&self, base: &str) -> String {
        let mut text = format!("FROM {base}\n");
        for (i, (_, dest)) in self.files.iter().enumerate() {
            text.push_str(&format!("COPY f{i} {dest}\n"));
        }
        for line in &self.config {
            text.push_str(line);
            text.push('\n');
        }
        text
    }

    fn base_name(&self) -> String {
        match &self.base {
            Base::Scratch => "scratch".into(),
            Base::Rootfs(r) => format!("{}/rootfs:{}", v::CLUSTER_IMAGE_REPOSITORY, r.key()),
        }
    }

    /// Hash of everything the image is made of (sources are named by their
    /// cache paths, which carry their versions and content hashes).
    fn inputs_hash(&self) -> String {
        let mut text = self.dockerfile(&self.base_name());
        for (source, _) in &self.files {
            text.push_str(&format!("{}\n", source.display()));
        }
        hash::short(&text)[..16].to_string()
    }

    /// Builds the image unless one with the same inputs exists.
    pub fn ensure(&self, cache: &Path) -> Result<(), Error> {
        let inputs = self.inputs_hash();
        if docker::image_label(&self.name, INPUTS_LABEL).as_deref() == Some(inputs.as_str()) {
            return Ok(());
        }
        let base = self.base_name();
        if let Base::Rootfs(r) = &self.base
            && !docker::image_exists(&base)
        {
            docker::import(&r.ensure(cache)?, &base)?;
        }
        let mut dockerfile = self.dockerfile(&base);
        dockerfile.push_str(&format!("LABEL {INPUTS_LABEL}={inputs}\n"));
        let context = docker::Context::new(&dockerfile)?;
        for (i, (source, _)) in self.files.iter().enumerate() {
            context.add_file(source, &format!("f{i}"))?;
        }
        super::progress(&format!("building image {}", self.name));
        context.build(&self.name)
    }
}

fn scratch_binary(
    name: String,
    binary: PathBuf,
    dest: &str,
    entrypoint: Option<&str>,
) -> ImageSpec {
    let mut config = vec![PATH_ENV.to_string()];
    if let Some(e) = entrypoint {
        config.push(format!("ENTRYPOINT [\"{e}\"]"));
    }
    ImageSpec {
        name,
        base: Base::Scratch,
        files: vec![(binary, dest.into())],
        config,
    }
}

/// Every image kubeadm asks for at cluster start, under kubeadm's names
/// for a custom `imageRepository`. kubeadm's manifests give the command
/// (`kube-apiserver ...`, `etcd ...`, `/usr/local/bin/kube-proxy`), except
/// CoreDNS's and pause's, which run their entrypoint.
pub fn cluster_images(tools: &Tools) -> Vec<ImageSpec> {
    let repo = v::CLUSTER_IMAGE_REPOSITORY;
    let k = v::KUBERNETES;
    let cp = &tools.control_plane;
    let mut images = vec![
        scratch_binary(
            format!("{repo}/etcd:{}", v::etcd_tag()),
            cp.etcd.clone(),
            "/usr/local/bin/etcd",
            None,
        ),
        scratch_binary(
            format!("{repo}/kube-apiserver:v{k}"),
            cp.kube_apiserver.clone(),
            "/usr/local/bin/kube-apiserver",
            None,
        ),
        scratch_binary(
            format!("{repo}/kube-controller-manager:v{k}"),
            cp.kube_controller_manager.clone(),
            "/usr/local/bin/kube-controller-manager",
            None,
        ),
        scratch_binary(
            format!("{repo}/kube-scheduler:v{k}"),
            cp.kube_scheduler.clone(),
            "/usr/local/bin/kube-scheduler",
            None,
        ),
        scratch_binary(
            format!("{repo}/coredns:v{}", v::COREDNS),
            tools.coredns.join("coredns"),
            "/coredns",
            Some("/coredns"),
        ),
    ];
    let mut pause = scratch_binary(
        format!("{repo}/pause:{}", v::PAUSE),
        tools.pause.join("pause"),
        "/pause",
        Some("/pause"),
    );
    pause.config.push("USER 65535:65535".into());
    images.push(pause);
    images.push(ImageSpec {
        name: format!("{repo}/kube-proxy:v{k}"),
        base: Base::Rootfs(rootfs::KUBE_PROXY),
        files: vec![(
            tools.kubernetes_node.join("kube-proxy"),
            "/usr/local/bin/kube-proxy".into(),
        )],
        config: vec![PATH_ENV.into()],
    });
    images
}

/// The pause image's name (containerd's sandbox image).
pub fn pause_image() -> String {
    format!("{}/pause:{}", v::CLUSTER_IMAGE_REPOSITORY, v::PAUSE)
}

/// The Redis image: Debian's redis-server as uid 999 (the uid podkeeper's
/// Pods run as), data in /data.
pub fn redis_image() -> ImageSpec {
    ImageSpec {
        name: v::REDIS_IMAGE.into(),
        base: Base::Rootfs(rootfs::REDIS),
        files: vec![],
        config: vec![
            PATH_ENV.into(),
            "USER 999:999".into(),
            "WORKDIR /data".into(),
            "EXPOSE 6379".into(),
            "CMD [\"redis-server\"]".into(),
        ],
    }
}

/// The Application sample's image: busybox's httpd (from Debian's
/// busybox-static) serving a page on port 80.
pub fn httpd_image(busybox: PathBuf, index_html: PathBuf) -> ImageSpec {
    ImageSpec {
        name: v::HTTPD_IMAGE.into(),
        base: Base::Scratch,
        files: vec![
            (busybox, "/bin/busybox".into()),
            (index_html, "/www/index.html".into()),
        ],
        config: vec![
            "EXPOSE 80".into(),
            "ENTRYPOINT [\"/bin/busybox\", \"httpd\", \"-f\", \"-v\", \"-p\", \"80\", \"-h\", \"/www\"]"
                .into(),
        ],
    }
}

/// rancher's local-path-provisioner alone on `scratch`: a static Go program
/// that only talks to the API server (in-cluster configuration, its
/// configuration files mounted from its ConfigMap), so it runs as a non-root
/// user with nothing else in the image.
pub fn local_path_provisioner_image(tools: &Tools) -> ImageSpec {
    let mut spec = scratch_binary(
        v::local_path_provisioner_image(),
        tools.local_path_provisioner.join("local-path-provisioner"),
        "/usr/local/bin/local-path-provisioner",
        Some("/usr/local/bin/local-path-provisioner"),
    );
    spec.config.push("USER 65532:65532".into());
    spec
}

/// The object store: versitygw alone on `scratch`, as a non-root user. It
/// needs nothing but its data directory (a volume) and its port, so the
/// image has no shell and no other file.
pub fn versitygw_image(binary: PathBuf) -> ImageSpec {
    let mut spec = scratch_binary(
        v::versitygw_image(),
        binary,
        "/usr/local/bin/versitygw",
        Some("/usr/local/bin/versitygw"),
    );
    spec.config.push("USER 65532:65532".into());
    spec.config
        .push(format!("EXPOSE {}", super::object_store::PORT));
    spec
}

/// kube-router on Debian's iptables and ipset, which it runs.
pub fn network_policies_image(binary: PathBuf) -> ImageSpec {
    ImageSpec {
        name: v::network_policies_image(),
        base: Base::Rootfs(rootfs::NETWORK_POLICIES),
        files: vec![(binary, "/usr/local/bin/kube-router".into())],
        config: vec![
            PATH_ENV.into(),
            "ENTRYPOINT [\"/usr/local/bin/kube-router\"]".into(),
        ],
    }
}

/// The local-path-provisioner's helper Pods: Debian's static busybox with
/// its applets linked into /bin (the provisioner runs `/bin/sh
/// /script/setup` and `/bin/sh /script/teardown`, which call `mkdir` and
/// `rm`). The links are made by running busybox itself at build time.
pub fn local_path_helper_image(busybox: PathBuf) -> ImageSpec {
    ImageSpec {
        name: v::local_path_helper_image(),
        base: Base::Scratch,
        files: vec![(busybox, "/bin/busybox".into())],
        config: vec![
            PATH_ENV.into(),
            "RUN [\"/bin/busybox\", \"--install\", \"-s\", \"/bin\"]".into(),
            "CMD [\"/bin/sh\"]".into(),
        ],
    }
}

/// Debian's static busybox, extracted from its package into the cache
/// (`<cache>/kind/busybox-static-<suite>/busybox`).
pub fn ensure_busybox(cache: &Path) -> Result<PathBuf, Error> {
    let dir = cache
        .join("kind")
        .join(format!("busybox-static-{}", v::DEBIAN_SUITE));
    let binary = dir.join("busybox");
    if binary.exists() {
        return Ok(binary);
    }
    let work = dir.join("work");
    std::fs::create_dir_all(&work)
        .map_err(|e| Error::io(format!("creating {}", work.display()), e))?;
    super::progress("apt-get download busybox-static");
    super::run_quiet(
        Command::new("apt-get")
            .current_dir(&work)
            .args(["download", "busybox-static"]),
        "apt-get download busybox-static",
    )?;
    let deb = std::fs::read_dir(&work)
        .map_err(|e| Error::io("listing the download".into(), e))?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .ok_or_else(|| Error::Step {
            what: "apt-get download busybox-static".into(),
            detail: "no .deb downloaded".into(),
        })?;
    super::run_quiet(
        Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&work),
        "dpkg-deb -x busybox-static",
    )?;
    std::fs::rename(work.join("bin/busybox"), &binary)
        .map_err(|e| Error::io("moving busybox into place".into(), e))?;
    let _ = std::fs::remove_dir_all(&work);
    Ok(binary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dockerfiles_copy_each_file_then_configure() {
        let spec = scratch_binary(
            "podkeeper.dev/kind/coredns:v1".into(),
            "/cache/bin/coredns-v1/coredns".into(),
            "/coredns",
            Some("/coredns"),
        );
        assert_eq!(
            spec.dockerfile("scratch"),
            format!("FROM scratch\nCOPY f0 /coredns\n{PATH_ENV}\nENTRYPOINT [\"/coredns\"]\n")
        );
    }

    #[test]
    fn the_object_store_image_is_the_binary_alone_as_a_non_root_user() {
        let spec = versitygw_image("/cache/bin/versitygw-v1/versitygw".into());
        assert_eq!(spec.name, v::versitygw_image());
        assert_eq!(
            spec.dockerfile("scratch"),
            format!(
                "FROM scratch\nCOPY f0 /usr/local/bin/versitygw\n{PATH_ENV}\nENTRYPOINT [\"/usr/local/bin/versitygw\"]\nUSER 65532:65532\nEXPOSE 7070\n"
            )
        );
    }

    #[test]
    fn inputs_hash_follows_sources_and_config() {
        let a = redis_image();
        let mut b = redis_image();
        assert_eq!(a.inputs_hash(), b.inputs_hash());
        b.config.push("USER 0".into());
        assert_ne!(a.inputs_hash(), b.inputs_hash());
    }
}
