//! Certificates and keys for a throwaway local cluster: one CA, the
//! apiserver's serving certificate, an admin client certificate in
//! `system:masters`, one each for an operator under test and for
//! kube-controller-manager (so that their requests can be told apart in the
//! audit log), and the service-account signing key.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

use super::Error;

/// The user of the second client identity, for an operator under test.
pub const OPERATOR_USER: &str = "podkeeper-operator";
/// kube-controller-manager's user.
pub const CONTROLLER_MANAGER_USER: &str = "system:kube-controller-manager";

/// Paths of the PEM files written by [`generate`].
#[derive(Clone, Debug)]
pub struct Pki {
    pub ca_cert: PathBuf,
    pub serving_cert: PathBuf,
    pub serving_key: PathBuf,
    pub admin_cert: PathBuf,
    pub admin_key: PathBuf,
    pub operator_cert: PathBuf,
    pub operator_key: PathBuf,
    pub controller_manager_cert: PathBuf,
    pub controller_manager_key: PathBuf,
    pub service_account_key: PathBuf,
    pub service_account_pub: PathBuf,
}

fn pki_error(e: rcgen::Error) -> Error {
    Error::Startup {
        component: "pki".into(),
        detail: e.to_string(),
    }
}

fn name(common_name: &str, organization: Option<&str>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    if let Some(o) = organization {
        dn.push(DnType::OrganizationName, o);
    }
    dn
}

/// Writes a fresh PKI into `dir`.
pub fn generate(dir: &Path) -> Result<Pki, Error> {
    let ca_key = KeyPair::generate().map_err(pki_error)?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(pki_error)?;
    ca_params.distinguished_name = name("podkeeper-local-ca", None);
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key).map_err(pki_error)?;
    let issuer = Issuer::new(ca_params, &ca_key);

    let serving_key = KeyPair::generate().map_err(pki_error)?;
    let mut serving = CertificateParams::new(vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "kubernetes".to_string(),
        "kubernetes.default".to_string(),
        "kubernetes.default.svc".to_string(),
        "kubernetes.default.svc.cluster.local".to_string(),
        "10.96.0.1".to_string(),
    ])
    .map_err(pki_error)?;
    serving.distinguished_name = name("kube-apiserver", None);
    serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let serving_cert = serving
        .signed_by(&serving_key, &issuer)
        .map_err(pki_error)?;

    let client = |user: &str| -> Result<(String, String), Error> {
        let key = KeyPair::generate().map_err(pki_error)?;
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(pki_error)?;
        params.distinguished_name = name(user, Some("system:masters"));
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params.signed_by(&key, &issuer).map_err(pki_error)?;
        Ok((cert.pem(), key.serialize_pem()))
    };
    let (admin_cert, admin_key) = client("podkeeper-admin")?;

    let (operator_cert, operator_key) = client(OPERATOR_USER)?;
    let (kcm_cert, kcm_key) = client(CONTROLLER_MANAGER_USER)?;

    let sa_key = KeyPair::generate().map_err(pki_error)?;

    let pki = Pki {
        ca_cert: dir.join("ca.crt"),
        serving_cert: dir.join("apiserver.crt"),
        serving_key: dir.join("apiserver.key"),
        admin_cert: dir.join("admin.crt"),
        admin_key: dir.join("admin.key"),
        operator_cert: dir.join("operator.crt"),
        operator_key: dir.join("operator.key"),
        controller_manager_cert: dir.join("controller-manager.crt"),
        controller_manager_key: dir.join("controller-manager.key"),
        service_account_key: dir.join("sa.key"),
        service_account_pub: dir.join("sa.pub"),
    };
    let files = [
        (&pki.ca_cert, ca_cert.pem()),
        (&pki.serving_cert, serving_cert.pem()),
        (&pki.serving_key, serving_key.serialize_pem()),
        (&pki.admin_cert, admin_cert),
        (&pki.admin_key, admin_key),
        (&pki.operator_cert, operator_cert),
        (&pki.operator_key, operator_key),
        (&pki.controller_manager_cert, kcm_cert),
        (&pki.controller_manager_key, kcm_key),
        (&pki.service_account_key, sa_key.serialize_pem()),
        (&pki.service_account_pub, sa_key.public_key_pem()),
    ];
    for (path, pem) in files {
        std::fs::write(path, pem)
            .map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
    }
    Ok(pki)
}
