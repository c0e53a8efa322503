//! TLS and logins for the secured suites: certificates made per test (a CA, a
//! server certificate for 127.0.0.1, a client certificate, and an unrelated CA),
//! and a NATS server that verifies them and knows a node's and a decision
//! publisher's users with the permissions `docs/security.md` lists.

use std::path::PathBuf;

use awaken_cluster::testing::NatsServer;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

/// The password of NATS user `node`.
pub(crate) const NODE_PASSWORD: &str = "node-pw-5f1c9e";
/// The password of NATS user `decider`.
pub(crate) const DECIDER_PASSWORD: &str = "decider-pw-77ab20";

/// What a node may publish and subscribe to (docs/security.md).
pub(crate) const NODE_PERMISSIONS: &str = r#"{
  publish: { allow: ["awaken.>", "$JS.API.>", "$JS.ACK.>", "$JS.FC.>", "$KV.>", "_INBOX.>"] }
  subscribe: { allow: ["awaken.>", "_INBOX.>"] }
}"#;

/// What a decision publisher may: publish decisions, read their JetStream
/// acknowledgements and the rejections (docs/security.md).
pub(crate) const DECIDER_PERMISSIONS: &str = r#"{
  publish: { allow: ["awaken.decisions.>"] }
  subscribe: { allow: ["_INBOX.>", "awaken.advisories.decisions.>"] }
}"#;

/// Certificates made for one test: a CA, a server certificate for 127.0.0.1
/// and a client certificate it signed, and a second, unrelated CA.
pub(crate) struct Pki {
    dir: tempfile::TempDir,
    /// A NATS user's NKey (its seed in `nkey.seed`).
    pub(crate) nkey: nkeys::KeyPair,
}

impl Pki {
    pub(crate) fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let (rogue, _) = authority("someone else's CA");
        std::fs::write(dir.path().join("rogue-ca.pem"), rogue).unwrap();
        let nkey = nkeys::KeyPair::new_user();
        std::fs::write(dir.path().join("nkey.seed"), nkey.seed().unwrap()).unwrap();
        let pki = Self { dir, nkey };
        pki.issue("awaken test CA");
        pki
    }

    /// (Re)writes `ca.pem` and the server and client certificates and keys it
    /// signs, in place: what a certificate manager does when it renews them.
    pub(crate) fn issue(&self, ca_name: &str) {
        let dir = &self.dir;
        let (ca, issuer) = authority(ca_name);
        std::fs::write(dir.path().join("ca.pem"), ca).unwrap();
        for (name, names) in [
            (
                "server",
                vec!["127.0.0.1".to_owned(), "localhost".to_owned()],
            ),
            ("client", vec!["awaken-node".to_owned()]),
        ] {
            let key = KeyPair::generate().unwrap();
            let cert = CertificateParams::new(names)
                .unwrap()
                .signed_by(&key, &issuer)
                .unwrap();
            std::fs::write(dir.path().join(format!("{name}.pem")), cert.pem()).unwrap();
            std::fs::write(
                dir.path().join(format!("{name}-key.pem")),
                key.serialize_pem(),
            )
            .unwrap();
        }
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// A self-signed CA: its certificate (PEM) and the issuer that signs with it.
fn authority(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), Issuer::new(params, key))
}

/// A JetStream server with TLS (client certificates verified) and two users.
pub(crate) async fn secured_nats(pki: &Pki) -> NatsServer {
    let config = format!(
        r#"
tls {{
  cert_file: "{server}"
  key_file: "{server_key}"
  ca_file: "{ca}"
  verify: true
  timeout: 5
}}
authorization {{
  users: [
    {{ user: "node", password: "{NODE_PASSWORD}", permissions: {NODE_PERMISSIONS} }}
    {{ user: "decider", password: "{DECIDER_PASSWORD}", permissions: {DECIDER_PERMISSIONS} }}
    {{ nkey: "{nkey}", permissions: {NODE_PERMISSIONS} }}
  ]
}}
"#,
        server = pki.path("server.pem").display(),
        server_key = pki.path("server-key.pem").display(),
        ca = pki.path("ca.pem").display(),
        nkey = pki.nkey.public_key(),
    );
    NatsServer::start_configured(&config).await.unwrap()
}
