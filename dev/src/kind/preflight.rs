//! Whether `dev` can run on kind here, asked cheaply before anything is
//! built: a Docker engine that answers, and what building kind's images
//! from source needs on a machine where they were never built.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{docker, versions};

/// How long `docker version` may take to say whether an engine answers.
pub const ENGINE_TIMEOUT: Duration = Duration::from_secs(5);

/// A Docker engine answers `docker version` (the server's part) within
/// `timeout`. False when there is no docker CLI, no engine behind it, or
/// the engine does not answer in time.
pub fn engine_answers(timeout: Duration) -> bool {
    let mut cmd = Command::new("docker");
    cmd.args(["version", "--format", "{{.Server.Version}}"]);
    succeeds_within(&mut cmd, timeout)
}

/// `cmd` exits successfully within `timeout` (killed past it).
pub fn succeeds_within(cmd: &mut Command, timeout: Duration) -> bool {
    let Ok(mut child) = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    else {
        return false;
    };
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status.success(),
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
        }
    }
}

/// What building kind's images needs and this machine lacks, unless they
/// were built here before (the Redis image is in Docker): debootstrap,
/// libseccomp-dev and pkg-config (runc is built with cgo), and root
/// (debootstrap and chroot run as root). Empty when nothing is missing.
pub fn missing_for_a_first_build() -> Vec<&'static str> {
    if docker::image_exists(versions::REDIS_IMAGE) {
        return Vec::new();
    }
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| {
        use std::os::unix::fs::MetadataExt;
        m.uid() == 0
    });
    missing(on_path, Path::new("/usr/include/seccomp.h").exists(), root)
}

/// The missing prerequisites, from what was found. Pure but for `found`.
pub fn missing(
    found: impl Fn(&str) -> bool,
    seccomp_header: bool,
    root: bool,
) -> Vec<&'static str> {
    let mut out = Vec::new();
    if !found("debootstrap") {
        out.push("debootstrap");
    }
    if !seccomp_header {
        out.push("libseccomp-dev");
    }
    if !found("pkg-config") {
        out.push("pkg-config");
    }
    if !root {
        out.push("root (debootstrap and chroot run as root)");
    }
    out
}

/// An executable file named `name` is in a directory of `PATH`.
fn on_path(name: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).any(|dir| {
        std::fs::metadata(dir.join(OsStr::new(name)))
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_answers_only_if_it_succeeds_in_time() {
        let sh = |script: &str| {
            let mut c = Command::new("sh");
            c.args(["-c", script]);
            c
        };
        assert!(succeeds_within(&mut sh("exit 0"), Duration::from_secs(5)));
        assert!(!succeeds_within(&mut sh("exit 1"), Duration::from_secs(5)));
        let started = Instant::now();
        assert!(!succeeds_within(
            &mut sh("sleep 30"),
            Duration::from_millis(200)
        ));
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "killed at the timeout"
        );
        assert!(!succeeds_within(
            &mut Command::new("/nonexistent/docker"),
            Duration::from_secs(1)
        ));
    }

    #[test]
    fn missing_prerequisites_are_named() {
        assert!(missing(|_| true, true, true).is_empty());
        assert_eq!(
            missing(|c| c != "debootstrap", false, false),
            [
                "debootstrap",
                "libseccomp-dev",
                "root (debootstrap and chroot run as root)"
            ]
        );
        assert_eq!(missing(|c| c != "pkg-config", true, true), ["pkg-config"]);
        assert!(on_path("sh"));
        assert!(!on_path("no-such-command-podkeeper"));
    }
}
