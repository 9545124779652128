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
    /// The replication user's password: every member process is given the
    /// user and logs in to its primary as it (`masteruser`/`masterauth`),
    /// once (members started by an older podkeeper replicated as the
    /// operator's user, which no longer may).
    pub replication: Option<String>,
}

impl std::fmt::Debug for Users {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Users")
            .field("users", &self.users)
            .field("names", &self.names)
            .finish_non_exhaustive()
    }
}
