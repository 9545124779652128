//! What `spec.config` of a Redis may hold: the directives podkeeper sets
//! itself or does not support, and the values redis-server could misread,
//! each with the reason a user is given. The same lists make the CRD's CEL
//! rules (admission) and the operator's own check
//! ([`crate::redis::replication::config::validate`]), so the two never
//! disagree.

use kube::core::{Message, Rule};

/// Directives podkeeper sets itself, with the reason given to the user.
const OWNED: &[(&str, &str)] = &[
    ("replicaof", "the operator sets each Pod's role"),
    ("slaveof", "the operator sets each Pod's role"),
    ("port", "use spec.port"),
    (
        "bind",
        "the operator and the other Pods reach redis-server on the Pod IP",
    ),
    ("bind-source-addr", "replicas connect from the Pod IP"),
    (
        "protected-mode",
        "it would refuse connections on the Pod IP",
    ),
    ("requirepass", "use spec.auth"),
    ("masterauth", "use spec.auth"),
    ("masteruser", "use spec.auth"),
    ("dir", "the data directory belongs to the Pod"),
    ("include", "files in the container are the operator's"),
    (
        "daemonize",
        "redis-server is the container's foreground process",
    ),
    (
        "supervised",
        "redis-server is the container's foreground process",
    ),
    ("logfile", "logs go to the container's output"),
    (
        "replica-announce-ip",
        "the operator matches replicas by Pod IP",
    ),
    (
        "replica-announce-port",
        "the operator matches replicas by port",
    ),
    (
        "slave-announce-ip",
        "the operator matches replicas by Pod IP",
    ),
    (
        "slave-announce-port",
        "the operator matches replicas by port",
    ),
];

/// Directives podkeeper does not let `spec.config` set, though it does not
/// set them itself, with the reason (an exact name, or a prefix ending in
/// `-`).
const UNSUPPORTED: &[(&str, &str)] = &[
    (
        "rename-command",
        "it would hide commands the operator needs (INFO, REPLICAOF, FAILOVER, CONFIG)",
    ),
    (
        "user",
        "ACL users could lock the operator out; use spec.auth",
    ),
    (
        "aclfile",
        "ACL users could lock the operator out; use spec.auth",
    ),
    (
        "replica-read-only",
        "replicas must refuse writes: a write taken by a replica is lost at its next sync",
    ),
    (
        "slave-read-only",
        "replicas must refuse writes: a write taken by a replica is lost at its next sync",
    ),
    (
        "replica-announced",
        "the operator finds the replicas in their primary's INFO replication",
    ),
    (
        "min-replicas-to-write",
        "podkeeper sets it to fence a primary cut off from its replicas (use spec.failover.minReplicasToWrite and minReplicasMaxLagSeconds)",
    ),
    (
        "min-replicas-max-lag",
        "podkeeper sets it to fence a primary cut off from its replicas (use spec.failover.minReplicasToWrite and minReplicasMaxLagSeconds)",
    ),
    (
        "min-slaves-to-write",
        "podkeeper sets it to fence a primary cut off from its replicas (use spec.failover.minReplicasToWrite and minReplicasMaxLagSeconds)",
    ),
    (
        "min-slaves-max-lag",
        "podkeeper sets it to fence a primary cut off from its replicas (use spec.failover.minReplicasToWrite and minReplicasMaxLagSeconds)",
    ),
    (
        "unixsocket",
        "redis-server listens on TCP only, where the operator and the probes reach it",
    ),
    (
        "unixsocketperm",
        "redis-server listens on TCP only, where the operator and the probes reach it",
    ),
    (
        "enable-protected-configs",
        "it would let clients change dir and other directives podkeeper owns at run time",
    ),
    (
        "enable-debug-command",
        "DEBUG can change a member's replication ID and stall or crash it",
    ),
    (
        "repl-ping-replica-period",
        "podkeeper sets it to 1 s: replicas' traffic from their primary is the second opinion before a failover",
    ),
    (
        "repl-ping-slave-period",
        "podkeeper sets it to 1 s: replicas' traffic from their primary is the second opinion before a failover",
    ),
    ("cluster-", "Redis Cluster mode is not supported"),
    ("tls-", "podkeeper sets the TLS directives from spec.tls"),
];

/// The names of the directives podkeeper sets itself.
pub fn owned_directives() -> impl Iterator<Item = &'static str> {
    OWNED.iter().map(|(name, _)| *name)
}

/// Every name `spec.config` may not set, exact or as a prefix (ending in
/// `-`): the directives podkeeper owns and those it does not support.
pub fn refused_directives() -> impl Iterator<Item = &'static str> {
    OWNED.iter().chain(UNSUPPORTED).map(|(name, _)| *name)
}

/// Why `spec.config` may not set the directive `lower` (lower case), if so.
pub(crate) fn refusal(lower: &str) -> Option<String> {
    if let Some((_, why)) = OWNED.iter().find(|(n, _)| *n == lower) {
        return Some(format!("{OWNED_TEXT} ({why})"));
    }
    UNSUPPORTED
        .iter()
        .find(|(n, _)| {
            if n.ends_with('-') {
                lower.starts_with(n)
            } else {
                *n == lower
            }
        })
        .map(|(_, why)| why.to_string())
}

/// What the error says of a directive podkeeper owns.
pub const OWNED_TEXT: &str = "podkeeper sets this directive itself";
/// What the error says of a value with a control character.
pub const CONTROL_TEXT: &str = "the value must be one line of printable text (no line breaks, tabs or other control characters)";
/// What the error says of a value with a word redis-server reads as another
/// directive.
pub const DIRECTIVE_TEXT: &str = "a word starting with '--', or a lone '-', would make redis-server read what follows as another directive (values are split on spaces into the directive's arguments)";
/// What the error says of a value with quotes.
pub const QUOTES_TEXT: &str = "quotes are not interpreted: the value is split on spaces into the directive's arguments (an empty value is one empty argument)";

/// The regular expressions (RE2, as CEL's `matches`) of what a value must
/// not hold, with the error's text; [`crate::redis::replication::config::validate`] checks the same in Rust.
const VALUE_PATTERNS: [(&str, &str); 3] = [
    (r"[\x00-\x1f\x7f]", CONTROL_TEXT),
    (r"(^|\s)-(-|\s|$)", DIRECTIVE_TEXT),
    (r#"["']"#, QUOTES_TEXT),
];

/// `s` as a CEL string literal.
fn cel_string(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// The CRD's rule that refuses every directive of [`refused_directives`]
/// (in any case), with a message naming the directive and giving the same
/// reason as [`crate::redis::replication::config::validate`]'s error.
pub fn refused_names_rule() -> Rule {
    let mut reasons: Vec<String> = Vec::new();
    let mut exact = Vec::new();
    let mut prefixes = Vec::new();
    for name in refused_directives() {
        let reason = refusal(name).unwrap_or_default();
        let i = reasons
            .iter()
            .position(|r| *r == reason)
            .unwrap_or_else(|| {
                reasons.push(reason);
                reasons.len() - 1
            });
        if name.ends_with('-') {
            prefixes.push((name, i));
        } else {
            exact.push((name, i));
        }
    }
    let k = "k.lowerAscii()";
    let names: Vec<String> = exact.iter().map(|(n, _)| cel_string(n)).collect();
    let mut refused = format!("{k} in [{}]", names.join(", "));
    for (p, _) in &prefixes {
        refused += &format!(" || {k}.startsWith({})", cel_string(p));
    }
    let exact_reason: Vec<String> = exact
        .iter()
        .map(|(n, i)| format!("{}: {i}", cel_string(n)))
        .collect();
    let mut which = format!("{{{}}}[{k}]", exact_reason.join(", "));
    for (p, i) in prefixes.iter().rev() {
        which = format!("({k}.startsWith({}) ? {i} : {which})", cel_string(p));
    }
    let reasons: Vec<String> = reasons.iter().map(|r| cel_string(r)).collect();
    Rule::new(format!("self.all(k, !({refused}))")).message(Message::Expression(format!(
        "self.filter(k, {refused}).map(k, 'spec.config.' + k + ': ' + [{}][{which}])[0]",
        reasons.join(", ")
    )))
}

/// The CRD's rules that refuse every value redis-server could read as
/// more than one directive's, or misread: one per pattern of what a value
/// must not hold, with a message naming the directive.
pub fn value_rules() -> [Rule; 3] {
    VALUE_PATTERNS.map(|(pattern, text)| {
        let matches = format!("self[k].matches({})", cel_string(pattern));
        Rule::new(format!("self.all(k, !{matches})")).message(Message::Expression(format!(
            "self.filter(k, {matches}).map(k, 'spec.config.' + k + ': ' + {})[0]",
            cel_string(text)
        )))
    })
}

/// What is wrong with `value`, as [`VALUE_PATTERNS`] says in RE2.
pub(crate) fn value_problem(value: &str) -> Option<&'static str> {
    if value.chars().any(|c| c.is_ascii_control()) {
        return Some(CONTROL_TEXT);
    }
    if value
        .split_ascii_whitespace()
        .any(|w| w == "-" || w.starts_with("--"))
    {
        return Some(DIRECTIVE_TEXT);
    }
    if value.contains(['"', '\'']) {
        return Some(QUOTES_TEXT);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crd_rules_are_generated_from_the_same_lists() {
        let rule = refused_names_rule();
        for name in refused_directives() {
            assert!(rule.rule.contains(&cel_string(name)), "{name}");
            let probe = if name.ends_with('-') {
                format!("{name}x")
            } else {
                name.to_string()
            };
            // The reason the operator's own check gives.
            let reason = refusal(&probe).unwrap();
            let Some(Message::Expression(message)) = &rule.message else {
                panic!("a message expression");
            };
            assert!(message.contains(&cel_string(&reason)), "{name}: {reason}");
        }
        for (rule, (pattern, text)) in value_rules().iter().zip(VALUE_PATTERNS) {
            assert!(rule.rule.contains(&cel_string(pattern)));
            let Some(Message::Expression(message)) = &rule.message else {
                panic!("a message expression");
            };
            assert!(message.contains(&cel_string(text)) && message.contains("'spec.config.' + k"));
        }
        assert_eq!(cel_string(r"a'b\c"), r"'a\'b\\c'");
    }
}
