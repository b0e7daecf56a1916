//! The ServiceAccount token keys: an ECDSA P-256 private key signs (ES256), its public keys
//! verify. Files are PEM: PKCS#8 `PRIVATE KEY` for signing (`--service-account-signing-key-file`),
//! `PUBLIC KEY` (or the private key itself) for verifying (`--service-account-key-file`), as
//! kube-apiserver reads them. A key's ID is Kubernetes' `keyIDFromPublicKey`: the unpadded
//! base64url SHA-256 of its PKIX DER.

use base64::Engine as _;
use jsonwebtoken::{DecodingKey, EncodingKey};
use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {why}")]
    Key { path: PathBuf, why: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// SubjectPublicKeyInfo header of an uncompressed P-256 point (id-ecPublicKey, prime256v1).
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce,
    0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// A verification key: the uncompressed point and its key ID.
#[derive(Clone, Debug)]
pub struct PublicKey {
    pub kid: String,
    pub point: Vec<u8>,
}

impl PublicKey {
    fn from_point(point: Vec<u8>) -> Self {
        let mut der = P256_SPKI_PREFIX.to_vec();
        der.extend_from_slice(&point);
        let digest = ring::digest::digest(&ring::digest::SHA256, &der);
        Self { kid: base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest.as_ref()), point }
    }

    pub fn decoding_key(&self) -> DecodingKey {
        DecodingKey::from_ec_der(&self.point)
    }

    /// The PEM of the key (`PUBLIC KEY`), as the files carry it.
    pub fn to_pem(&self) -> String {
        let mut der = P256_SPKI_PREFIX.to_vec();
        der.extend_from_slice(&self.point);
        pem::encode(&pem::Pem::new("PUBLIC KEY", der))
    }
}

/// The signing key.
pub struct SigningKey {
    pub encoding: EncodingKey,
    pub public: PublicKey,
}

/// Only the key ID: the private key is never printed.
impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey").field("kid", &self.public.kid).finish_non_exhaustive()
    }
}

fn key_err(path: &Path, why: impl Into<String>) -> Error {
    Error::Key { path: path.to_path_buf(), why: why.into() }
}

fn read_pems(path: &Path) -> Result<Vec<pem::Pem>> {
    let bytes = std::fs::read(path).map_err(|source| Error::Read { path: path.to_path_buf(), source })?;
    let pems = pem::parse_many(&bytes).map_err(|e| key_err(path, format!("not PEM: {e}")))?;
    if pems.is_empty() {
        return Err(key_err(path, "no PEM block found"));
    }
    Ok(pems)
}

fn pkcs8_keypair(der: &[u8]) -> std::result::Result<EcdsaKeyPair, String> {
    EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, der, &ring::rand::SystemRandom::new())
        .map_err(|e| format!("not an ECDSA P-256 PKCS#8 private key ({e})"))
}

/// A signing key from PKCS#8 DER.
pub fn signing_key_from_pkcs8(der: &[u8]) -> std::result::Result<SigningKey, String> {
    let pair = pkcs8_keypair(der)?;
    Ok(SigningKey {
        encoding: EncodingKey::from_ec_der(der),
        public: PublicKey::from_point(pair.public_key().as_ref().to_vec()),
    })
}

/// `--service-account-signing-key-file`.
pub fn load_signing_key(path: &Path) -> Result<SigningKey> {
    let pems = read_pems(path)?;
    let p = pems
        .iter()
        .find(|p| p.tag() == "PRIVATE KEY")
        .ok_or_else(|| key_err(path, "no \"PRIVATE KEY\" block: only ECDSA P-256 keys in PKCS#8 PEM are supported"))?;
    signing_key_from_pkcs8(p.contents()).map_err(|why| key_err(path, why))
}

/// `--service-account-key-file`: every public key in the file (private keys count by their public half).
pub fn load_public_keys(path: &Path) -> Result<Vec<PublicKey>> {
    let mut out = Vec::new();
    for p in read_pems(path)? {
        match p.tag() {
            "PUBLIC KEY" => {
                let der = p.contents();
                let point = der
                    .strip_prefix(&P256_SPKI_PREFIX[..])
                    .filter(|pt| pt.len() == 65)
                    .ok_or_else(|| key_err(path, "only ECDSA P-256 public keys are supported"))?;
                out.push(PublicKey::from_point(point.to_vec()));
            }
            "PRIVATE KEY" => out.push(signing_key_from_pkcs8(p.contents()).map_err(|why| key_err(path, why))?.public),
            _ => {}
        }
    }
    if out.is_empty() {
        return Err(key_err(path, "no PUBLIC KEY or PRIVATE KEY block"));
    }
    Ok(out)
}

/// A new key pair as (PKCS#8 `PRIVATE KEY` PEM, `PUBLIC KEY` PEM): what `kaji pki init` writes as
/// `sa.key` and `sa.pub`.
pub fn generate_pem() -> std::result::Result<(String, String), String> {
    let rng = ring::rand::SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).map_err(|e| e.to_string())?;
    let key = signing_key_from_pkcs8(pkcs8.as_ref())?;
    Ok((pem::encode(&pem::Pem::new("PRIVATE KEY", pkcs8.as_ref().to_vec())), key.public.to_pem()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_load_back_with_one_key_id() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (private, public) = generate_pem().expect("generate");
        std::fs::write(dir.path().join("sa.key"), &private).expect("write");
        std::fs::write(dir.path().join("sa.pub"), &public).expect("write");
        let signing = load_signing_key(&dir.path().join("sa.key")).expect("loads");
        let from_pub = load_public_keys(&dir.path().join("sa.pub")).expect("loads");
        let from_priv = load_public_keys(&dir.path().join("sa.key")).expect("loads");
        assert_eq!(from_pub[0].kid, signing.public.kid);
        assert_eq!(from_priv[0].point, signing.public.point);
        assert_eq!(signing.public.kid.len(), 43, "unpadded base64url of 32 bytes");
    }

    #[test]
    fn other_files_are_refused_with_the_reason() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("k");
        std::fs::write(&f, "not a key").expect("write");
        assert!(load_signing_key(&f).expect_err("not pem").to_string().contains("PEM"));
        std::fs::write(&f, pem::encode(&pem::Pem::new("PRIVATE KEY", vec![1, 2, 3]))).expect("write");
        assert!(load_signing_key(&f).expect_err("garbage").to_string().contains("P-256 PKCS#8"));
    }
}
