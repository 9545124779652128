//! The application users of a round (`spec.users` with their passwords)
//! as plain data: what the operator's access to a Redis carries. How they
//! reach the members is [`crate::redis::replication::users`].

use std::collections::HashSet;

/// One application user as the members should have it.
#[derive(Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub password: String,
    pub rules: String,
}

impl std::fmt::Debug for User {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("User")
            .field("name", &self.name)
            .field("rules", &self.rules)
            .finish_non_exhaustive()
    }
}

/// The users of one round: those whose password could be read, and the
/// names of all of `spec.users` (a user whose Secret cannot be read is
/// left as the members have it, not deleted).
#[derive(Clone, Default)]
pub struct Users {
    pub users: Vec<User>,
    pub names: HashSet<String>,
    /// podkeeper's own users' passwords (`None`: not known this round).
    pub own: Option<Own>,
}

/// The passwords of podkeeper's own users as the members should have them:
/// the operator's user's and the replication user's, which replicas log in
/// to their primary as (`masteruser`/`masterauth`; members started by an
/// older podkeeper replicated as the operator's user, which no longer may).
#[derive(Clone, PartialEq, Eq)]
pub struct Own {
    pub operator: String,
    pub replication: String,
    /// No rotation under way: each member keeps these alone; during one,
    /// beside the passwords it has.
    pub alone: bool,
}

impl std::fmt::Debug for Users {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Users")
            .field("users", &self.users)
            .field("names", &self.names)
            .finish_non_exhaustive()
    }
}
