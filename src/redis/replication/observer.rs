//! Observing the members of one Redis off the reconcile: one task per
//! member keeps its latest `INFO` fresh on a cached connection, and a round
//! takes the latest answers instead of asking and waiting itself.
//!
//! A round ([`Observer::latest`]) asks every member's task for an answer
//! at once and uses, per member:
//! - the latest answer, when it was a failure: the member is silent (or
//!   was, one attempt ago), and its task is already trying again; nobody
//!   waits for it. This is what keeps one node going away from holding the
//!   reconcile workers: a round waits for a silent member once, when it
//!   goes silent, never again while it stays so;
//! - otherwise an answer asked after the round began, waited for up to two
//!   deadlines (one that began just before, then its own). A good answer
//!   from before the round is never used: a member may have restarted or
//!   been commanded since, and a round that took an old answer for the
//!   current one could find a set "replicated" that is not.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::redis::replication::client::{Access, Connections, Endpoint, Route, Timeouts};
use crate::redis::replication::error::ClientError;
use crate::redis::replication::info::ReplicationInfo;

/// How often each member is asked when no round asks sooner: keeps its
/// connection alive and notices a silent member answering again.
pub const PERIOD: Duration = Duration::from_secs(1);

/// The shortest time between two attempts of a member's task when its
/// connection ends right after an answer: a server that closes every
/// connection it answers is asked at this rate, not in a busy loop.
pub const AFTER_CLOSE: Duration = Duration::from_millis(50);

/// The longest pause between a silent member's attempts when no round asks
/// sooner (the pause doubles from [`PERIOD`] with each failure in a row): a
/// member that never answers (a node gone, or a Pod that runs no
/// redis-server) costs little, and every round still asks it at once.
pub const SILENT_MAX: Duration = Duration::from_secs(30);

/// How long a member's task waits before asking again on its own, after
/// `failures` failed attempts in a row.
fn pause(period: Duration, failures: u32) -> Duration {
    match failures {
        0 | 1 => period,
        n => (period * 2u32.pow((n - 1).min(5))).min(SILENT_MAX.max(period)),
    }
}

/// Asks for a round of the Redis whose member's answer changed.
pub type Wake = Arc<dyn Fn() + Send + Sync>;

/// One answer (or failure) of a member.
#[derive(Clone, Debug)]
pub struct Sample {
    /// When it was asked.
    pub asked: Instant,
    pub result: Result<ReplicationInfo, Arc<ClientError>>,
}

/// A member's latest answer, and where it was asked.
#[derive(Clone, Debug)]
pub struct Latest {
    pub pod: String,
    pub ip: String,
    pub port: u16,
    pub sample: Arc<Sample>,
}

/// What a member's task is for: a new IP, port, password or route starts
/// another.
#[derive(Clone, PartialEq, Eq)]
struct Target {
    ip: String,
    port: u16,
    password: Option<String>,
    operator: Option<String>,
    previous_operator: Option<String>,
    forwarded: bool,
    timeouts: Timeouts,
}

struct Watcher {
    target: Target,
    latest: watch::Sender<Option<Arc<Sample>>>,
    nudge: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The observing tasks of one Redis's members, and their connections.
pub struct Observer {
    watchers: Mutex<HashMap<String, Watcher>>,
    connections: Arc<Connections>,
    period: Duration,
    /// Called when a member's answer changes in what the planner reads (it
    /// stops or starts answering, its role, process, primary or link
    /// changes): a primary that dies is acted on at its task's next
    /// attempt, not at the Redis's next requeue.
    wake: Option<Wake>,
}

impl Default for Observer {
    fn default() -> Self {
        Observer::new(PERIOD)
    }
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observer")
            .field("members", &self.watchers().len())
            .field("connections", &self.connections.len())
            .finish()
    }
}

impl Observer {
    pub fn new(period: Duration) -> Self {
        Observer {
            watchers: Mutex::new(HashMap::new()),
            connections: Arc::new(Connections::default()),
            period,
            wake: None,
        }
    }

    /// An observer that calls `wake` when a member's answer changes.
    pub fn waking(period: Duration, wake: Wake) -> Self {
        Observer {
            wake: Some(wake),
            ..Observer::new(period)
        }
    }

    fn watchers(&self) -> std::sync::MutexGuard<'_, HashMap<String, Watcher>> {
        self.watchers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every observed member's latest answer, asking nobody: what the
    /// metrics show (at most a [`PERIOD`] old while the member answers).
    pub fn samples(&self) -> Vec<Latest> {
        let mut samples: Vec<_> = self
            .watchers()
            .iter()
            .filter_map(|(pod, w)| {
                Some(Latest {
                    pod: pod.clone(),
                    ip: w.target.ip.clone(),
                    port: w.target.port,
                    sample: w.latest.borrow().clone()?,
                })
            })
            .collect();
        samples.sort_by(|a, b| a.pod.cmp(&b.pod));
        samples
    }

    /// The connections, shared by the observing tasks and the commands.
    pub fn connections(&self) -> &Connections {
        &self.connections
    }

    /// Stops observing, and closes the connections of, every member not in
    /// `keep` (Pod name and IP).
    pub fn retain(&self, keep: &[(&str, &str)]) {
        let kept = |pod: &str, ip: &str| keep.iter().any(|(p, i)| *p == pod && *i == ip);
        self.watchers().retain(|pod, w| kept(pod, &w.target.ip));
        self.connections.retain(|k| kept(&k.pod, &k.ip));
    }

    /// `pod`'s answer for a round, as the module documentation says.
    pub async fn latest(
        &self,
        access: &Access<'_>,
        pod: &str,
        endpoint: &Endpoint,
    ) -> Result<ReplicationInfo, Arc<ClientError>> {
        let called = Instant::now();
        let (mut rx, nudge) = self.watch(access, pod, endpoint);
        let current = rx.borrow_and_update().clone();
        // Ask now (a silent member's task asks again as soon as its
        // attempt under way ends).
        nudge.notify_one();
        if let Some(s) = current
            && s.result.is_err()
        {
            return s.result.clone();
        }
        let wait = async {
            loop {
                if rx.changed().await.is_err() {
                    return None;
                }
                let s = rx.borrow_and_update().clone();
                if let Some(s) = s
                    && (s.asked >= called || s.result.is_err())
                {
                    return Some(s.result.clone());
                }
            }
        };
        // The task's attempts are bounded by the deadline: one that began
        // just before this call, then its own.
        let limit = access.timeouts.deadline * 2;
        match tokio::time::timeout(limit, wait).await {
            Ok(Some(result)) => result,
            _ => Err(Arc::new(ClientError::Timeout {
                addr: endpoint.addr(),
                command: "INFO",
            })),
        }
    }

    /// The member's watch, started (or restarted, when its target changed)
    /// as needed.
    fn watch(
        &self,
        access: &Access<'_>,
        pod: &str,
        endpoint: &Endpoint,
    ) -> (watch::Receiver<Option<Arc<Sample>>>, Arc<Notify>) {
        let target = Target {
            ip: endpoint.ip.clone(),
            port: endpoint.port,
            password: endpoint.password.clone(),
            operator: endpoint.operator.clone(),
            previous_operator: endpoint.previous_operator.clone(),
            forwarded: matches!(access.route, Route::PortForward(_)),
            timeouts: access.timeouts,
        };
        let mut watchers = self.watchers();
        let fresh = watchers.get(pod).is_none_or(|w| w.target != target);
        if fresh {
            let (latest, _) = watch::channel(None);
            let nudge = Arc::new(Notify::new());
            let task = tokio::spawn(observe_member(
                self.connections.clone(),
                access.route.clone(),
                access.timeouts,
                pod.to_string(),
                Box::new(endpoint.clone()),
                latest.clone(),
                nudge.clone(),
                self.period,
                self.wake.clone(),
            ));
            watchers.insert(
                pod.to_string(),
                Watcher {
                    target,
                    latest,
                    nudge,
                    task,
                },
            );
        }
        let w = &watchers[pod];
        (w.latest.subscribe(), w.nudge.clone())
    }
}

/// One member's task: ask, publish, sleep a period or until nudged.
#[allow(clippy::too_many_arguments)]
async fn observe_member(
    connections: Arc<Connections>,
    route: Route,
    timeouts: Timeouts,
    pod: String,
    // Boxed: a member's task stays small (see `a_members_task_is_small`).
    endpoint: Box<Endpoint>,
    latest: watch::Sender<Option<Arc<Sample>>>,
    nudge: Arc<Notify>,
    period: Duration,
    wake: Option<Wake>,
) {
    let access = Access {
        password: endpoint.password.as_deref(),
        operator: endpoint.operator.as_deref(),
        previous_operator: endpoint.previous_operator.as_deref(),
        // The observer only asks INFO.
        manage_clients: false,
        timeouts,
        route: &route,
        // The endpoint says whether it is over TLS.
        tls: None,
        users: None,
        default_off: false,
    };
    let mut failures = 0u32;
    loop {
        let asked = Instant::now();
        // Boxed: the connect-and-ask future is large, and a task of every
        // member of every Redis lives as long as its Pod; unboxed, each
        // would carry its room while it sleeps.
        let result = Box::pin(connections.observe(&access, &pod, &endpoint))
            .await
            .map_err(Arc::new);
        failures = if result.is_err() {
            failures.saturating_add(1)
        } else {
            0
        };
        let before = latest.send_replace(Some(Arc::new(Sample { asked, result })));
        if let (Some(wake), Some(before)) = (&wake, before)
            && changed(
                &before.result,
                &latest.borrow().as_ref().expect("just sent").result,
            )
        {
            wake();
        }
        // A connection that ends (redis-server killed, its container
        // stopped: the kernel closes the socket) is asked about again at
        // once, not a period later: the next attempt finds the port refused
        // or a new process, and wakes the Redis.
        let closed = if failures == 0 {
            connections.closed(&access, &pod, &endpoint)
        } else {
            None
        };
        let ended = async {
            match closed {
                Some(c) => {
                    c.ended().await;
                    tokio::time::sleep_until(asked + AFTER_CLOSE).await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = tokio::time::sleep(pause(period, failures)) => {}
            () = nudge.notified() => {}
            () = ended => {}
        }
    }
}

/// Whether the planner could decide differently on `after` than on
/// `before`: a member that stops or starts answering (or whose port starts
/// or stops refusing connections), or whose role,
/// process, primary, link or sync changed. Offsets move all the time and do
/// not count.
fn changed(
    before: &Result<ReplicationInfo, Arc<ClientError>>,
    after: &Result<ReplicationInfo, Arc<ClientError>>,
) -> bool {
    match (before, after) {
        (Ok(b), Ok(a)) => {
            (b.role, &b.run_id, &b.master_host, b.master_port, b.link_up)
                != (a.role, &a.run_id, &a.master_host, a.master_port, a.link_up)
                || b.sync_in_progress != a.sync_in_progress
                || b.failover_in_progress() != a.failover_in_progress()
        }
        // A refused port means no redis-server runs there (the planner
        // replaces such a primary at once); other failures are silence.
        (Err(b), Err(a)) => b.refused() != a.refused(),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;

    /// What every member's task holds while it sleeps stays small: 3000
    /// members (1000 Redis of 3) must not cost tens of MiB.
    #[test]
    fn a_members_task_is_small() {
        let route = Route::PodNetwork;
        let access = Access::plain(&route, Duration::from_secs(1));
        let task = observe_member(
            Arc::new(Connections::default()),
            Route::PodNetwork,
            access.timeouts,
            "p".into(),
            Box::new(access.endpoint("p", "10.0.0.1", 6379)),
            watch::channel(None).0,
            Arc::new(Notify::new()),
            PERIOD,
            None,
        );
        let size = std::mem::size_of_val(&task);
        assert!(size < 1024, "{size} bytes");
    }

    #[test]
    fn a_silent_member_is_asked_less_and_less_often_on_its_own() {
        let p = PERIOD;
        let pauses: Vec<Duration> = (0..9).map(|n| pause(p, n)).collect();
        assert_eq!(pauses[0], p, "answering: every period");
        assert_eq!(pauses[1], p, "the first failure: again a period later");
        assert_eq!(&pauses[2..5], &[p * 2, p * 4, p * 8]);
        assert_eq!(pauses[8], SILENT_MAX);
        assert!(pauses.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn only_what_the_planner_reads_wakes_a_redis() {
        use crate::redis::replication::info::{ReplicationInfo, Role};
        let info = |role, link_up, offset| ReplicationInfo {
            role,
            run_id: "r".into(),
            master_host: Some("10.0.0.1".into()),
            master_port: Some(6379),
            link_up,
            sync_in_progress: false,
            slave_repl_offset: Some(offset),
            master_last_io_seconds: Some(0),
            master_repl_offset: offset,
            master_replid: "h".into(),
            failover_state: "no-failover".into(),
            connected_replicas: vec![],
            vitals: Default::default(),
        };
        let err = || {
            Err(Arc::new(ClientError::Timeout {
                addr: "a".into(),
                command: "INFO",
            }))
        };
        let ok = |role, link_up, offset| Ok(info(role, link_up, offset));
        assert!(!changed(
            &ok(Role::Replica, true, 1),
            &ok(Role::Replica, true, 900)
        ));
        assert!(changed(
            &ok(Role::Replica, true, 1),
            &ok(Role::Replica, false, 1)
        ));
        assert!(changed(
            &ok(Role::Replica, true, 1),
            &ok(Role::Primary, true, 1)
        ));
        assert!(changed(&ok(Role::Replica, true, 1), &err()));
        assert!(changed(&err(), &ok(Role::Replica, true, 1)));
        assert!(!changed(&err(), &err()));
        let refused = Err(Arc::new(ClientError::Connect {
            addr: "a".into(),
            source: std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into(),
        }));
        assert!(changed(&err(), &refused), "silent, then refused");
        assert!(changed(&refused, &err()));
    }

    #[tokio::test]
    async fn a_silent_member_is_waited_for_once_then_never() {
        // Accepts, reads, never answers.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
                });
            }
        });
        let deadline = Duration::from_millis(300);
        let route = Route::PodNetwork;
        let access = Access::plain(&route, deadline);
        let endpoint = access.endpoint("p", "127.0.0.1", port);
        let observer = Observer::default();
        let started = Instant::now();
        let first = observer.latest(&access, "silent", &endpoint).await;
        assert!(first.is_err());
        assert!(started.elapsed() < deadline * 2, "{:?}", started.elapsed());
        for _ in 0..3 {
            let started = Instant::now();
            let again = observer.latest(&access, "silent", &endpoint).await;
            assert!(again.is_err());
            assert!(
                started.elapsed() < Duration::from_millis(50),
                "a known-silent member costs no wait: {:?}",
                started.elapsed()
            );
        }
        observer.retain(&[]);
        assert!(observer.watchers().is_empty());
    }

    /// A redis-server killed between two asks is noticed when its
    /// connection ends, not a period later: the task asks at once, finds
    /// the port refused and wakes its Redis.
    #[tokio::test]
    async fn a_member_whose_connection_ends_is_asked_again_at_once() {
        use crate::redis::replication::client::tests::primary_info_reply;
        use tokio::io::AsyncWriteExt;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (kill, killed) = watch::channel(false);
        let mut stop = killed.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((mut s, _)) = accepted else { return };
                        let mut stop = killed.clone();
                        tokio::spawn(async move {
                            let mut buf = [0u8; 1024];
                            loop {
                                tokio::select! {
                                    read = s.read(&mut buf) => match read {
                                        Ok(n) if n > 0 => {
                                            if s.write_all(primary_info_reply().as_bytes()).await.is_err() {
                                                return;
                                            }
                                        }
                                        _ => return,
                                    },
                                    // "kill -9": the connection closes.
                                    _ = stop.changed() => return,
                                }
                            }
                        });
                    }
                    // ... and the port is refused from now on.
                    _ = stop.changed() => return,
                }
            }
        });
        let route = Route::PodNetwork;
        let access = Access::plain(&route, Duration::from_secs(1));
        let endpoint = access.endpoint("p", "127.0.0.1", port);
        let woken = Arc::new(Notify::new());
        let wake = woken.clone();
        // A period far longer than the test: only the connection's end can
        // bring the next attempt.
        let observer =
            Observer::waking(Duration::from_secs(60), Arc::new(move || wake.notify_one()));
        let first = observer.latest(&access, "p", &endpoint).await;
        assert!(first.is_ok(), "{first:?}");
        let at = Instant::now();
        kill.send(true).unwrap();
        // The task's own attempts (no round asks here): an ask under way at
        // the kill may fail first ("broken pipe", a wake); the next finds
        // the port refused (another wake).
        let refused = || {
            observer.watchers()["p"]
                .latest
                .borrow()
                .as_ref()
                .is_some_and(|s| matches!(&s.result, Err(e) if e.refused()))
        };
        while !refused() {
            tokio::time::timeout(Duration::from_secs(5), woken.notified())
                .await
                .expect("the Redis is woken when its member's connection ends");
        }
        assert!(at.elapsed() < Duration::from_secs(1), "{:?}", at.elapsed());
    }
}
