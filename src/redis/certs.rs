//! The certificates of a Redis's TLS (`spec.tls`), pure: checking what a
//! Secret holds the way the operator's own connections will check it, and
//! issuing podkeeper's CA and the members' certificate when the user names
//! no Secret.

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::RootCertStore;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier;
use rustls::crypto::CryptoProvider;
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};

use crate::api::Redis;
use sha2::{Digest, Sha256};

/// The Secret keys of cert-manager's layout, which the members read.
pub const CERT_KEY: &str = "tls.crt";
pub const KEY_KEY: &str = "tls.key";
pub const CA_KEY: &str = "ca.crt";

/// How long a certificate podkeeper issues to the members is valid, and
/// how long before its end it is issued again.
pub const MEMBER_VALIDITY: Duration = Duration::from_secs(90 * 24 * 3600);
pub const RENEW_BEFORE: Duration = Duration::from_secs(30 * 24 * 3600);
/// How long podkeeper's own CA is valid (not renewed: see docs/redis.md).
pub const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// The name the operator verifies every member's certificate against (and
/// that the certificates podkeeper issues carry): the `<name>` Service's
/// name in the cluster.
pub fn server_name(redis: &str, namespace: &str) -> String {
    format!("{redis}.{namespace}.svc")
}

/// The DNS names of the certificate podkeeper issues: both Services, by
/// every name a client in the cluster may use.
pub fn member_names(redis: &str, replicas_service: &str, namespace: &str) -> Vec<String> {
    [redis, replicas_service]
        .iter()
        .flat_map(|s| {
            [
                s.to_string(),
                format!("{s}.{namespace}"),
                format!("{s}.{namespace}.svc"),
                format!("{s}.{namespace}.svc.cluster.local"),
            ]
        })
        .collect()
}

/// The Secret of the certificate podkeeper issues for Redis `redis`.
pub fn issued_secret_name(redis: &str) -> String {
    format!("{redis}-tls")
}

/// The Secret of podkeeper's CA for Redis `redis` (never mounted in a Pod).
pub fn ca_secret_name(redis: &str) -> String {
    format!("{redis}-ca")
}

/// The Secret the members mount: the user's, or the one podkeeper issues.
pub fn secret_name(redis: &Redis) -> Option<String> {
    let tls = redis.spec.tls.as_ref()?;
    Some(
        tls.secret_name
            .clone()
            .unwrap_or_else(|| issued_secret_name(&redis.name_any())),
    )
}

/// What a TLS Secret holds (PEM).
#[derive(Clone, PartialEq, Eq)]
pub struct Material {
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
    pub ca: Vec<u8>,
}

impl std::fmt::Debug for Material {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the key.
        f.debug_struct("Material").finish_non_exhaustive()
    }
}

/// A Secret's material that checked out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checked {
    /// SHA-256 of the member certificate (DER), hex: what a member serves
    /// once it has taken this Secret up.
    pub fingerprint: String,
    /// The certificate's end, in seconds since the epoch.
    pub not_after: i64,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificates in `pem` (empty when there are none).
pub fn certificates(pem: &[u8]) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_slice_iter(pem)
        .filter_map(Result::ok)
        .collect()
}

/// The trust of `ca` (PEM): its certificates, or why there is none.
pub fn roots(ca: &[u8]) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(certificates(ca));
    if added == 0 {
        return Err(format!("{CA_KEY} holds no CA certificate"));
    }
    Ok(roots)
}

/// SHA-256 of a certificate, hex.
pub fn fingerprint(cert: &CertificateDer<'_>) -> String {
    Sha256::digest(cert.as_ref())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Checks a Secret's material as a member and the operator will use it: a
/// certificate and its key that match, a CA that the certificate chains
/// to, valid at `now` and for `name` (see [`server_name`]). Returns the
/// certificate's fingerprint and end, or what is wrong, naming the key.
pub fn check(m: &Material, name: &str, now: UnixTime) -> Result<Checked, String> {
    let chain = certificates(&m.cert);
    let Some(leaf) = chain.first().cloned() else {
        return Err(format!("{CERT_KEY} holds no certificate"));
    };
    let key = PrivateKeyDer::from_pem_slice(&m.key)
        .map_err(|_| format!("{KEY_KEY} holds no private key"))?;
    let provider = provider();
    let certified = CertifiedKey::from_der(chain.clone(), key, &provider)
        .map_err(|e| format!("{KEY_KEY} is not the key of the certificate in {CERT_KEY}: {e}"))?;
    match certified.keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
        Err(_) => {
            return Err(format!(
                "{KEY_KEY} is not the key of the certificate in {CERT_KEY}"
            ));
        }
    }
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots(&m.ca)?), provider)
        .build()
        .map_err(|e| format!("{CA_KEY}: {e}"))?;
    let server =
        ServerName::try_from(name.to_string()).map_err(|_| format!("{name} is not a DNS name"))?;
    verifier
        .verify_server_cert(&leaf, &chain[1..], &server, &[], now)
        .map_err(|e| {
            format!(
                "the certificate in {CERT_KEY} does not verify for {name} against {CA_KEY}: {e}"
            )
        })?;
    let (_, parsed) = x509_parser::parse_x509_certificate(leaf.as_ref())
        .map_err(|e| format!("{CERT_KEY}: {e}"))?;
    Ok(Checked {
        fingerprint: fingerprint(&leaf),
        not_after: parsed.validity().not_after.timestamp(),
    })
}

/// Whether a certificate podkeeper issued, ending at `not_after`, is due
/// to be issued again at `now` (seconds since the epoch).
pub fn renewal_due(not_after: i64, now: i64) -> bool {
    not_after - now < RENEW_BEFORE.as_secs() as i64
}

fn issue_error(e: rcgen::Error) -> String {
    format!("cannot issue a certificate: {e}")
}

fn dated(params: &mut CertificateParams, now: i64, validity: Duration) -> Result<(), String> {
    let start = time::OffsetDateTime::from_unix_timestamp(now)
        .map_err(|e| format!("cannot issue a certificate: {e}"))?;
    // An hour of slack for clocks that are behind.
    params.not_before = start - time::Duration::hours(1);
    params.not_after = start + time::Duration::seconds(validity.as_secs() as i64);
    Ok(())
}

/// A new CA for Redis `redis` (ECDSA P-256, valid [`CA_VALIDITY`]): its
/// certificate and key, PEM.
pub fn issue_ca(redis: &str, namespace: &str, now: i64) -> Result<(String, String), String> {
    let key = KeyPair::generate().map_err(issue_error)?;
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(issue_error)?;
    let mut dn = DistinguishedName::new();
    dn.push(
        DnType::CommonName,
        format!("podkeeper CA of Redis {namespace}/{redis}"),
    );
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    dated(&mut params, now, CA_VALIDITY)?;
    let cert = params.self_signed(&key).map_err(issue_error)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// A member certificate for `names` (ECDSA P-256, valid
/// [`MEMBER_VALIDITY`]) signed by the CA `ca_cert`/`ca_key` (PEM): its
/// certificate and key, PEM.
pub fn issue_member(
    ca_cert: &str,
    ca_key: &str,
    names: &[String],
    now: i64,
) -> Result<(String, String), String> {
    let ca_key = KeyPair::from_pem(ca_key).map_err(issue_error)?;
    let issuer = Issuer::from_ca_cert_pem(ca_cert, &ca_key).map_err(issue_error)?;
    let key = KeyPair::generate().map_err(issue_error)?;
    let mut params = CertificateParams::new(names.to_vec()).map_err(issue_error)?;
    let mut dn = DistinguishedName::new();
    dn.push(
        DnType::CommonName,
        names.first().cloned().unwrap_or_default(),
    );
    params.distinguished_name = dn;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    // Members are servers to clients and clients to their primary.
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    dated(&mut params, now, MEMBER_VALIDITY)?;
    let cert = params.signed_by(&key, &issuer).map_err(issue_error)?;
    Ok((cert.pem(), key.serialize_pem()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000;

    fn at(t: i64) -> UnixTime {
        UnixTime::since_unix_epoch(Duration::from_secs(t as u64))
    }

    fn issued() -> (Material, String, String) {
        let (ca, ca_key) = issue_ca("cache", "prod", NOW).unwrap();
        let names = member_names("cache", "cache-replicas", "prod");
        let (cert, key) = issue_member(&ca, &ca_key, &names, NOW).unwrap();
        (
            Material {
                cert: cert.into_bytes(),
                key: key.into_bytes(),
                ca: ca.clone().into_bytes(),
            },
            ca,
            ca_key,
        )
    }

    #[test]
    fn an_issued_certificate_verifies_for_the_service_and_is_renewed_a_month_before_it_ends() {
        let (m, _, _) = issued();
        let checked = check(&m, &server_name("cache", "prod"), at(NOW)).unwrap();
        assert_eq!(checked.fingerprint.len(), 64);
        assert_eq!(checked.not_after, NOW + MEMBER_VALIDITY.as_secs() as i64);
        assert!(!renewal_due(checked.not_after, NOW));
        assert!(!renewal_due(checked.not_after, NOW + 59 * 24 * 3600));
        assert!(renewal_due(checked.not_after, NOW + 61 * 24 * 3600));
        // The replicas' Service's names too.
        check(&m, "cache-replicas.prod.svc.cluster.local", at(NOW)).unwrap();
    }

    #[test]
    fn a_secret_that_cannot_work_says_which_key_is_wrong() {
        let (m, ca, ca_key) = issued();
        let name = server_name("cache", "prod");
        // Another certificate's key.
        let (_, other_key) = issue_member(&ca, &ca_key, &["x.prod.svc".to_string()], NOW).unwrap();
        let wrong_key = Material {
            key: other_key.into_bytes(),
            ..m.clone()
        };
        let e = check(&wrong_key, &name, at(NOW)).unwrap_err();
        assert!(
            e.contains("tls.key is not the key of the certificate in tls.crt"),
            "{e}"
        );
        // Another CA.
        let (other_ca, _) = issue_ca("other", "prod", NOW).unwrap();
        let wrong_ca = Material {
            ca: other_ca.into_bytes(),
            ..m.clone()
        };
        let e = check(&wrong_ca, &name, at(NOW)).unwrap_err();
        assert!(
            e.contains("does not verify for cache.prod.svc against ca.crt"),
            "{e}"
        );
        // Another name.
        let e = check(&m, "other.prod.svc", at(NOW)).unwrap_err();
        assert!(e.contains("does not verify for other.prod.svc"), "{e}");
        // Expired.
        let e = check(&m, &name, at(NOW + 91 * 24 * 3600)).unwrap_err();
        assert!(e.contains("does not verify"), "{e}");
        // Empty keys.
        for (broken, key) in [
            (
                Material {
                    cert: Vec::new(),
                    ..m.clone()
                },
                "tls.crt holds no certificate",
            ),
            (
                Material {
                    key: b"junk".to_vec(),
                    ..m.clone()
                },
                "tls.key holds no private key",
            ),
            (
                Material {
                    ca: Vec::new(),
                    ..m.clone()
                },
                "ca.crt holds no CA certificate",
            ),
        ] {
            let e = check(&broken, &name, at(NOW)).unwrap_err();
            assert!(e.contains(key), "{e}");
        }
        assert!(!format!("{m:?}").contains("PRIVATE"));
    }

    #[test]
    fn each_issue_is_a_new_key_under_the_same_ca() {
        let (a, ca, ca_key) = issued();
        let names = member_names("cache", "cache-replicas", "prod");
        let (cert, key) = issue_member(&ca, &ca_key, &names, NOW + 10).unwrap();
        let b = Material {
            cert: cert.into_bytes(),
            key: key.into_bytes(),
            ca: ca.into_bytes(),
        };
        let name = server_name("cache", "prod");
        let (fa, fb) = (
            check(&a, &name, at(NOW + 20)).unwrap().fingerprint,
            check(&b, &name, at(NOW + 20)).unwrap().fingerprint,
        );
        assert_ne!(fa, fb);
        assert_ne!(a.key, b.key);
    }
}
