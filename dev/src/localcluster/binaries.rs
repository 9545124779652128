//! Building etcd, the Kubernetes control plane and kwok from Go modules.
//!
//! Nothing is downloaded but Go modules. Outputs live in a cache directory
//! outside the repository, one directory per component and version, and are
//! built once per machine. A file lock serialises concurrent builders (for
//! example several test binaries starting at once); whoever comes second
//! finds the finished outputs and returns at once.

use std::fs::{self, File};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{Error, versions};

/// Paths of the control-plane executables.
#[derive(Clone, Debug)]
pub struct Binaries {
    pub etcd: PathBuf,
    pub kube_apiserver: PathBuf,
    pub kube_controller_manager: PathBuf,
    pub kube_scheduler: PathBuf,
    pub kwok: PathBuf,
}

/// Root of podkeeper's cache: `$PODKEEPER_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/podkeeper`, else `~/.cache/podkeeper`.
pub fn cache_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("PODKEEPER_CACHE_DIR") {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(dir).join("podkeeper");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    home.join(".cache").join("podkeeper")
}

/// One Go build: a wrapper module and the packages to build from it.
pub(crate) struct GoBuild {
    /// Cache key and directory name, e.g. `kubernetes-v1.37.2`.
    pub key: String,
    /// Contents of the wrapper module's go.mod.
    pub go_mod: String,
    /// Import paths of main packages.
    pub packages: Vec<String>,
    /// Extra `-ldflags`.
    pub ldflags: String,
    /// Output name when a single package is built whose import path does
    /// not end in the binary's name (etcd's ends in `v3`).
    pub output_name: Option<&'static str>,
    /// Build tags (`-tags`).
    pub tags: Vec<String>,
    /// Build with cgo (runc needs it); everything else is static without.
    pub cgo: bool,
}

impl GoBuild {
    /// A build of `packages` from a wrapper module requiring `require`
    /// (`module version` lines), without cgo, tags or extra flags.
    pub(crate) fn new(key: String, require: &[String], packages: &[&str]) -> Self {
        let mut go_mod = format!(
            "module podkeeper.dev/build/{}\n\ngo {}\n\n",
            key.split("-v").next().unwrap_or(&key),
            versions::GO_DIRECTIVE
        );
        for line in require {
            go_mod.push_str(&format!("require {line}\n"));
        }
        GoBuild {
            key,
            go_mod,
            packages: packages.iter().map(|p| p.to_string()).collect(),
            ldflags: String::new(),
            output_name: None,
            tags: Vec::new(),
            cgo: false,
        }
    }
}

/// Builds whatever is missing and returns the paths. Blocking; it may take
/// many minutes the first time on a small machine and prints its progress to
/// stderr.
pub fn ensure_binaries() -> Result<Binaries, Error> {
    let root = cache_root();
    fs::create_dir_all(&root).map_err(|e| Error::io(format!("creating {}", root.display()), e))?;
    let lock_path = root.join("build.lock");
    let lock = File::create(&lock_path)
        .map_err(|e| Error::io(format!("opening {}", lock_path.display()), e))?;
    if lock.try_lock().is_err() {
        progress!("podkeeper: another process is building the control plane; waiting for its lock");
        lock.lock()
            .map_err(|e| Error::io("waiting for the build lock".into(), e))?;
    }

    let etcd = build_if_missing(&root, etcd_build())?;
    let kubernetes = build_if_missing(&root, kubernetes_build()?)?;
    let kwok = build_if_missing(&root, kwok_build())?;
    drop(lock);

    Ok(Binaries {
        etcd: etcd.join("etcd"),
        kube_apiserver: kubernetes.join("kube-apiserver"),
        kube_controller_manager: kubernetes.join("kube-controller-manager"),
        kube_scheduler: kubernetes.join("kube-scheduler"),
        kwok: kwok.join("kwok"),
    })
}

fn etcd_build() -> GoBuild {
    let v = versions::ETCD;
    GoBuild {
        key: format!("etcd-v{v}"),
        // The server module's own go.mod replaces its siblings with relative
        // paths, which Go ignores in a dependency: requiring it from a wrapper
        // resolves them to the published versions it lists.
        go_mod: format!(
            "module podkeeper.dev/localcluster/etcd\n\ngo {}\n\nrequire go.etcd.io/etcd/server/v3 v{v}\n",
            versions::GO_DIRECTIVE
        ),
        packages: vec!["go.etcd.io/etcd/server/v3".into()],
        ldflags: format!("-X go.etcd.io/etcd/api/v3/version.GitSHA=v{v}"),
        output_name: Some("etcd"),
        tags: Vec::new(),
        cgo: false,
    }
}

fn kwok_build() -> GoBuild {
    let v = versions::KWOK;
    GoBuild {
        key: format!("kwok-v{v}"),
        go_mod: format!(
            "module podkeeper.dev/localcluster/kwok\n\ngo {}\n\nrequire sigs.k8s.io/kwok v{v}\n",
            versions::GO_DIRECTIVE
        ),
        packages: vec!["sigs.k8s.io/kwok/cmd/kwok".into()],
        ldflags: String::new(),
        output_name: None,
        tags: Vec::new(),
        cgo: false,
    }
}

/// k8s.io/kubernetes requires its staging modules at v0.0.0 and points them
/// at `./staging/...` with replace lines that only apply inside its own
/// repository. The wrapper maps every one of them to the published
/// `v0.X.Y` of the same release.
fn kubernetes_build() -> Result<GoBuild, Error> {
    kubernetes_build_of(
        "kubernetes",
        &[
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
        ],
    )
}

/// A build of `commands` (under k8s.io/kubernetes/cmd) of [`versions::KUBERNETES`],
/// cached under `<name>-v<version>`.
pub(crate) fn kubernetes_build_of(name: &str, commands: &[&str]) -> Result<GoBuild, Error> {
    let v = versions::KUBERNETES;
    let staging = staging_modules(v)?;
    let staging_version = versions::staging_version();
    let mut go_mod = format!(
        "module podkeeper.dev/localcluster/kubernetes\n\ngo {}\n\nrequire k8s.io/kubernetes v{v}\n\nreplace (\n",
        versions::GO_DIRECTIVE
    );
    for module in &staging {
        go_mod.push_str(&format!("\t{module} => {module} {staging_version}\n"));
    }
    go_mod.push_str(")\n");

    let (major, minor) = versions::kubernetes_major_minor();
    let mut ldflags = String::new();
    for pkg in [
        "k8s.io/component-base/version",
        "k8s.io/client-go/pkg/version",
    ] {
        ldflags.push_str(&format!(
            " -X {pkg}.gitVersion=v{v} -X {pkg}.gitMajor={major} -X {pkg}.gitMinor={minor} -X {pkg}.gitTreeState=clean"
        ));
    }
    Ok(GoBuild {
        key: format!("{name}-v{v}"),
        go_mod,
        packages: commands
            .iter()
            .map(|c| format!("k8s.io/kubernetes/cmd/{c}"))
            .collect(),
        ldflags,
        output_name: None,
        tags: Vec::new(),
        cgo: false,
    })
}

/// The modules that k8s.io/kubernetes at `version` replaces with its staging
/// directories, read from that release's own go.mod.
fn staging_modules(version: &str) -> Result<Vec<String>, Error> {
    let out = go()
        .args([
            "mod",
            "download",
            "-json",
            &format!("k8s.io/kubernetes@v{version}"),
        ])
        .stderr(Stdio::inherit())
        .output()
        .map_err(go_missing)?;
    if !out.status.success() {
        return Err(Error::Build {
            what: format!("go mod download k8s.io/kubernetes@v{version}"),
            detail: String::from_utf8_lossy(&out.stdout).into_owned(),
        });
    }
    let info: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|e| Error::Build {
            what: "reading `go mod download -json`".into(),
            detail: e.to_string(),
        })?;
    let go_mod_path = info["GoMod"].as_str().unwrap_or_default();
    let text = fs::read_to_string(go_mod_path)
        .map_err(|e| Error::io(format!("reading {go_mod_path}"), e))?;
    let modules = parse_staging_replaces(&text);
    if modules.is_empty() {
        return Err(Error::Build {
            what: format!("k8s.io/kubernetes@v{version} go.mod"),
            detail: "found no replace lines pointing at ./staging".into(),
        });
    }
    Ok(modules)
}

/// Module paths on the left of `=> ./staging/...` replace lines.
fn parse_staging_replaces(go_mod: &str) -> Vec<String> {
    go_mod
        .lines()
        .filter_map(|line| {
            let (left, right) = line.split_once("=>")?;
            let right = right.trim();
            if !right.starts_with("./staging/") {
                return None;
            }
            let module = left.trim().trim_start_matches("replace").trim();
            Some(module.to_string())
        })
        .collect()
}

fn go() -> Command {
    let mut cmd = Command::new(std::env::var_os("GO").unwrap_or_else(|| "go".into()));
    cmd.env("CGO_ENABLED", "0").env_remove("GOFLAGS");
    cmd
}

fn go_missing(e: std::io::Error) -> Error {
    Error::Build {
        what: "running `go`".into(),
        detail: format!(
            "{e}: a Go toolchain (1.26 or newer) must be on PATH to build the local control plane"
        ),
    }
}

/// Returns the output directory of `build`, building it first if it has no
/// completion marker. Outputs are written to a temporary directory and
/// renamed into place, so an interrupted build never looks finished.
///
/// Two builders of the same key (two tests of one binary, or two processes)
/// take turns on a lock file beside the output: the second finds the first's
/// output complete instead of removing its staging directory under it.
pub(crate) fn build_if_missing(root: &Path, build: GoBuild) -> Result<PathBuf, Error> {
    let out_dir = root.join("bin").join(&build.key);
    if out_dir.join(".complete").exists() {
        return Ok(out_dir);
    }
    let bin_dir = root.join("bin");
    fs::create_dir_all(&bin_dir)
        .map_err(|e| Error::io(format!("creating {}", bin_dir.display()), e))?;
    let lock_path = bin_dir.join(format!("{}.lock", build.key));
    let lock = File::create(&lock_path)
        .map_err(|e| Error::io(format!("opening {}", lock_path.display()), e))?;
    if lock.try_lock().is_err() {
        progress!(
            "podkeeper: another builder is building {}; waiting for it",
            build.key
        );
        lock.lock()
            .map_err(|e| Error::io(format!("waiting for {}", lock_path.display()), e))?;
    }
    if out_dir.join(".complete").exists() {
        return Ok(out_dir);
    }
    let started = Instant::now();
    progress!(
        "podkeeper: building {} from Go modules (once per machine; the Kubernetes control plane took 270-375 s on 2 cores in cold CI runs)",
        build.key
    );
    let module_dir = root.join("src").join(&build.key);
    fs::create_dir_all(&module_dir)
        .map_err(|e| Error::io(format!("creating {}", module_dir.display()), e))?;
    fs::write(module_dir.join("go.mod"), &build.go_mod)
        .map_err(|e| Error::io("writing go.mod".into(), e))?;

    let tmp_out = root.join("bin").join(format!("{}.partial", build.key));
    let _ = fs::remove_dir_all(&tmp_out);
    fs::create_dir_all(&tmp_out)
        .map_err(|e| Error::io(format!("creating {}", tmp_out.display()), e))?;

    let mut go = go();
    go.args(["build", "-v", "-mod=mod", "-trimpath"]);
    if build.cgo {
        go.env("CGO_ENABLED", "1");
    }
    if !build.tags.is_empty() {
        go.arg(format!("-tags={}", build.tags.join(",")));
    }
    let mut child = go
        .current_dir(&module_dir)
        .arg(format!("-ldflags=-s -w{}", prefix_space(&build.ldflags)))
        .arg("-o")
        .arg(match build.output_name {
            Some(name) => tmp_out.join(name).display().to_string(),
            None => format!("{}/", tmp_out.display()),
        })
        .args(&build.packages)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(go_missing)?;

    // `go build -v` names each package as it compiles it: count them and
    // report every few seconds, keeping the tail for error messages.
    let stderr = child.stderr.take().expect("stderr is piped");
    let mut tail: Vec<String> = Vec::new();
    let mut packages = 0usize;
    let mut last_report = Instant::now();
    for line in BufReader::new(stderr).lines() {
        let Ok(line) = line else { break };
        if !line.starts_with("go: ") && !line.starts_with('#') && !line.contains(' ') {
            packages += 1;
        }
        if last_report.elapsed() >= Duration::from_secs(20) {
            progress!(
                "podkeeper: building {}: {packages} packages compiled, {}s elapsed",
                build.key,
                started.elapsed().as_secs()
            );
            last_report = Instant::now();
        }
        tail.push(line);
        if tail.len() > 60 {
            tail.remove(0);
        }
    }
    let status = child
        .wait()
        .map_err(|e| Error::io("waiting for go build".into(), e))?;
    if !status.success() {
        return Err(Error::Build {
            what: format!("go build of {}", build.key),
            detail: tail.join("\n"),
        });
    }
    fs::write(
        tmp_out.join(".complete"),
        format!("built in {}s\n", started.elapsed().as_secs()),
    )
    .map_err(|e| Error::io("writing completion marker".into(), e))?;
    let _ = fs::remove_dir_all(&out_dir);
    fs::rename(&tmp_out, &out_dir)
        .map_err(|e| Error::io(format!("moving {} into place", out_dir.display()), e))?;
    progress!(
        "podkeeper: built {} in {}s",
        build.key,
        started.elapsed().as_secs()
    );
    Ok(out_dir)
}

fn prefix_space(s: &str) -> String {
    if s.is_empty() {
        String::new()
    } else {
        format!(" {}", s.trim())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staging_replaces_are_read_from_the_block_and_single_lines() {
        let go_mod = "module k8s.io/kubernetes\n\nrequire (\n\tk8s.io/api v0.0.0\n)\n\nreplace (\n\tk8s.io/api => ./staging/src/k8s.io/api\n\tk8s.io/kms => ./staging/src/k8s.io/kms\n\tgithub.com/x/y => github.com/x/y v1.0.0\n)\nreplace k8s.io/streaming => ./staging/src/k8s.io/streaming\n";
        assert_eq!(
            parse_staging_replaces(go_mod),
            vec!["k8s.io/api", "k8s.io/kms", "k8s.io/streaming"]
        );
    }

    #[test]
    fn wrapper_modules_pin_their_versions() {
        let etcd = etcd_build();
        assert!(etcd.go_mod.contains(&format!(
            "require go.etcd.io/etcd/server/v3 v{}",
            versions::ETCD
        )));
        assert_eq!(etcd.output_name, Some("etcd"));
        let kwok = kwok_build();
        assert!(
            kwok.go_mod
                .contains(&format!("require sigs.k8s.io/kwok v{}", versions::KWOK))
        );
        assert_eq!(prefix_space(""), "");
        assert_eq!(prefix_space("-X a=b "), " -X a=b");
    }
}
