//! Encryption at rest, as kube-apiserver's `--encryption-provider-config`: an
//! `EncryptionConfiguration` (apiserver.config.k8s.io/v1) names resources and, for each, a list of
//! providers. Writes use the first provider; reads try every provider whose prefix the stored value
//! carries, so keys can be rotated. Values are stored in Kubernetes' format:
//! `k8s:enc:aesgcm:v1:<key name>:` + 12-byte random nonce + AES-GCM(value), the store key as the
//! authenticated data (a value copied to another key does not decrypt). `identity` stores plain
//! JSON and reads anything without an encryption prefix.
//!
//! [`EncryptedStore`] wraps any [`Store`]: nothing above the trait, and no backend below it, knows.

use super::{Error, Event, KeyValue, Result, Store, StoreSize, WatchStream};
use kaji_api::resources::RESOURCES;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM, AES_256_GCM, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use serde::Deserialize;
use std::path::Path;
use std::sync::Arc;

const ENC_PREFIX: &[u8] = b"k8s:enc:";

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConfigFile {
    api_version: Option<String>,
    kind: Option<String>,
    #[serde(default)]
    resources: Vec<ResourceConfig>,
}

#[derive(Deserialize)]
struct ResourceConfig {
    resources: Vec<String>,
    providers: Vec<serde_json::Value>,
}

#[derive(Deserialize)]
struct KeysConfig {
    keys: Vec<KeyConfig>,
}

#[derive(Deserialize)]
struct KeyConfig {
    name: String,
    secret: String,
}

/// One provider of a resource's list.
enum Provider {
    Identity,
    /// AES-GCM keys, in the order given (the first encrypts).
    AesGcm(Vec<(String, LessSafeKey)>),
}

impl Provider {
    fn parse(v: &serde_json::Value, at: &str) -> Result<Self, String> {
        let obj = v.as_object().filter(|o| o.len() == 1).ok_or(format!("{at}: a provider names exactly one type"))?;
        let (kind, body) = obj.iter().next().ok_or(format!("{at}: empty provider"))?;
        match kind.as_str() {
            "identity" => Ok(Provider::Identity),
            "aesgcm" => {
                let keys: KeysConfig = serde_json::from_value(body.clone()).map_err(|e| format!("{at}.aesgcm: {e}"))?;
                if keys.keys.is_empty() {
                    return Err(format!("{at}.aesgcm.keys: at least one key is required"));
                }
                let mut out = Vec::new();
                for (i, k) in keys.keys.into_iter().enumerate() {
                    let at = format!("{at}.aesgcm.keys[{i}]");
                    if k.name.is_empty() || k.name.contains(':') {
                        return Err(format!("{at}.name: must be non-empty and without ':'"));
                    }
                    if out.iter().any(|(n, _)| *n == k.name) {
                        return Err(format!("{at}.name: {:?} is used twice", k.name));
                    }
                    use base64::Engine as _;
                    let secret = base64::engine::general_purpose::STANDARD
                        .decode(k.secret.trim())
                        .map_err(|e| format!("{at}.secret: not base64: {e}"))?;
                    let alg = match secret.len() {
                        16 => &AES_128_GCM,
                        32 => &AES_256_GCM,
                        n => return Err(format!("{at}.secret: an AES-GCM key is 16 or 32 bytes, this one is {n}")),
                    };
                    let key = UnboundKey::new(alg, &secret).map_err(|_| format!("{at}.secret: not a valid key"))?;
                    out.push((k.name, LessSafeKey::new(key)));
                }
                Ok(Provider::AesGcm(out))
            }
            other @ ("aescbc" | "secretbox" | "kms") => {
                Err(format!("{at}: provider {other:?} is not supported by kaji; use aesgcm (or identity)"))
            }
            other => Err(format!("{at}: unknown provider {other:?}")),
        }
    }
}

/// Which keys one `resources` entry covers: store key prefixes, or everything (`*.*`).
enum Selection {
    All,
    Prefixes(Vec<String>),
}

impl Selection {
    fn parse(names: &[String], at: &str) -> Result<Self, String> {
        let mut prefixes = Vec::new();
        for name in names {
            if name == "*.*" {
                return Ok(Selection::All);
            }
            let (plural, group) = name.split_once('.').unwrap_or((name.as_str(), ""));
            let matching: Vec<_> = RESOURCES
                .iter()
                .filter(|r| (plural == "*" || r.plural == plural) && r.group == group && !r.plural.contains('/'))
                .collect();
            if matching.is_empty() {
                return Err(format!(
                    "{at}: unknown resource {name:?} (write <plural>.<group>, e.g. secrets or deployments.apps)"
                ));
            }
            prefixes.extend(matching.iter().map(|r| r.key_prefix()));
        }
        Ok(Selection::Prefixes(prefixes))
    }

    fn covers(&self, key: &str) -> bool {
        match self {
            Selection::All => true,
            Selection::Prefixes(p) => p.iter().any(|p| key.starts_with(p.as_str())),
        }
    }
}

/// A parsed `EncryptionConfiguration`.
pub struct Encryption {
    rules: Vec<(Selection, Vec<Provider>)>,
    rng: SystemRandom,
}

impl Encryption {
    /// Reads `--encryption-provider-config` (YAML or JSON).
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let file: ConfigFile =
            serde_saphyr::from_str(text).map_err(|e| format!("not an EncryptionConfiguration: {e}"))?;
        if file.kind.as_deref() != Some("EncryptionConfiguration")
            || !matches!(
                file.api_version.as_deref(),
                Some("apiserver.config.k8s.io/v1" | "apiserver.config.k8s.io/v1beta1")
            )
        {
            return Err("expected apiVersion apiserver.config.k8s.io/v1, kind EncryptionConfiguration".into());
        }
        let mut rules = Vec::new();
        for (i, r) in file.resources.iter().enumerate() {
            let at = format!("resources[{i}]");
            if r.providers.is_empty() {
                return Err(format!("{at}.providers: at least one provider is required"));
            }
            let providers = r
                .providers
                .iter()
                .enumerate()
                .map(|(j, p)| Provider::parse(p, &format!("{at}.providers[{j}]")))
                .collect::<Result<Vec<_>, _>>()?;
            rules.push((Selection::parse(&r.resources, &format!("{at}.resources"))?, providers));
        }
        Ok(Self { rules, rng: SystemRandom::new() })
    }

    /// The providers for `key`: the first entry that covers it (none: stored as is).
    fn providers(&self, key: &str) -> Option<&[Provider]> {
        self.rules.iter().find(|(sel, _)| sel.covers(key)).map(|(_, p)| p.as_slice())
    }

    /// What is stored for `value` at `key`.
    pub fn encrypt(&self, key: &str, value: &[u8]) -> Result<Vec<u8>> {
        let Some(first) = self.providers(key).and_then(<[Provider]>::first) else { return Ok(value.to_vec()) };
        match first {
            Provider::Identity => Ok(value.to_vec()),
            Provider::AesGcm(keys) => {
                let (name, k) = &keys[0];
                let mut nonce = [0u8; NONCE_LEN];
                self.rng.fill(&mut nonce).map_err(|_| Error::Backend("no random nonce for encryption".into()))?;
                let mut sealed = value.to_vec();
                k.seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(key.as_bytes()), &mut sealed)
                    .map_err(|_| Error::Backend(format!("encrypting {key} failed")))?;
                let mut out = format!("k8s:enc:aesgcm:v1:{name}:").into_bytes();
                out.extend_from_slice(&nonce);
                out.extend_from_slice(&sealed);
                Ok(out)
            }
        }
    }

    /// The value stored at `key`, decrypted.
    pub fn decrypt(&self, key: &str, stored: &[u8]) -> Result<Vec<u8>> {
        self.decrypt_checked(key, stored).map(|(plain, _)| plain)
    }

    /// The value stored at `key`, decrypted, and whether it is stale: written by another provider
    /// or key than the first, the one that writes now (Kubernetes' `stale` from its transformers).
    pub fn decrypt_checked(&self, key: &str, stored: &[u8]) -> Result<(Vec<u8>, bool)> {
        let providers = self.providers(key).unwrap_or(&[]);
        let encrypted = stored.starts_with(ENC_PREFIX);
        if !encrypted && (providers.is_empty() || providers.iter().any(|p| matches!(p, Provider::Identity))) {
            let stale = providers.first().is_some_and(|p| !matches!(p, Provider::Identity));
            return Ok((stored.to_vec(), stale));
        }
        for (i, p) in providers.iter().enumerate() {
            let Provider::AesGcm(keys) = p else { continue };
            for (j, (name, k)) in keys.iter().enumerate() {
                let prefix = format!("k8s:enc:aesgcm:v1:{name}:");
                let Some(rest) = stored.strip_prefix(prefix.as_bytes()) else { continue };
                if rest.len() < NONCE_LEN {
                    return Err(Error::Backend(format!("{key}: encrypted value too short")));
                }
                let (nonce, sealed) = rest.split_at(NONCE_LEN);
                let nonce =
                    Nonce::try_assume_unique_for_key(nonce).map_err(|_| Error::Backend(format!("{key}: bad nonce")))?;
                let mut buf = sealed.to_vec();
                let plain = k
                    .open_in_place(nonce, Aad::from(key.as_bytes()), &mut buf)
                    .map_err(|_| Error::Backend(format!("{key}: decryption with key {name:?} failed")))?;
                return Ok((plain.to_vec(), i != 0 || j != 0));
            }
        }
        Err(Error::Backend(format!("{key}: no matching prefix found to decrypt it (which provider and key wrote it?)")))
    }
}

/// A [`Store`] whose values are encrypted per an [`Encryption`] on the way in and decrypted on
/// the way out (get, list, delete's previous value, watch events).
pub struct EncryptedStore {
    inner: Arc<dyn Store>,
    enc: Arc<Encryption>,
}

impl EncryptedStore {
    pub fn new(inner: Arc<dyn Store>, enc: Encryption) -> Self {
        Self { inner, enc: Arc::new(enc) }
    }

    fn open(&self, kv: KeyValue) -> Result<KeyValue> {
        let (value, stale) = self.enc.decrypt_checked(&kv.key, &kv.value)?;
        Ok(KeyValue { value: value.into(), stale, ..kv })
    }
}

/// What a reader of many values gets for one that cannot be decrypted (a removed key, a
/// corrupted value): logged and left out of lists, an empty value in watch events (readers skip
/// it as undecodable) — one such value must not stop the cache, and with it the apiserver, or
/// every other object's events. Reading it alone (GET) is still an error.
fn unreadable(key: &str, err: &Error) {
    tracing::error!(key, error = %err, "cannot decrypt a stored value; leaving it out");
}

fn open_event(enc: &Encryption, e: Event) -> Event {
    if e.key.is_empty() {
        return e;
    }
    let open = |v: &Arc<[u8]>| match enc.decrypt(&e.key, v) {
        Ok(plain) => Arc::from(plain),
        Err(err) => {
            unreadable(&e.key, &err);
            Arc::from(Vec::new())
        }
    };
    let value = if e.value.is_empty() { e.value.clone() } else { open(&e.value) };
    let prev = e.prev.as_ref().map(open);
    Event { value, prev, ..e }
}

impl Store for EncryptedStore {
    fn current_revision(&self) -> u64 {
        self.inner.current_revision()
    }

    fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        self.inner.get(key)?.map(|kv| self.open(kv)).transpose()
    }

    fn list(&self, prefix: &str) -> Result<(Vec<KeyValue>, u64)> {
        let (items, rev) = self.inner.list(prefix)?;
        let open = |kv: KeyValue| {
            let key = kv.key.clone();
            self.open(kv).map_err(|err| unreadable(&key, &err)).ok()
        };
        Ok((items.into_iter().filter_map(open).collect(), rev))
    }

    fn create(&self, key: &str, value: &[u8]) -> Result<u64> {
        self.inner.create(key, &self.enc.encrypt(key, value)?)
    }

    fn update(&self, key: &str, value: &[u8], expected: u64) -> Result<u64> {
        self.inner.update(key, &self.enc.encrypt(key, value)?, expected)
    }

    fn delete(&self, key: &str, expected: Option<u64>) -> Result<(u64, KeyValue)> {
        let (rev, kv) = self.inner.delete(key, expected)?;
        // Deleted is deleted: a value that cannot be decrypted comes back as stored.
        match self.open(kv.clone()) {
            Ok(opened) => Ok((rev, opened)),
            Err(err) => {
                unreadable(key, &err);
                Ok((rev, kv))
            }
        }
    }

    fn watch(&self, prefix: &str, after: u64) -> Result<WatchStream> {
        let mut inner = self.inner.watch(prefix, after)?;
        let (tx, rx) = tokio::sync::mpsc::channel(inner.max_capacity());
        let enc = self.enc.clone();
        let handle = tokio::runtime::Handle::try_current()
            .map_err(|_| Error::Backend("an encrypted store's watch needs the tokio runtime".into()))?;
        handle.spawn(async move {
            while let Some(item) = inner.recv().await {
                if tx.send(item.map(|e| open_event(&enc, e))).await.is_err() {
                    return;
                }
            }
        });
        Ok(rx)
    }

    fn compact(&self, revision: u64) -> Result<()> {
        self.inner.compact(revision)
    }

    fn compacted_revision(&self) -> u64 {
        self.inner.compacted_revision()
    }

    fn size(&self) -> Option<StoreSize> {
        self.inner.size()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY1: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="; // 32 bytes
    const KEY2: &str = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA="; // 32 bytes

    fn config(providers: &str) -> String {
        format!(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n  - resources: [secrets]\n    providers:\n{providers}"
        )
    }

    fn aesgcm(names: &[(&str, &str)]) -> String {
        let keys: String =
            names.iter().map(|(n, s)| format!("            - name: {n}\n              secret: {s}\n")).collect();
        format!("      - aesgcm:\n          keys:\n{keys}")
    }

    const SECRET: &str = "/registry/secrets/default/db";

    #[test]
    fn secrets_are_sealed_in_kubernetes_format_and_read_back() {
        let enc = Encryption::parse(&config(&aesgcm(&[("key1", KEY1)]))).expect("config");
        let plain = br#"{"data":{"password":"aHVudGVyMg=="}}"#;
        let stored = enc.encrypt(SECRET, plain).expect("encrypt");
        assert!(stored.starts_with(b"k8s:enc:aesgcm:v1:key1:"), "{}", String::from_utf8_lossy(&stored));
        assert!(!stored.windows(8).any(|w| w == b"password"), "no plaintext at rest");
        assert_eq!(stored.len(), "k8s:enc:aesgcm:v1:key1:".len() + 12 + plain.len() + 16);
        assert_eq!(enc.decrypt(SECRET, &stored).expect("decrypt"), plain);
        assert_ne!(enc.encrypt(SECRET, plain).expect("again"), stored, "a fresh nonce each time");
        // The key is the authenticated data: the same bytes under another key do not open.
        assert!(enc.decrypt("/registry/secrets/default/other", &stored).is_err());
        // Resources the config does not name are stored as they are.
        let cm = "/registry/configmaps/default/x";
        assert_eq!(enc.encrypt(cm, plain).expect("plain"), plain);
        assert_eq!(enc.decrypt(cm, plain).expect("plain"), plain);
    }

    #[test]
    fn keys_rotate_and_identity_reads_what_was_stored_before() {
        let old = Encryption::parse(&config(&aesgcm(&[("key1", KEY1)]))).expect("config");
        let sealed_by_key1 = old.encrypt(SECRET, b"{}").expect("encrypt");
        // key2 first now: new writes use it, key1's values still read.
        let rotated = Encryption::parse(&config(&format!(
            "{}      - identity: {{}}\n",
            aesgcm(&[("key2", KEY2), ("key1", KEY1)])
        )))
        .expect("config");
        assert_eq!(rotated.decrypt(SECRET, &sealed_by_key1).expect("old key reads"), b"{}");
        assert!(rotated.encrypt(SECRET, b"{}").expect("encrypt").starts_with(b"k8s:enc:aesgcm:v1:key2:"));
        assert_eq!(rotated.decrypt(SECRET, b"{\"plain\":1}").expect("identity reads plaintext"), b"{\"plain\":1}");
        // Without identity, plaintext or an unknown key is an error, not garbage.
        assert!(old.decrypt(SECRET, b"{}").is_err());
        let only_key2 = Encryption::parse(&config(&aesgcm(&[("key2", KEY2)]))).expect("config");
        let err = only_key2.decrypt(SECRET, &sealed_by_key1).expect_err("key1 is gone");
        assert!(err.to_string().contains("no matching prefix"), "{err}");
        // identity first: writes go in plain again.
        let back = Encryption::parse(&config(&format!("      - identity: {{}}\n{}", aesgcm(&[("key1", KEY1)]))))
            .expect("config");
        assert_eq!(back.encrypt(SECRET, b"{}").expect("plain"), b"{}");
        assert_eq!(back.decrypt(SECRET, &sealed_by_key1).expect("still reads"), b"{}");
    }

    #[test]
    fn values_not_written_by_the_first_provider_and_key_are_stale() {
        let key1 = Encryption::parse(&config(&aesgcm(&[("key1", KEY1)]))).expect("config");
        let sealed_by_key1 = key1.encrypt(SECRET, b"{}").expect("encrypt");
        assert!(!key1.decrypt_checked(SECRET, &sealed_by_key1).expect("reads").1);
        let rotated = Encryption::parse(&config(&format!(
            "{}      - identity: {{}}\n",
            aesgcm(&[("key2", KEY2), ("key1", KEY1)])
        )))
        .expect("config");
        assert!(rotated.decrypt_checked(SECRET, &sealed_by_key1).expect("old key").1, "an older key");
        assert!(rotated.decrypt_checked(SECRET, b"{}").expect("identity").1, "plaintext under an encrypting config");
        let fresh = rotated.encrypt(SECRET, b"{}").expect("encrypt");
        assert!(!rotated.decrypt_checked(SECRET, &fresh).expect("reads").1);
        let plain = Encryption::parse(&config("      - identity: {}\n")).expect("config");
        assert!(!plain.decrypt_checked(SECRET, b"{}").expect("reads").1);
        assert!(!plain.decrypt_checked("/registry/configmaps/default/x", b"{}").expect("reads").1);
    }

    #[tokio::test]
    async fn a_value_that_cannot_be_decrypted_stops_nothing_else() {
        let dir = tempfile::tempdir().expect("tempdir");
        let inner: Arc<dyn Store> = Arc::new(super::super::redb::RedbStore::open(dir.path()).expect("open"));
        let with = |keys: &[(&str, &str)]| {
            EncryptedStore::new(inner.clone(), Encryption::parse(&config(&aesgcm(keys))).expect("config"))
        };
        let old = with(&[("key1", KEY1)]);
        old.create("/registry/secrets/default/a", b"{\"a\":1}").expect("create");
        let store = with(&[("key2", KEY2)]);
        store.create("/registry/secrets/default/b", b"{\"b\":1}").expect("create");
        let mut watch = store.watch("/registry/", store.current_revision()).expect("watch");
        // A list leaves the unreadable value out; reading it alone is an error.
        let (items, _) = store.list("/registry/").expect("the list still answers");
        assert_eq!(items.iter().map(|kv| kv.key.as_str()).collect::<Vec<_>>(), ["/registry/secrets/default/b"]);
        assert!(store.get("/registry/secrets/default/a").is_err());
        // Its events arrive empty and the stream goes on; deleting it works.
        old.update(
            "/registry/secrets/default/a",
            b"{\"a\":2}",
            inner.get("/registry/secrets/default/a").expect("g").expect("kv").mod_revision,
        )
        .expect("update");
        let ev = watch.recv().await.expect("event").expect("not an error");
        assert!(ev.value.is_empty());
        store.delete("/registry/secrets/default/a", None).expect("deleted");
        store
            .update(
                "/registry/secrets/default/b",
                b"{\"b\":2}",
                store.get("/registry/secrets/default/b").expect("g").expect("kv").mod_revision,
            )
            .expect("update");
        let _deleted = watch.recv().await.expect("event").expect("not an error");
        let ev = watch.recv().await.expect("event").expect("not an error");
        assert_eq!(&*ev.value, b"{\"b\":2}");
    }

    #[test]
    fn bad_configurations_say_what_is_wrong() {
        let cases = [
            (config(&aesgcm(&[("key1", "c2hvcnQ=")])), "16 or 32 bytes"),
            (config(&aesgcm(&[("key1", "abc$def")])), "not base64"),
            (config(&aesgcm(&[("a", KEY1), ("a", KEY2)])), "used twice"),
            (config("      - aescbc:\n          keys: []\n"), "not supported"),
            (config("      - rot13: {}\n"), "unknown provider"),
            (config(""), "providers"),
            ("kind: Pod\n".to_string(), "EncryptionConfiguration"),
            (config(&aesgcm(&[("key1", KEY1)])).replace("[secrets]", "[sekrets]"), "unknown resource"),
        ];
        for (text, want) in cases {
            let err = Encryption::parse(&text).err().unwrap_or_else(|| panic!("accepted:\n{text}"));
            assert!(err.contains(want), "{err} (wanted {want:?})");
        }
    }

    #[test]
    fn wildcards_and_groups_select_resources() {
        let text = format!(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n  - resources: [deployments.apps, configmaps]\n    providers:\n{}  - resources: ['*.*']\n    providers:\n      - identity: {{}}\n",
            aesgcm(&[("k", KEY1)])
        );
        let enc = Encryption::parse(&text).expect("config");
        for key in ["/registry/deployments/ns/web", "/registry/configmaps/ns/c"] {
            assert!(enc.encrypt(key, b"{}").expect("enc").starts_with(b"k8s:enc:"), "{key}");
        }
        assert_eq!(enc.encrypt("/registry/secrets/ns/s", b"{}").expect("plain"), b"{}", "*.* says identity");
    }

    #[tokio::test]
    async fn an_encrypted_redb_store_passes_the_conformance_suite_and_seals_its_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().to_path_buf();
        let text = config(&aesgcm(&[("key1", KEY1)])).replace("[secrets]", "['*.*']");
        let open = {
            let (path, text) = (path.clone(), text.clone());
            move || {
                let inner: Arc<dyn Store> = Arc::new(super::super::redb::RedbStore::open(&path).expect("open"));
                EncryptedStore::new(inner, Encryption::parse(&text).expect("config"))
            }
        };
        super::super::conformance::run_all(open).await;

        let secrets_dir = dir.path().join("secrets");
        let inner: Arc<dyn Store> = Arc::new(super::super::redb::RedbStore::open(&secrets_dir).expect("open"));
        let store =
            EncryptedStore::new(inner.clone(), Encryption::parse(&config(&aesgcm(&[("key1", KEY1)]))).expect("c"));
        let value = br#"{"stringData":"the-plaintext-password"}"#;
        store.create(SECRET, value).expect("create");
        assert_eq!(&*store.get(SECRET).expect("get").expect("there").value, value);
        assert!(inner.get(SECRET).expect("raw").expect("there").value.starts_with(b"k8s:enc:aesgcm:v1:key1:"));
        drop((store, inner));
        let mut on_disk = Vec::new();
        for f in std::fs::read_dir(&secrets_dir).expect("dir").flatten() {
            on_disk.extend(std::fs::read(f.path()).unwrap_or_default());
        }
        assert!(!on_disk.is_empty());
        assert!(!on_disk.windows(22).any(|w| w == b"the-plaintext-password"), "the file holds no plaintext");
    }
}
