//! The application users (`spec.users`) on the running members, with
//! `ACL SETUSER` over the operator's own user: no Pod spec holds them, so a
//! change reaches the members without a restart, and a member that starts
//! gets them from the operator before it is made a replica (it follows the
//! start-up placeholder until then, and is not Ready).
//!
//! A user's password changes as the clients' password does
//! ([`crate::redis::replication::clients`]): the new one beside the old on
//! every member, then the new one alone. Its permissions are set whole
//! each time (`resetkeys resetchannels -@all`, then its rules), always
//! followed by [`DENIED`]: an application user cannot run administrative
//! commands, whatever its rules say. A user no longer in the spec is
//! deleted; a member's process is swept once of users podkeeper does not
//! know (left by an operator that did not see a removal).
//!
//! podkeeper's own users (the operator's and replication's) go the same
//! way, their passwords beside the old ones first; they are left alone
//! only once no rotation is under way ([`Own::alone`]: every member was
//! started again with the new ones, see [`crate::redis::credentials`]).

use std::collections::HashMap;
use std::sync::Mutex;

use futures::future::join_all;

use crate::redis::replication::acl::{Own, User, Users};
use crate::redis::replication::client::{Access, Connections, Node};
use crate::redis::replication::clients::{Given, digest, steps};
use crate::redis::replication::config::{OPERATOR_USER, REPLICATION_RULES, REPLICATION_USER};
use crate::redis::replication::error::ClientError;
use crate::redis::replication::topology::Member;

/// Appended to every application user's rules: no administrative command
/// (REPLICAOF, FAILOVER, CONFIG, ACL, SHUTDOWN, MONITOR, SYNC, ...), no
/// DEBUG, no MODULE.
pub const DENIED: &str = "-@admin -debug -module";

/// What identifies the user's password and rules together.
fn user_digest(u: &User) -> String {
    digest(&format!("{}\n{}", u.password, u.rules))
}

/// `ACL SETUSER` for `step`: the password beside the others, or alone;
/// the permissions whole.
fn setuser(u: &User, step: &Given) -> redis::Cmd {
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER").arg(&u.name).arg("on");
    if matches!(step, Given::Only(_)) {
        cmd.arg("resetpass");
    }
    cmd.arg(format!(">{}", u.password))
        .arg("resetkeys")
        .arg("resetchannels")
        .arg("-@all");
    for word in u.rules.split_whitespace().chain(DENIED.split(' ')) {
        cmd.arg(word);
    }
    cmd
}

/// What identifies podkeeper's own passwords together.
fn own_digest(own: &Own) -> String {
    digest(&format!("{}\n{}", own.operator, own.replication))
}

/// The commands that give a member podkeeper's own passwords for `step`:
/// beside the ones it has, or alone (and replication logging in with the
/// new one; at once when no rotation is under way, else once every member
/// has it).
fn own_commands(own: &Own, step: &Given) -> Vec<redis::Cmd> {
    let alone = matches!(step, Given::Only(_));
    let mut operator = redis::cmd("ACL");
    operator.arg("SETUSER").arg(OPERATOR_USER).arg("on");
    let mut replication = redis::cmd("ACL");
    replication.arg("SETUSER").arg(REPLICATION_USER).arg("on");
    if alone {
        operator.arg("resetpass");
        replication.arg("resetpass");
    }
    operator.arg(format!(">{}", own.operator));
    replication.arg(format!(">{}", own.replication));
    for word in REPLICATION_RULES.split(' ') {
        replication.arg(word);
    }
    let mut out = vec![replication];
    if alone || own.alone {
        let mut login = redis::cmd("CONFIG");
        login
            .arg("SET")
            .arg("masteruser")
            .arg(REPLICATION_USER)
            .arg("masterauth")
            .arg(&own.replication);
        out.push(login);
    }
    // The operator's own login last: the connection these go over logged
    // in as it.
    out.push(operator);
    out
}

/// Per member process: whether it was swept, what each user was given,
/// and what podkeeper's own users were.
#[derive(Debug, Default)]
struct Process {
    run_id: String,
    known: Known,
}

/// What a member's process is known to have.
#[derive(Clone, Debug, Default)]
struct Known {
    swept: bool,
    given: HashMap<String, Given>,
    own: Option<Given>,
}

/// What each member's process was given.
#[derive(Debug, Default)]
pub struct Ledger(Mutex<HashMap<String, Process>>);

impl Ledger {
    fn locked(&self) -> std::sync::MutexGuard<'_, HashMap<String, Process>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Forgets the Pods `keep` says no to.
    pub fn retain(&self, mut keep: impl FnMut(&str) -> bool) {
        self.locked().retain(|p, _| keep(p));
    }

    /// What `pod`'s process `run_id` was given (nothing, for a new one).
    fn of(&self, pod: &str, run_id: &str) -> Known {
        self.locked()
            .get(pod)
            .filter(|p| p.run_id == run_id)
            .map(|p| p.known.clone())
            .unwrap_or_default()
    }

    fn note(&self, pod: &str, run_id: &str, known: Known) {
        self.locked().insert(
            pod.to_string(),
            Process {
                run_id: run_id.to_string(),
                known,
            },
        );
    }
}

/// One member's commands this round.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Due {
    /// Sweep its process of users podkeeper does not know.
    pub sweep: bool,
    pub set: Vec<(String, Given)>,
    pub delete: Vec<String>,
    /// podkeeper's own users' passwords.
    pub own: Option<Given>,
}

/// What to ask each member (`given`: per member, what its process is
/// known to have), towards `users`. Pure.
fn plan(given: &[(&str, &Known)], users: &Users) -> HashMap<String, Due> {
    let mut out: HashMap<String, Due> = HashMap::new();
    for u in &users.users {
        let view: Vec<(&str, Option<&Given>)> = given
            .iter()
            .map(|(pod, k)| (*pod, k.given.get(&u.name)))
            .collect();
        for (pod, step) in steps(&view, Some(&user_digest(u))) {
            out.entry(pod).or_default().set.push((u.name.clone(), step));
        }
    }
    if let Some(own) = &users.own {
        let view: Vec<(&str, Option<&Given>)> = given
            .iter()
            .map(|(pod, k)| (*pod, k.own.as_ref()))
            .collect();
        for (pod, step) in steps(&view, Some(&own_digest(own))) {
            // Alone only once no member needs the old ones.
            if own.alone || !matches!(step, Given::Only(_)) {
                out.entry(pod).or_default().own = Some(step);
            }
        }
    }
    for (pod, k) in given {
        let due = out.entry(pod.to_string()).or_default();
        due.sweep = !k.swept;
        due.delete = k
            .given
            .keys()
            .filter(|n| !users.names.contains(*n))
            .cloned()
            .collect();
        due.delete.sort();
    }
    out.retain(|_, d| *d != Due::default());
    out
}

/// Whether every member that answers keeps only podkeeper's own passwords
/// of `users` (as far as the ledger knows).
pub fn own_alone(members: &[Member], users: &Users, ledger: &Ledger) -> bool {
    let Some(own) = &users.own else {
        return false;
    };
    let want = Given::Only(own_digest(own));
    members
        .iter()
        .filter_map(|m| Some((m, m.info()?.run_id.as_str())))
        .all(|(m, run_id)| ledger.of(&m.pod, run_id).own.as_ref() == Some(&want))
}

/// Users podkeeper keeps on every member whatever the spec says.
fn own(name: &str) -> bool {
    matches!(name, "default") || name == OPERATOR_USER || name == REPLICATION_USER
}

/// Brings the members that answer to `access.users` (see the module).
/// Returns the members it could not bring (asked again next round).
pub async fn converge(
    members: &[Member],
    access: &Access<'_>,
    connections: &Connections,
    ledger: &Ledger,
) -> Vec<(String, ClientError)> {
    let Some(users) = access.users else {
        return Vec::new();
    };
    let answering: Vec<(&Member, &str)> = members
        .iter()
        .filter_map(|m| Some((m, m.info()?.run_id.as_str())))
        .collect();
    let known: Vec<Known> = answering
        .iter()
        .map(|(m, run_id)| ledger.of(&m.pod, run_id))
        .collect();
    let view: Vec<(&str, &Known)> = answering
        .iter()
        .zip(&known)
        .map(|((m, _), k)| (m.pod.as_str(), k))
        .collect();
    let due = plan(&view, users);
    let asked: Vec<(&Member, &str, &Known, &Due)> = answering
        .iter()
        .zip(&known)
        .filter_map(|((m, run_id), k)| Some((*m, *run_id, k, due.get(&m.pod)?)))
        .collect();
    let results = join_all(asked.iter().map(|(m, _, _, d)| async move {
        let ip = m.ip.as_deref().unwrap_or_default();
        connections
            .call(
                access,
                &m.pod,
                &access.endpoint(&m.pod, ip, m.port),
                "ACL SETUSER",
                |node: Node| async move {
                    let mut delete = d.delete.clone();
                    if let (Some(own), Some(step)) = (&users.own, &d.own) {
                        for cmd in own_commands(own, step) {
                            node.command::<()>(&cmd).await?;
                        }
                    }
                    if d.sweep {
                        let present: Vec<String> =
                            node.command(redis::cmd("ACL").arg("USERS")).await?;
                        delete.extend(
                            present
                                .into_iter()
                                .filter(|n| !own(n) && !users.names.contains(n)),
                        );
                    }
                    for name in &delete {
                        node.command::<i64>(redis::cmd("ACL").arg("DELUSER").arg(name))
                            .await?;
                    }
                    for (name, step) in &d.set {
                        if let Some(u) = users.users.iter().find(|u| &u.name == name) {
                            node.command::<()>(&setuser(u, step)).await?;
                        }
                    }
                    Ok(())
                },
            )
            .await
    }))
    .await;
    let mut errors = Vec::new();
    for ((m, run_id, known, d), r) in asked.into_iter().zip(results) {
        match r {
            Ok(()) => {
                let mut known = known.clone();
                for name in &d.delete {
                    known.given.remove(name);
                }
                known.given.extend(d.set.iter().cloned());
                known.swept = true;
                if d.own.is_some() {
                    known.own = d.own.clone();
                }
                ledger.note(&m.pod, run_id, known);
            }
            Err(e) => errors.push((m.pod.clone(), e)),
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str, password: &str) -> User {
        User {
            name: name.into(),
            password: password.into(),
            rules: "~app:* +@read".into(),
        }
    }

    fn users(list: &[User]) -> Users {
        Users {
            users: list.to_vec(),
            names: list.iter().map(|u| u.name.clone()).collect(),
            own: None,
        }
    }

    fn known(swept: bool, given: &HashMap<String, Given>) -> Known {
        Known {
            swept,
            given: given.clone(),
            own: None,
        }
    }

    fn args(cmd: &redis::Cmd) -> Vec<String> {
        cmd.args_iter()
            .filter_map(|a| match a {
                redis::Arg::Simple(b) => Some(String::from_utf8_lossy(b).into_owned()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn own_passwords_go_beside_the_old_during_a_rotation_and_alone_only_after_it() {
        let rotating = Own {
            operator: "NewOp".into(),
            replication: "NewRepl".into(),
            alone: false,
        };
        let with = |own: &Own| Users {
            own: Some(own.clone()),
            ..Users::default()
        };
        let fresh = known(true, &HashMap::new());
        // Beside the old on every member.
        let due = plan(&[("a", &fresh), ("b", &fresh)], &with(&rotating));
        let added = Given::Added(own_digest(&rotating));
        assert_eq!(due["a"].own, Some(added.clone()));
        assert_eq!(due["b"].own, Some(added.clone()));
        let cmds: Vec<Vec<String>> = own_commands(&rotating, &added).iter().map(args).collect();
        assert_eq!(
            cmds.len(),
            2,
            "no masterauth while a member may lack it: {cmds:?}"
        );
        assert_eq!(
            cmds[0][..5],
            ["ACL", "SETUSER", "replication", "on", ">NewRepl"]
        );
        assert_eq!(cmds[1], ["ACL", "SETUSER", "podkeeper", "on", ">NewOp"]);
        // Every member has them, the rotation still under way: nothing more.
        let has = Known {
            own: Some(added.clone()),
            ..fresh.clone()
        };
        assert!(plan(&[("a", &has), ("b", &has)], &with(&rotating)).is_empty());
        // Over: each keeps them alone, and replication logs in with them.
        let over = Own {
            alone: true,
            ..rotating.clone()
        };
        let due = plan(&[("a", &has), ("b", &has)], &with(&over));
        let only = Given::Only(own_digest(&over));
        assert_eq!(due["a"].own, Some(only.clone()));
        let cmds: Vec<Vec<String>> = own_commands(&over, &only).iter().map(args).collect();
        assert_eq!(
            cmds[0][..6],
            [
                "ACL",
                "SETUSER",
                "replication",
                "on",
                "resetpass",
                ">NewRepl"
            ]
        );
        assert_eq!(
            cmds[1],
            [
                "CONFIG",
                "SET",
                "masteruser",
                "replication",
                "masterauth",
                "NewRepl"
            ]
        );
        assert_eq!(
            cmds[2],
            ["ACL", "SETUSER", "podkeeper", "on", "resetpass", ">NewOp"]
        );
        // A new process while nothing rotates: given them (and replication's
        // login) at once, alone the round after.
        let due = plan(&[("a", &fresh)], &with(&over));
        assert_eq!(due["a"].own, Some(Given::Added(own_digest(&over))));
        assert_eq!(
            own_commands(&over, &Given::Added(own_digest(&over))).len(),
            3
        );
        // Unknown (the Secret unreadable): the application users' sweep goes
        // on without them.
        let due = plan(&[("a", &known(false, &HashMap::new()))], &Users::default());
        assert!(due["a"].sweep && due["a"].own.is_none());
    }

    #[test]
    fn users_are_added_beside_then_alone_removed_and_a_new_process_is_swept_once() {
        let app = user("app", "one");
        let empty = HashMap::new();
        // A new process: swept, and the user added.
        let due = plan(
            &[("a", &known(false, &empty))],
            &users(std::slice::from_ref(&app)),
        );
        let d = &due["a"];
        assert!(d.sweep);
        assert_eq!(
            d.set,
            [("app".to_string(), Given::Added(user_digest(&app)))]
        );
        // Then alone.
        let added: HashMap<String, Given> =
            [("app".to_string(), Given::Added(user_digest(&app)))].into();
        let due = plan(
            &[("a", &known(true, &added))],
            &users(std::slice::from_ref(&app)),
        );
        assert_eq!(
            due["a"].set,
            [("app".to_string(), Given::Only(user_digest(&app)))]
        );
        assert!(!due["a"].sweep);
        // Done: nothing.
        let only: HashMap<String, Given> =
            [("app".to_string(), Given::Only(user_digest(&app)))].into();
        assert!(
            plan(
                &[("a", &known(true, &only))],
                &users(std::slice::from_ref(&app))
            )
            .is_empty()
        );
        // A new password: beside the old on both members before either
        // drops the old.
        let changed = user("app", "two");
        let due = plan(
            &[("a", &known(true, &only)), ("b", &known(true, &only))],
            &users(std::slice::from_ref(&changed)),
        );
        for pod in ["a", "b"] {
            assert_eq!(
                due[pod].set,
                [("app".to_string(), Given::Added(user_digest(&changed)))]
            );
        }
        // A rules change is a change too.
        let mut wider = app.clone();
        wider.rules = "~* +@read".into();
        assert_eq!(
            plan(
                &[("a", &known(true, &only))],
                &users(std::slice::from_ref(&wider))
            )["a"]
                .set,
            [("app".to_string(), Given::Added(user_digest(&wider)))]
        );
        // Removed from the spec: deleted.
        let due = plan(&[("a", &known(true, &only))], &users(&[]));
        assert_eq!(due["a"].delete, ["app"]);
        // A user whose Secret cannot be read is kept as it is.
        let unread = Users {
            users: Vec::new(),
            names: ["app".to_string()].into(),
            own: None,
        };
        assert!(plan(&[("a", &known(true, &only))], &unread).is_empty());
    }

    #[test]
    fn whatever_its_rules_an_application_user_is_denied_administrative_commands_last() {
        let mut u = user("app", "pw");
        u.rules = "allcommands allkeys +config +debug".into();
        let args = args(&setuser(&u, &Given::Only(user_digest(&u))));
        assert_eq!(
            args[..8],
            [
                "ACL",
                "SETUSER",
                "app",
                "on",
                "resetpass",
                ">pw",
                "resetkeys",
                "resetchannels"
            ]
        );
        assert_eq!(
            args[args.len() - 3..],
            ["-@admin", "-debug", "-module"],
            "{args:?}"
        );
        assert!(!format!("{u:?}").contains("pw"));
    }
}
