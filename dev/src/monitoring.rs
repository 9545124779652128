//! promtool, to test the alerting rules of `manifests/monitoring/`
//! (`promtool test rules`): taken from Debian's `prometheus` package
//! (`apt-get download`, unpacked with `dpkg-deb`; nothing installed) into
//! podkeeper's cache, keyed by the package's version. Built from the
//! Prometheus Go module instead it took 24 minutes on 2 busy cores (800
//! packages even without service discovery); the package takes seconds.

use std::fs;
use std::path::PathBuf;
use std::process::Command;

use crate::localcluster::Error;
use crate::localcluster::binaries;

/// The Debian package version promtool comes from (bookworm's).
pub const PROMETHEUS_DEB: &str = "2.42.0+ds-5+deb12u1";

fn run(cmd: &mut Command, what: &str) -> Result<(), Error> {
    let out = cmd
        .output()
        .map_err(|e| Error::io(format!("running {what}"), e))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(Error::Build {
            what: what.to_string(),
            detail: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }
}

/// promtool, fetched if missing (progress on stderr).
pub fn ensure_promtool() -> Result<PathBuf, Error> {
    let dir = binaries::cache_root()
        .join("bin")
        .join(format!("promtool-{PROMETHEUS_DEB}"));
    let promtool = dir.join("promtool");
    if promtool.exists() {
        return Ok(promtool);
    }
    progress!("podkeeper: fetching promtool from Debian's prometheus {PROMETHEUS_DEB}");
    let work = dir.with_extension("partial");
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work).map_err(|e| Error::io(format!("creating {}", work.display()), e))?;
    run(
        Command::new("apt-get")
            .current_dir(&work)
            .args(["download", &format!("prometheus={PROMETHEUS_DEB}")]),
        "apt-get download prometheus",
    )?;
    let deb = fs::read_dir(&work)
        .map_err(|e| Error::io(format!("reading {}", work.display()), e))?
        .filter_map(|e| Some(e.ok()?.path()))
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .ok_or_else(|| Error::Build {
            what: "apt-get download prometheus".into(),
            detail: "no .deb downloaded".into(),
        })?;
    run(
        Command::new("dpkg-deb")
            .arg("-x")
            .arg(&deb)
            .arg(work.join("x")),
        "dpkg-deb -x prometheus",
    )?;
    fs::rename(work.join("x/usr/bin/promtool"), work.join("promtool"))
        .map_err(|e| Error::io("taking promtool out of the package".into(), e))?;
    let _ = fs::remove_dir_all(work.join("x"));
    let _ = fs::remove_file(&deb);
    let _ = fs::remove_dir_all(&dir);
    fs::rename(&work, &dir).map_err(|e| Error::io(format!("moving {}", dir.display()), e))?;
    progress!("podkeeper: promtool ready at {}", promtool.display());
    Ok(promtool)
}
