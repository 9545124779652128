//! The kind node image, assembled directly (kind's own `build node-image`
//! pulls images, which cannot work here): the Debian node root filesystem,
//! containerd 2, runc, crictl, the CNI plugins, kubelet, kubeadm and kubectl,
//! our systemd units and entrypoint, and every cluster image preloaded into
//! containerd's `k8s.io` namespace.
//!
//! Its tag is `v<kubernetes>-<hash of every input>`, so a cached image is
//! reused exactly when nothing it is made of changed.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use super::images::{self, ImageSpec};
use super::tools::Tools;
use super::{Error, docker, hash, rootfs, versions as v};

/// Files of the node image: (name in the build context, path in the image,
/// contents, mode).
fn node_files() -> Vec<(&'static str, &'static str, String, u32)> {
    vec![
        (
            "entrypoint",
            "/usr/local/bin/entrypoint",
            include_str!("node/entrypoint.sh").into(),
            0o755,
        ),
        (
            "containerd.toml",
            "/etc/containerd/config.toml",
            include_str!("node/containerd.toml").replace("@PAUSE_IMAGE@", &images::pause_image()),
            0o644,
        ),
        (
            "containerd.service",
            "/etc/systemd/system/containerd.service",
            include_str!("node/containerd.service").into(),
            0o644,
        ),
        (
            "kubelet.service",
            "/etc/systemd/system/kubelet.service",
            include_str!("node/kubelet.service").into(),
            0o644,
        ),
        (
            "kubelet.slice",
            "/etc/systemd/system/kubelet.slice",
            include_str!("node/kubelet.slice").into(),
            0o644,
        ),
        (
            "crictl.yaml",
            "/etc/crictl.yaml",
            include_str!("node/crictl.yaml").into(),
            0o644,
        ),
        (
            "default-storage.yaml",
            "/kind/manifests/default-storage.yaml",
            include_str!("node/default-storage.yaml").into(),
            0o644,
        ),
        (
            "version",
            "/kind/version",
            format!("v{}", v::KUBERNETES),
            0o644,
        ),
    ]
}

/// (directory in the tool cache, executable, path in the image)
fn node_binaries(tools: &Tools) -> Vec<(std::path::PathBuf, &'static str)> {
    let mut list = vec![
        (
            tools.containerd.join("containerd"),
            "/usr/local/bin/containerd",
        ),
        (tools.containerd.join("ctr"), "/usr/local/bin/ctr"),
        (
            tools.containerd.join("containerd-shim-runc-v2"),
            "/usr/local/bin/containerd-shim-runc-v2",
        ),
        (tools.runc.join("runc"), "/usr/local/sbin/runc"),
        (tools.crictl.join("crictl"), "/usr/local/bin/crictl"),
        (tools.kubernetes_node.join("kubelet"), "/usr/bin/kubelet"),
        (tools.kubernetes_node.join("kubeadm"), "/usr/bin/kubeadm"),
        (tools.kubernetes_node.join("kubectl"), "/usr/bin/kubectl"),
    ];
    for plugin in ["ptp", "loopback", "host-local", "portmap"] {
        list.push((
            tools.cni_plugins.join(plugin),
            match plugin {
                "ptp" => "/opt/cni/bin/ptp",
                "loopback" => "/opt/cni/bin/loopback",
                "host-local" => "/opt/cni/bin/host-local",
                _ => "/opt/cni/bin/portmap",
            },
        ));
    }
    list
}

/// The first stage's Dockerfile: files onto the node root filesystem.
fn dockerfile(base: &str, binaries: usize) -> String {
    let mut text = format!("FROM {base}\n");
    for i in 0..binaries {
        text.push_str(&format!("COPY b{i} @B{i}@\n"));
    }
    for (name, dest, _, _) in node_files() {
        text.push_str(&format!("COPY {name} {dest}\n"));
    }
    text.push_str("ENV container=docker\nSTOPSIGNAL SIGRTMIN+3\n");
    text.push_str("ENTRYPOINT [\"/usr/local/bin/entrypoint\", \"/sbin/init\"]\n");
    text
}

/// The node image's tag for these tools and cluster images.
fn tag(tools: &Tools, cluster_images: &[ImageSpec], base: &str) -> String {
    let mut inputs = format!("{base}\n");
    for (source, dest) in node_binaries(tools) {
        inputs.push_str(&format!("{} {dest}\n", source.display()));
    }
    for (name, dest, contents, mode) in node_files() {
        inputs.push_str(&format!("{name} {dest} {mode:o}\n{contents}\n"));
    }
    for image in cluster_images {
        inputs.push_str(&format!("{image:?}\n"));
    }
    inputs.push_str(include_str!("node_image.rs"));
    format!(
        "{}:v{}-{}",
        v::NODE_IMAGE_REPOSITORY,
        v::KUBERNETES,
        &hash::short(&inputs)[..12]
    )
}

/// The node image, built first if it is not in Docker yet.
pub fn ensure(tools: &Tools, cache: &Path) -> Result<String, Error> {
    let cluster_images = images::cluster_images(tools);
    let rootfs = rootfs::NODE;
    let base = format!("{}/rootfs:{}", v::CLUSTER_IMAGE_REPOSITORY, rootfs.key());
    let tag = tag(tools, &cluster_images, &base);
    if docker::image_exists(&tag) {
        return Ok(tag);
    }
    let started = Instant::now();
    super::progress(&format!("building the node image {tag}"));
    if !docker::image_exists(&base) {
        docker::import(&rootfs.ensure(cache)?, &base)?;
    }
    for image in &cluster_images {
        image.ensure(cache)?;
    }

    let binaries = node_binaries(tools);
    let mut text = dockerfile(&base, binaries.len());
    for (i, (_, dest)) in binaries.iter().enumerate() {
        text = text.replace(&format!("@B{i}@"), dest);
    }
    let context = docker::Context::new(&text)?;
    for (i, (source, _)) in binaries.iter().enumerate() {
        context.add_file(source, &format!("b{i}"))?;
    }
    for (name, _, contents, mode) in node_files() {
        context.add_text(name, &contents, mode)?;
    }
    let stage = format!("{tag}-stage1");
    super::progress("node image: adding the binaries and configuration");
    context.build(&stage)?;

    super::progress("node image: preloading the cluster images into containerd");
    let container = docker::output(&[
        "run",
        "--detach",
        "--privileged",
        "--entrypoint",
        "/bin/sleep",
        &stage,
        "infinity",
    ])?;
    let result = preload_and_commit(&container, &cluster_images, &tag);
    let _ = docker::output(&["rm", "--force", "--volumes", &container]);
    let _ = docker::output(&["rmi", &stage]);
    result?;
    super::progress(&format!(
        "node image {tag} built in {}s",
        started.elapsed().as_secs()
    ));
    Ok(tag)
}

fn preload_and_commit(container: &str, images: &[ImageSpec], tag: &str) -> Result<(), Error> {
    // systemd units are enabled by the links kind's base image makes with
    // `systemctl enable`.
    docker::output(&[
        "exec",
        container,
        "sh",
        "-c",
        "ln -sf /etc/systemd/system/containerd.service /etc/systemd/system/multi-user.target.wants/containerd.service \
         && ln -sf /etc/systemd/system/kubelet.service /etc/systemd/system/multi-user.target.wants/kubelet.service \
         && (containerd >/tmp/containerd.log 2>&1 &) \
         && for i in $(seq 1 100); do [ -S /run/containerd/containerd.sock ] && ctr version >/dev/null 2>&1 && exit 0; sleep 0.1; done; cat /tmp/containerd.log; exit 1",
    ])?;
    let names: Vec<&str> = images.iter().map(|i| i.name.as_str()).collect();
    let mut save = Command::new("docker")
        .arg("save")
        .args(&names)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| Error::io("running docker save".into(), e))?;
    let stdout = save.stdout.take().expect("stdout is piped");
    let import = Command::new("docker")
        .args([
            "exec",
            "-i",
            container,
            "ctr",
            "--namespace=k8s.io",
            "images",
            "import",
            "--label=io.cri-containerd.pinned=pinned",
            "--all-platforms",
            "--no-unpack",
            "--digests",
            "-",
        ])
        .stdin(stdout)
        .stdout(Stdio::null())
        .output()
        .map_err(|e| Error::io("running ctr images import".into(), e))?;
    let saved = save
        .wait()
        .map_err(|e| Error::io("waiting for docker save".into(), e))?;
    if !saved.success() || !import.status.success() {
        return Err(Error::Step {
            what: "importing the cluster images into the node image".into(),
            detail: String::from_utf8_lossy(&import.stderr).into_owned(),
        });
    }
    let listed = docker::output(&[
        "exec",
        container,
        "ctr",
        "--namespace=k8s.io",
        "images",
        "list",
        "-q",
    ])?;
    for name in &names {
        if !listed.lines().any(|l| l == *name) {
            return Err(Error::Step {
                what: "importing the cluster images into the node image".into(),
                detail: format!("{name} is not in containerd after the import:\n{listed}"),
            });
        }
    }
    docker::output(&[
        "exec",
        container,
        "sh",
        "-c",
        "kill $(pidof containerd); while pidof containerd >/dev/null; do sleep 0.1; done; rm -f /tmp/containerd.log",
    ])?;
    docker::output(&[
        "commit",
        "--change",
        "ENTRYPOINT [\"/usr/local/bin/entrypoint\", \"/sbin/init\"]",
        "--change",
        "CMD []",
        container,
        tag,
    ])?;
    let _ = std::io::stderr().flush();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dockerfile_copies_every_binary_and_file_and_keeps_systemd_conventions() {
        let text = dockerfile("base", 3);
        assert!(text.starts_with("FROM base\nCOPY b0 @B0@\nCOPY b1 @B1@\nCOPY b2 @B2@\n"));
        assert!(text.contains("COPY containerd.toml /etc/containerd/config.toml\n"));
        assert!(text.contains("STOPSIGNAL SIGRTMIN+3"));
    }

    #[test]
    fn containerd_uses_our_pause_image() {
        let (_, _, config, _) = node_files()
            .into_iter()
            .find(|f| f.0 == "containerd.toml")
            .unwrap();
        assert!(config.contains(&format!("sandbox = '{}'", images::pause_image())));
    }
}
