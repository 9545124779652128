//! The clients' password (`spec.auth`, the `default` user) on the running
//! members. A container reads its password once, when it starts; when the
//! Secret changes, or `spec.auth` comes or goes, the members already
//! running are brought to it with `ACL SETUSER` over the operator's own
//! user (which the change does not touch), without a restart:
//!
//! 1. every member that answers is given the new password beside the ones
//!    it has (both are accepted);
//! 2. once every one of them has it, each keeps only the new one.
//!
//! Without `spec.auth`, `default` needs no password. What each member's
//! process (by its run id) was given is remembered, so a member is asked
//! once per process and change. [`steps`] decides what each is given;
//! [`converge`] asks.

use std::collections::HashMap;
use std::sync::Mutex;

use futures::future::join_all;
use sha2::{Digest, Sha256};

use crate::redis::replication::client::{Access, Connections, Node};
use crate::redis::replication::error::ClientError;
use crate::redis::replication::topology::Member;

/// What a member's process was given, by the password's SHA-256.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Given {
    /// The password, beside any it had.
    Added(String),
    /// The password and no other.
    Only(String),
    /// No password needed.
    Open,
    /// The user may not log in (`spec.defaultUser: Disabled`).
    Off,
}

/// The SHA-256 of a password, hex (what Redis shows in `ACL GETUSER`).
pub fn digest(password: &str) -> String {
    format!("{:x}", Sha256::digest(password.as_bytes()))
}

/// What to give each member that answers (`given`: what its process was
/// given so far), towards `desired` (the password's digest; `None`: no
/// password): the new password beside the old ones until every member has
/// it, then it alone. Pure.
pub fn steps(given: &[(&str, Option<&Given>)], desired: Option<&str>) -> Vec<(String, Given)> {
    let Some(want) = desired else {
        return given
            .iter()
            .filter(|(_, g)| *g != Some(&Given::Open))
            .map(|(pod, _)| (pod.to_string(), Given::Open))
            .collect();
    };
    let has = |g: &Option<&Given>| matches!(g, Some(Given::Added(d) | Given::Only(d)) if d == want);
    let adding: Vec<(String, Given)> = given
        .iter()
        .filter(|(_, g)| !has(g))
        .map(|(pod, _)| (pod.to_string(), Given::Added(want.to_string())))
        .collect();
    if !adding.is_empty() {
        return adding;
    }
    given
        .iter()
        .filter(|(_, g)| !matches!(g, Some(Given::Only(d)) if d == want))
        .map(|(pod, _)| (pod.to_string(), Given::Only(want.to_string())))
        .collect()
}

/// What each member's process was given: pod -> (run id, given).
#[derive(Debug, Default)]
pub struct Ledger(Mutex<HashMap<String, (String, Given)>>);

impl Ledger {
    fn locked(&self) -> std::sync::MutexGuard<'_, HashMap<String, (String, Given)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Forgets the Pods `keep` says no to.
    pub fn retain(&self, mut keep: impl FnMut(&str) -> bool) {
        self.locked().retain(|p, _| keep(p));
    }

    fn of(&self, pod: &str, run_id: &str) -> Option<Given> {
        self.locked()
            .get(pod)
            .filter(|(r, _)| r == run_id)
            .map(|(_, g)| g.clone())
    }

    fn note(&self, pod: &str, run_id: &str, given: Given) {
        self.locked()
            .insert(pod.to_string(), (run_id.to_string(), given));
    }
}

/// Brings the members that answer to the clients' password of `access`
/// (one step a round; see the module). Returns the members it could not
/// bring (they are asked again next round).
pub async fn converge(
    members: &[Member],
    access: &Access<'_>,
    connections: &Connections,
    ledger: &Ledger,
) -> Vec<(String, ClientError)> {
    if !access.manage_clients {
        return Vec::new();
    }
    let answering: Vec<(&Member, &str)> = members
        .iter()
        .filter_map(|m| Some((m, m.info()?.run_id.as_str())))
        .collect();
    let given: Vec<Option<Given>> = answering
        .iter()
        .map(|(m, run_id)| ledger.of(&m.pod, run_id))
        .collect();
    let view: Vec<(&str, Option<&Given>)> = answering
        .iter()
        .zip(&given)
        .map(|((m, _), g)| (m.pod.as_str(), g.as_ref()))
        .collect();
    let want = access.password.map(digest);
    // `default` off: each member once; else towards the password.
    let planned = if access.default_off {
        view.iter()
            .filter(|(_, g)| *g != Some(&Given::Off))
            .map(|(pod, _)| (pod.to_string(), Given::Off))
            .collect()
    } else {
        steps(&view, want.as_deref())
    };
    let due: Vec<(&Member, &str, Given)> = planned
        .into_iter()
        .filter_map(|(pod, step)| {
            let (m, run_id) = answering.iter().find(|(m, _)| m.pod == pod)?;
            Some((*m, *run_id, step))
        })
        .collect();
    let results = join_all(due.iter().map(|(m, _, step)| async move {
        let mut cmd = redis::cmd("ACL");
        cmd.arg("SETUSER").arg("default");
        if *step != Given::Off {
            cmd.arg("on");
        }
        match (step, access.password) {
            (Given::Off, _) => cmd.arg("off"),
            (Given::Added(_), Some(p)) => cmd.arg(format!(">{p}")),
            (Given::Only(_), Some(p)) => cmd.arg("resetpass").arg(format!(">{p}")),
            _ => cmd.arg("nopass"),
        };
        let ip = m.ip.as_deref().unwrap_or_default();
        connections
            .call(
                access,
                &m.pod,
                &access.endpoint(&m.pod, ip, m.port),
                "ACL SETUSER",
                |node: Node| async move { node.command::<()>(&cmd).await },
            )
            .await
    }))
    .await;
    let mut errors = Vec::new();
    for ((m, run_id, step), r) in due.into_iter().zip(results) {
        match r {
            Ok(()) => ledger.note(&m.pod, run_id, step),
            Err(e) => errors.push((m.pod.clone(), e)),
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_password_is_added_everywhere_before_any_old_one_goes() {
        let (old, new) = (digest("old"), digest("new"));
        let only_old = Given::Only(old.clone());
        // Every member on the old password: each gets the new one beside it.
        let s = steps(
            &[("a", Some(&only_old)), ("b", Some(&only_old))],
            Some(&new),
        );
        let add = Given::Added(new.clone());
        assert_eq!(s, [("a".into(), add.clone()), ("b".into(), add.clone())]);
        // One has it: the other still gets it, and no one drops the old.
        let added = Given::Added(new.clone());
        let s = steps(&[("a", Some(&added)), ("b", Some(&only_old))], Some(&new));
        assert_eq!(s, [("b".into(), add.clone())]);
        // Both have it: each keeps only the new one.
        let s = steps(&[("a", Some(&added)), ("b", Some(&added))], Some(&new));
        let only = Given::Only(new.clone());
        assert_eq!(s, [("a".into(), only.clone()), ("b".into(), only)]);
        // Done: nothing to ask.
        let only_new = Given::Only(new.clone());
        assert!(
            steps(
                &[("a", Some(&only_new)), ("b", Some(&only_new))],
                Some(&new)
            )
            .is_empty()
        );
        // A new process (nothing known of it) is given it again.
        let s = steps(&[("a", Some(&only_new)), ("c", None)], Some(&new));
        assert_eq!(s, [("c".into(), add)]);
    }

    #[test]
    fn without_spec_auth_the_default_user_needs_no_password() {
        let only = Given::Only(digest("pw"));
        let s = steps(
            &[("a", Some(&only)), ("b", Some(&Given::Open)), ("c", None)],
            None,
        );
        assert_eq!(s, [("a".into(), Given::Open), ("c".into(), Given::Open)]);
    }

    #[test]
    fn the_digest_is_what_redis_shows() {
        // ACL GETUSER shows passwords as the SHA-256 of their bytes, hex.
        assert_eq!(
            digest("foobar"),
            "c3ab8ff13720e8ad9047dd39466b3c8974e592c2fa383d4a3960714caef0c4f2"
        );
    }
}
