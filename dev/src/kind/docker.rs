//! The few Docker CLI calls the image builds and the cluster need.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::Error;

/// The value of label `key` on image `name`, or None if there is no such
/// image (or no such label).
pub fn image_label(name: &str, key: &str) -> Option<String> {
    let out = Command::new("docker")
        .args(["image", "inspect", "--format"])
        .arg(format!("{{{{ index .Config.Labels \"{key}\" }}}}"))
        .arg(name)
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let value = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (!value.is_empty() && value != "<no value>").then_some(value)
}

pub fn image_exists(name: &str) -> bool {
    Command::new("docker")
        .args(["image", "inspect", name])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `docker import` of a root filesystem tarball.
pub fn import(tarball: &Path, name: &str) -> Result<(), Error> {
    super::run_quiet(
        Command::new("docker").arg("import").arg(tarball).arg(name),
        &format!("docker import {name}"),
    )
}

/// A build context: a directory with a Dockerfile and files, hard-linked
/// from the cache where possible (so large binaries are not copied).
pub struct Context {
    dir: tempfile::TempDir,
}

impl Context {
    pub fn new(dockerfile: &str) -> Result<Self, Error> {
        let dir = tempfile::Builder::new()
            .prefix("podkeeper-image-")
            .tempdir()
            .map_err(|e| Error::io("creating a build context".into(), e))?;
        fs::write(dir.path().join("Dockerfile"), dockerfile)
            .map_err(|e| Error::io("writing a Dockerfile".into(), e))?;
        Ok(Context { dir })
    }

    /// Puts `source` at `name` in the context.
    pub fn add_file(&self, source: &Path, name: &str) -> Result<(), Error> {
        let dest = self.path(name)?;
        if fs::hard_link(source, &dest).is_err() {
            fs::copy(source, &dest)
                .map_err(|e| Error::io(format!("copying {}", source.display()), e))?;
        }
        Ok(())
    }

    /// Writes `contents` at `name` in the context, with `mode`.
    pub fn add_text(&self, name: &str, contents: &str, mode: u32) -> Result<(), Error> {
        use std::os::unix::fs::PermissionsExt;
        let dest = self.path(name)?;
        fs::write(&dest, contents).map_err(|e| Error::io(format!("writing {name}"), e))?;
        fs::set_permissions(&dest, fs::Permissions::from_mode(mode))
            .map_err(|e| Error::io(format!("chmod {name}"), e))
    }

    fn path(&self, name: &str) -> Result<PathBuf, Error> {
        let dest = self.dir.path().join(name);
        if let Some(parent) = dest.parent() {
            fs::create_dir_all(parent)
                .map_err(|e| Error::io(format!("creating {}", parent.display()), e))?;
        }
        Ok(dest)
    }

    /// `docker build -t tag` of this context.
    pub fn build(&self, tag: &str) -> Result<(), Error> {
        super::run_quiet(
            Command::new("docker")
                .args(["build", "--quiet", "--tag", tag])
                .arg(self.dir.path()),
            &format!("docker build {tag}"),
        )
    }
}

/// Output of a docker command that must succeed.
pub fn output(args: &[&str]) -> Result<String, Error> {
    let out = Command::new("docker")
        .args(args)
        .output()
        .map_err(|e| Error::io("running docker".into(), e))?;
    if !out.status.success() {
        return Err(Error::Step {
            what: format!("docker {}", args.join(" ")),
            detail: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Output of a docker command that must succeed, with `input` on its stdin.
pub fn output_with_input(args: &[&str], input: &str) -> Result<String, Error> {
    use std::io::Write;
    let mut child = Command::new("docker")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::io("running docker".into(), e))?;
    let mut stdin = child.stdin.take().expect("stdin is piped");
    // Written from a thread of its own: docker may fill its output pipes
    // before it has read all of its input.
    let input = input.to_string();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child
        .wait_with_output()
        .map_err(|e| Error::io("waiting for docker".into(), e))?;
    let written = writer.join().unwrap_or_else(|_| {
        Err(std::io::Error::other(
            "the thread writing docker's input panicked",
        ))
    });
    if !out.status.success() {
        return Err(Error::Step {
            what: format!("docker {}", args.join(" ")),
            detail: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    written.map_err(|e| Error::io("writing docker's input".into(), e))?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}
