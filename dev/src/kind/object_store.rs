//! An S3-compatible object store in a kind cluster, on request (`kind up
//! --object-store`, `dev --kind --object-store`): versitygw (built from its
//! Go module, [`super::tools::ensure_object_store_tool`]; its image,
//! [`super::images::versitygw_image`]), deployed from our own manifests
//! (`object_store/versitygw.yaml`) into [`NAMESPACE`], serving S3 at
//! [`endpoint`] from its posix backend on a claim of the default
//! StorageClass ([`super::storage`]), so that objects and uploads in
//! progress survive a restart of its Pod.
//!
//! One account, whose keys are in the Secret [`SECRET`] (keys
//! [`ACCESS_KEY_ID`] and [`SECRET_ACCESS_KEY`], as the AWS SDKs' variables
//! are named): random keys made by the first [`install`], kept by every
//! later one. Dev-only: the store has no TLS and one root account.
//!
//! No bucket is created here: a client creates its own with CreateBucket,
//! path-style (the bucket is the first path segment of [`endpoint`]; the
//! store serves no per-bucket host names), in region [`REGION`].
//!
//! [`install`] is idempotent: the same objects are applied again (server-side
//! apply, so that the Secret's keys are not copied into an annotation), the
//! Pod restarted only when the manifests, the image or the keys changed.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;

use super::{Error, cluster, docker, hash, versions as v};

/// The manifests, with `@...@` placeholders.
const MANIFESTS: &str = include_str!("object_store/versitygw.yaml");

/// Where the store, its claim and its credentials live.
pub const NAMESPACE: &str = "podkeeper-objects";
/// The store's Service; S3 on port [`SERVICE_PORT`].
pub const SERVICE: &str = "object-store";
/// The Service's port, in front of the server's [`PORT`].
pub const SERVICE_PORT: u16 = 80;
/// The port versitygw listens on in its Pod.
pub const PORT: u16 = 7070;
/// The store's Deployment (one replica).
pub const DEPLOYMENT: &str = "object-store";
/// The claim holding the buckets (a directory per bucket).
pub const CLAIM: &str = "object-store-data";
/// The Secret with the account's keys.
pub const SECRET: &str = "object-store-credentials";
/// The Secret's key holding the access key ID.
pub const ACCESS_KEY_ID: &str = "AWS_ACCESS_KEY_ID";
/// The Secret's key holding the secret access key.
pub const SECRET_ACCESS_KEY: &str = "AWS_SECRET_ACCESS_KEY";
/// The region requests are signed for (versitygw's default).
pub const REGION: &str = "us-east-1";
/// The bucket made at install (a directory of the posix backend, made by
/// an init container: podkeeper's S3 client makes no buckets).
pub const BUCKET: &str = "podkeeper-backups";

/// The store's address from inside the cluster.
pub fn endpoint() -> String {
    format!("http://{SERVICE}.{NAMESPACE}.svc:{SERVICE_PORT}")
}

/// The account's keys.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .finish()
    }
}

impl Credentials {
    /// New random keys from the thread's CSPRNG, shaped like AWS's: a
    /// 20-character access key ID (capitals and digits) and a 40-character
    /// secret (letters and digits, about 238 bits).
    pub fn generate() -> Self {
        use rand::RngExt;
        const CAPITALS_AND_DIGITS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        let mut rng = rand::rng();
        let access_key_id = (0..20)
            .map(|_| {
                char::from(CAPITALS_AND_DIGITS[rng.random_range(0..CAPITALS_AND_DIGITS.len())])
            })
            .collect();
        let secret_access_key = (&mut rng)
            .sample_iter(rand::distr::Alphanumeric)
            .take(40)
            .map(char::from)
            .collect();
        Credentials {
            access_key_id,
            secret_access_key,
        }
    }
}

/// The keys of an existing Secret, given `kubectl get secret -o json`'s
/// answer (empty when there is none): None unless both keys are there,
/// non-empty and readable, in which case [`install`] makes new ones.
pub fn kept_credentials(secret_json: &str) -> Option<Credentials> {
    let secret: serde_json::Value = serde_json::from_str(secret_json.trim()).ok()?;
    let key = |name: &str| {
        let encoded = secret["data"][name].as_str()?;
        let value = String::from_utf8(BASE64.decode(encoded).ok()?).ok()?;
        (!value.is_empty()).then_some(value)
    };
    Some(Credentials {
        access_key_id: key(ACCESS_KEY_ID)?,
        secret_access_key: key(SECRET_ACCESS_KEY)?,
    })
}

/// The manifests for this image and these keys. `image_id` is the image's
/// ID: with the manifests themselves (keys included) it makes the Pod
/// template's revision annotation, so a change to any of them restarts the
/// server.
pub fn manifests(image: &str, image_id: &str, credentials: &Credentials) -> String {
    let filled = MANIFESTS
        .replace("@NAMESPACE@", NAMESPACE)
        .replace("@SERVICE@", SERVICE)
        .replace("@SERVICE_PORT@", &SERVICE_PORT.to_string())
        .replace("@PORT@", &PORT.to_string())
        .replace("@DEPLOYMENT@", DEPLOYMENT)
        .replace("@CLAIM@", CLAIM)
        .replace("@SECRET@", SECRET)
        .replace("@IMAGE@", image)
        .replace("@HELPER_IMAGE@", &v::local_path_helper_image())
        .replace("@BUCKET@", BUCKET)
        .replace(
            "@ACCESS_KEY_ID_BASE64@",
            &BASE64.encode(&credentials.access_key_id),
        )
        .replace(
            "@SECRET_ACCESS_KEY_BASE64@",
            &BASE64.encode(&credentials.secret_access_key),
        );
    let revision = &hash::short(&format!("{filled}\n{image_id}"))[..16];
    filled.replace("@REVISION@", revision)
}

/// Deploys the object store into cluster `name` (whose nodes have
/// [`super::ensure_object_store_image`]'s image loaded and whose default
/// StorageClass is served, [`super::storage::install`]) and waits for it to
/// be Ready.
pub fn install(name: &str) -> Result<(), Error> {
    let image = v::versitygw_image();
    let image_id = docker::output(&["image", "inspect", "-f", "{{.Id}}", &image])?;
    let existing = cluster::control_plane_kubectl(
        name,
        &[
            "-n",
            NAMESPACE,
            "get",
            "secret",
            SECRET,
            "--ignore-not-found",
            "-o",
            "json",
        ],
    )?;
    let credentials = match kept_credentials(&existing) {
        Some(kept) => kept,
        None => {
            super::progress(&format!(
                "object store: new random keys in Secret {NAMESPACE}/{SECRET}"
            ));
            Credentials::generate()
        }
    };
    super::progress(&format!(
        "object store: versitygw v{} in namespace {NAMESPACE}, Service {SERVICE} (S3 at {})",
        v::VERSITYGW,
        endpoint()
    ));
    cluster::apply(name, &manifests(&image, &image_id, &credentials))?;
    super::progress("waiting for the object store to be Ready");
    let rollout = cluster::control_plane_kubectl(
        name,
        &[
            "-n",
            NAMESPACE,
            "rollout",
            "status",
            &format!("deployment/{DEPLOYMENT}"),
            "--timeout=300s",
        ],
    );
    if let Err(e) = rollout {
        // The server says why it stopped (a volume without extended
        // attributes, a port taken) in its log.
        let logs = cluster::control_plane_kubectl(
            name,
            &[
                "-n",
                NAMESPACE,
                "logs",
                &format!("deployment/{DEPLOYMENT}"),
                "--tail=20",
            ],
        )
        .unwrap_or_else(|e| format!("(no log: {e})"));
        return Err(Error::Step {
            what: "waiting for the object store to be Ready".into(),
            detail: format!(
                "{e}\nits log (`kubectl -n {NAMESPACE} logs deployment/{DEPLOYMENT}`):\n{logs}"
            ),
        });
    }
    super::progress(&format!(
        "object store Ready at {}; keys in Secret {NAMESPACE}/{SECRET} ({ACCESS_KEY_ID}, {SECRET_ACCESS_KEY})",
        endpoint()
    ));
    Ok(())
}

/// How to read the keys, for what `kind up` and `dev --kind` print.
pub fn credentials_hint() -> String {
    format!(
        "kubectl -n {NAMESPACE} get secret {SECRET} -o jsonpath='{{.data.{ACCESS_KEY_ID}}}' | base64 -d (and .data.{SECRET_ACCESS_KEY})"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credentials() -> Credentials {
        Credentials {
            access_key_id: "AKIAEXAMPLE".into(),
            secret_access_key: "s3cret".into(),
        }
    }

    fn documents(text: &str) -> Vec<serde_yaml_ng::Value> {
        text.split("\n---\n")
            .map(|d| serde_yaml_ng::from_str(d).expect("a YAML document"))
            .collect()
    }

    fn find<'a>(docs: &'a [serde_yaml_ng::Value], kind: &str) -> &'a serde_yaml_ng::Value {
        docs.iter()
            .find(|d| d["kind"].as_str() == Some(kind))
            .unwrap_or_else(|| panic!("a {kind}"))
    }

    fn revision(text: &str) -> String {
        let docs = documents(text);
        find(&docs, "Deployment")["spec"]["template"]["metadata"]["annotations"]
            ["podkeeper.dev/object-store-revision"]
            .as_str()
            .unwrap()
            .to_string()
    }

    #[test]
    fn every_placeholder_is_filled_and_every_document_parses() {
        let text = manifests("i:v1", "sha256:1", &credentials());
        assert!(!text.contains('@'), "{text}");
        let docs = documents(&text);
        let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
        // kubectl applies them in this order: the Namespace first, the
        // Secret before the Pods that read it.
        assert_eq!(
            kinds,
            [
                "Namespace",
                "Secret",
                "PersistentVolumeClaim",
                "Deployment",
                "Service"
            ]
        );
        for doc in &docs {
            if doc["kind"] != "Namespace" {
                assert_eq!(doc["metadata"]["namespace"].as_str(), Some(NAMESPACE));
            }
        }
    }

    #[test]
    fn the_secret_holds_the_keys_and_reads_back_as_kept() {
        let text = manifests("i:v1", "sha256:1", &credentials());
        let docs = documents(&text);
        let secret = find(&docs, "Secret");
        assert_eq!(secret["metadata"]["name"].as_str(), Some(SECRET));
        // `kubectl get -o json` of what was applied gives the same keys back.
        let json = serde_json::to_string(secret).unwrap();
        assert_eq!(kept_credentials(&json), Some(credentials()));
    }

    #[test]
    fn the_server_reads_its_keys_from_the_secret_and_keeps_its_data_on_the_claim() {
        let docs = documents(&manifests("i:v1", "sha256:1", &credentials()));
        let deployment = find(&docs, "Deployment");
        assert_eq!(deployment["spec"]["replicas"].as_i64(), Some(1));
        assert_eq!(
            deployment["spec"]["strategy"]["type"].as_str(),
            Some("Recreate")
        );
        let pod = &deployment["spec"]["template"]["spec"];
        let container = &pod["containers"][0];
        assert_eq!(container["image"].as_str(), Some("i:v1"));
        assert_eq!(container["imagePullPolicy"].as_str(), Some("Never"));
        let args: Vec<&str> = container["args"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(args, ["--port", ":7070", "posix", "/data"]);
        let env = container["env"].as_sequence().unwrap();
        let from_secret = |var: &str| {
            let e = env
                .iter()
                .find(|e| e["name"].as_str() == Some(var))
                .unwrap();
            let r = &e["valueFrom"]["secretKeyRef"];
            (
                r["name"].as_str().unwrap().to_string(),
                r["key"].as_str().unwrap().to_string(),
            )
        };
        assert_eq!(
            from_secret("ROOT_ACCESS_KEY_ID"),
            (SECRET.into(), ACCESS_KEY_ID.into())
        );
        assert_eq!(
            from_secret("ROOT_SECRET_ACCESS_KEY"),
            (SECRET.into(), SECRET_ACCESS_KEY.into())
        );
        assert_eq!(container["ports"][0]["containerPort"].as_i64(), Some(7070));
        assert_eq!(
            container["readinessProbe"]["tcpSocket"]["port"].as_str(),
            Some("s3")
        );
        assert_eq!(
            container["volumeMounts"][0]["mountPath"].as_str(),
            Some("/data")
        );
        assert_eq!(
            pod["volumes"][0]["persistentVolumeClaim"]["claimName"].as_str(),
            Some(CLAIM)
        );
        assert_eq!(pod["securityContext"]["runAsUser"].as_i64(), Some(65532));
        // The default StorageClass's claim.
        assert!(find(&docs, "PersistentVolumeClaim")["spec"]["storageClassName"].is_null());
    }

    #[test]
    fn the_service_serves_the_endpoint() {
        let docs = documents(&manifests("i:v1", "sha256:1", &credentials()));
        let service = find(&docs, "Service");
        assert_eq!(service["metadata"]["name"].as_str(), Some(SERVICE));
        assert_eq!(service["spec"]["ports"][0]["port"].as_i64(), Some(80));
        assert_eq!(
            service["spec"]["ports"][0]["targetPort"].as_str(),
            Some("s3")
        );
        assert_eq!(
            service["spec"]["selector"],
            find(&docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
        );
        assert_eq!(endpoint(), "http://object-store.podkeeper-objects.svc:80");
    }

    #[test]
    fn the_revision_follows_the_image_and_the_keys() {
        let base = revision(&manifests("i:v1", "sha256:1", &credentials()));
        assert_eq!(
            base,
            revision(&manifests("i:v1", "sha256:1", &credentials()))
        );
        assert_ne!(
            base,
            revision(&manifests("i:v1", "sha256:2", &credentials()))
        );
        let mut other = credentials();
        other.secret_access_key = "another".into();
        assert_ne!(base, revision(&manifests("i:v1", "sha256:1", &other)));
    }

    #[test]
    fn only_a_secret_with_both_keys_is_kept() {
        assert_eq!(kept_credentials(""), None);
        let secret = |data: serde_json::Value| {
            serde_json::json!({"kind": "Secret", "data": data}).to_string()
        };
        let both = secret(serde_json::json!({
            ACCESS_KEY_ID: BASE64.encode("AKIAEXAMPLE"),
            SECRET_ACCESS_KEY: BASE64.encode("s3cret"),
        }));
        assert_eq!(kept_credentials(&both), Some(credentials()));
        let one = secret(serde_json::json!({ ACCESS_KEY_ID: BASE64.encode("AKIAEXAMPLE") }));
        assert_eq!(kept_credentials(&one), None);
        let empty = secret(serde_json::json!({
            ACCESS_KEY_ID: "",
            SECRET_ACCESS_KEY: BASE64.encode("s3cret"),
        }));
        assert_eq!(kept_credentials(&empty), None);
        let garbled = secret(serde_json::json!({
            ACCESS_KEY_ID: "not base64!",
            SECRET_ACCESS_KEY: BASE64.encode("s3cret"),
        }));
        assert_eq!(kept_credentials(&garbled), None);
    }

    #[test]
    fn generated_keys_are_random_and_shaped_like_aws_keys() {
        let a = Credentials::generate();
        let b = Credentials::generate();
        assert_ne!(a, b);
        assert_eq!(a.access_key_id.len(), 20);
        assert!(
            a.access_key_id
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
        );
        assert_eq!(a.secret_access_key.len(), 40);
        assert!(
            a.secret_access_key
                .chars()
                .all(|c| c.is_ascii_alphanumeric())
        );
        assert!(!format!("{a:?}").contains(&a.secret_access_key));
    }
}
