//! Debian root filesystems from Debian's packages (debootstrap), cached as
//! tarballs in `<cache>/kind/rootfs/<name>-<suite>-<hash>.tar`, where the
//! hash covers the package list and the clean-up script.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use super::{Error, hash, versions};

/// One root filesystem.
#[derive(Clone, Debug)]
pub struct Rootfs {
    pub name: &'static str,
    /// Packages on top of debootstrap's `minbase` variant.
    pub packages: &'static [&'static str],
    /// Shell run inside the tree (chroot) after debootstrap.
    pub post: &'static str,
}

/// Removes what no image needs and nothing may share: apt's package lists
/// and caches, logs, the machine id.
const COMMON_CLEANUP: &str = "apt-get clean; rm -rf /var/lib/apt/lists/* /var/log/* /var/cache/debconf/*-old; : > /etc/machine-id";

impl Rootfs {
    pub fn key(&self) -> String {
        let inputs = format!(
            "{}\n{}\n{}\n{COMMON_CLEANUP}",
            versions::DEBIAN_SUITE,
            self.packages.join(","),
            self.post
        );
        format!(
            "{}-{}-{}",
            self.name,
            versions::DEBIAN_SUITE,
            &hash::short(&inputs)[..10]
        )
    }

    /// The tarball, built first if missing.
    pub fn ensure(&self, cache: &Path) -> Result<PathBuf, Error> {
        let dir = cache.join("kind").join("rootfs");
        let tarball = dir.join(format!("{}.tar", self.key()));
        if tarball.exists() {
            return Ok(tarball);
        }
        fs::create_dir_all(&dir)
            .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        let started = Instant::now();
        let tree = dir.join(format!("{}.tree", self.key()));
        if tree.exists() {
            fs::remove_dir_all(&tree)
                .map_err(|e| Error::io(format!("removing {}", tree.display()), e))?;
        }
        super::progress(&format!(
            "debootstrap {} {} (+{}), about a minute",
            versions::DEBIAN_SUITE,
            self.name,
            self.packages.join(",")
        ));
        let mut debootstrap = Command::new("debootstrap");
        debootstrap.arg("--variant=minbase");
        if !self.packages.is_empty() {
            debootstrap.arg(format!("--include={}", self.packages.join(",")));
        }
        debootstrap
            .arg(versions::DEBIAN_SUITE)
            .arg(&tree)
            .arg(debian_mirror());
        super::run_quiet(
            &mut debootstrap,
            "debootstrap (Debian's package `debootstrap`)",
        )?;
        let script = format!("set -e\n{}\n{COMMON_CLEANUP}\n", self.post);
        super::run_quiet(
            Command::new("chroot")
                .arg(&tree)
                .args(["/bin/sh", "-c", &script]),
            &format!("preparing the {} root filesystem", self.name),
        )?;
        let partial = dir.join(format!("{}.tar.partial", self.key()));
        super::run_quiet(
            Command::new("tar")
                .arg("-C")
                .arg(&tree)
                .args(["--numeric-owner", "-cf"])
                .arg(&partial)
                .arg("."),
            "tar of the root filesystem",
        )?;
        fs::rename(&partial, &tarball)
            .map_err(|e| Error::io(format!("moving {} into place", tarball.display()), e))?;
        let _ = fs::remove_dir_all(&tree);
        super::progress(&format!(
            "root filesystem {} ready in {}s",
            self.key(),
            started.elapsed().as_secs()
        ));
        Ok(tarball)
    }
}

/// The node: systemd, and what kubelet, kube-proxy and containerd call.
pub const NODE: Rootfs = Rootfs {
    name: "node",
    packages: &[
        "systemd",
        "systemd-sysv",
        "dbus",
        "conntrack",
        "iptables",
        "nftables",
        "iproute2",
        "ethtool",
        "util-linux",
        "mount",
        "kmod",
        "libseccomp2",
        "pigz",
        "ca-certificates",
        "procps",
        "bash",
        "jq",
        "e2fsprogs",
        "socat",
    ],
    // systemd in a container: no units but those the node enables, no
    // kernel log, and no tmpfiles clean-up of what Docker mounted.
    post: "rm -f /lib/systemd/system/sysinit.target.wants/systemd-tmpfiles-setup.service \
/lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \
/lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \
/lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/*; \
echo ReadKMsg=no >> /etc/systemd/journald.conf; \
ln -sf /dev/null /etc/systemd/system/systemd-binfmt.service; \
mkdir -p /etc/kubernetes/manifests /kind/manifests /opt/cni/bin /etc/cni/net.d",
};

/// kube-proxy's image: iptables and conntrack.
pub const KUBE_PROXY: Rootfs = Rootfs {
    name: "kube-proxy",
    packages: &["iptables", "conntrack"],
    post: ":",
};

/// kube-router's image (NetworkPolicies): iptables and ipset, which it runs.
pub const NETWORK_POLICIES: Rootfs = Rootfs {
    name: "network-policies",
    packages: &["iptables", "ipset"],
    post: ":",
};

/// Debian's redis-server (and redis-cli), and its redis-sentinel for the
/// Sentinel anchor of `bench-redis` (it installs in debootstrap's chroot as
/// redis-server does, starting nothing there; the anchor's Pods run
/// `redis-sentinel` on a config of their own). As in
/// the upstream image, protected mode is off by default: in a container,
/// clients never come from loopback. A small wrapper first on PATH passes
/// the flag (to redis-server; Sentinel has it off by default).
pub const REDIS: Rootfs = Rootfs {
    name: "redis",
    packages: &["redis-server", "redis-sentinel", "openssl"],
    post: "printf '#!/bin/sh\\n# podkeeper.dev/redis: protected mode off, as in the upstream image\\nexec /usr/bin/redis-server --protected-mode no \"$@\"\\n' > /usr/local/bin/redis-server; \
chmod 755 /usr/local/bin/redis-server; mkdir -p /data; chown 999:999 /data",
};

/// The URI apt already uses for Debian (deb822 or one-line sources), else
/// deb.debian.org.
fn debian_mirror() -> String {
    let mut texts = Vec::new();
    if let Ok(entries) = fs::read_dir("/etc/apt/sources.list.d") {
        for entry in entries.flatten() {
            if let Ok(text) = fs::read_to_string(entry.path()) {
                texts.push(text);
            }
        }
    }
    if let Ok(text) = fs::read_to_string("/etc/apt/sources.list") {
        texts.push(text);
    }
    texts
        .iter()
        .find_map(|t| mirror_from_sources(t))
        .unwrap_or_else(|| "http://deb.debian.org/debian".into())
}

/// The first Debian archive URI in an apt sources text (not the security
/// archive, which has no base system).
fn mirror_from_sources(text: &str) -> Option<String> {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .flat_map(|l| l.split_whitespace())
        .find(|w| {
            (w.starts_with("http://") || w.starts_with("https://"))
                && w.trim_end_matches('/').ends_with("/debian")
        })
        .map(|w| w.trim_end_matches('/').to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mirror_is_read_from_deb822_and_one_line_sources() {
        let deb822 = "Types: deb\n# http://snapshot.debian.org/archive/debian/2025\nURIs: http://deb.debian.org/debian\nSuites: bookworm\n\nTypes: deb\nURIs: http://deb.debian.org/debian-security\n";
        assert_eq!(
            mirror_from_sources(deb822).as_deref(),
            Some("http://deb.debian.org/debian")
        );
        let one_line = "deb http://mirror.example/debian/ bookworm main\n";
        assert_eq!(
            mirror_from_sources(one_line).as_deref(),
            Some("http://mirror.example/debian")
        );
        assert_eq!(
            mirror_from_sources("deb http://x/debian-security b main"),
            None
        );
    }

    #[test]
    fn keys_change_with_the_package_list() {
        let mut other = KUBE_PROXY.clone();
        other.packages = &["iptables"];
        assert_ne!(KUBE_PROXY.key(), other.key());
        assert!(KUBE_PROXY.key().starts_with("kube-proxy-bookworm-"));
    }
}
