//! Test helpers for this crate and its dependents (feature `testing`): a real `docker-registry`
//! process per test ([`Registry`]), images built in memory ([`TestImage`], [`busybox_layer`]) and
//! pushed over the v2 API ([`push`], [`push_index`], [`push_busybox`]), and writers for OCI
//! layouts and docker archives. Needs Debian's `docker-registry` and `busybox-static` packages.

pub mod tarball;

use std::fs;
use std::io::Write as _;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use reqwest::header::{CONTENT_TYPE, LOCATION};
use serde_json::json;

use crate::auth::Credentials;
use crate::digest::sha256;
use crate::manifest::{
    Platform, DOCKER_LAYER_GZIP, OCI_CONFIG, OCI_INDEX, OCI_LAYER_TAR, OCI_LAYER_ZSTD, OCI_MANIFEST,
};
use tarball::{Builder, TarEntry};

pub const REGISTRY_BIN: &str = "/usr/bin/docker-registry";
pub const BUSYBOX_BIN: &str = "/bin/busybox";

/// A `docker-registry` serving a temp dir on 127.0.0.1; killed (by its pid) on drop.
pub struct Registry {
    /// `127.0.0.1:<port>`.
    pub addr: String,
    dir: tempfile::TempDir,
    child: Child,
}

impl Registry {
    /// An anonymous registry.
    pub fn start() -> anyhow::Result<Registry> {
        Registry::spawn(None)
    }

    /// A registry with htpasswd (basic) auth for one user.
    pub fn start_with_auth(username: &str, password: &str) -> anyhow::Result<Registry> {
        Registry::spawn(Some((username, password)))
    }

    fn spawn(auth: Option<(&str, &str)>) -> anyhow::Result<Registry> {
        if !Path::new(REGISTRY_BIN).exists() {
            bail!("{REGISTRY_BIN} is missing: `apt-get install -y docker-registry` (Debian) to run registry tests");
        }
        let dir = tempfile::tempdir()?;
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let addr = format!("127.0.0.1:{port}");
        let mut config = format!(
            "version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: {}\n\
             http:\n  addr: {addr}\n",
            dir.path().join("data").display()
        );
        if let Some((user, pass)) = auth {
            let hash = bcrypt::hash(pass, 4)?;
            let htpasswd = dir.path().join("htpasswd");
            fs::write(&htpasswd, format!("{user}:{hash}\n"))?;
            config += &format!("auth:\n  htpasswd:\n    realm: kaji-test\n    path: {}\n", htpasswd.display());
        }
        let config_path = dir.path().join("config.yml");
        fs::write(&config_path, config)?;
        let log = fs::File::create(dir.path().join("registry.log"))?;
        let child = Command::new(REGISTRY_BIN)
            .arg("serve")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("spawn {REGISTRY_BIN}"))?;
        let mut registry = Registry { addr, dir, child };
        let deadline = Instant::now() + Duration::from_secs(15);
        while TcpStream::connect(&registry.addr).is_err() {
            if let Some(status) = registry.child.try_wait()? {
                bail!("docker-registry exited with {status}:\n{}", registry.log());
            }
            if Instant::now() > deadline {
                bail!("docker-registry did not listen on {} within 15s:\n{}", registry.addr, registry.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(registry)
    }

    /// The registry's log so far (access log included).
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One layer as pushed: the blob bytes, its media type, and the uncompressed tar's digest.
#[derive(Debug, Clone)]
pub struct TestLayer {
    pub blob: Vec<u8>,
    pub media_type: String,
    pub diff_id: String,
}

impl TestLayer {
    pub fn gzip(tar: &[u8]) -> TestLayer {
        TestLayer { blob: tarball::gzip(tar), media_type: DOCKER_LAYER_GZIP.into(), diff_id: sha256(tar) }
    }

    pub fn zstd(tar: &[u8]) -> TestLayer {
        TestLayer { blob: tarball::zstd(tar), media_type: OCI_LAYER_ZSTD.into(), diff_id: sha256(tar) }
    }

    pub fn plain(tar: &[u8]) -> TestLayer {
        TestLayer { blob: tar.to_vec(), media_type: OCI_LAYER_TAR.into(), diff_id: sha256(tar) }
    }

    pub fn digest(&self) -> String {
        sha256(&self.blob)
    }
}

/// An image assembled in memory: layers (lowest first) plus the runtime config.
#[derive(Debug, Clone)]
pub struct TestImage {
    pub layers: Vec<TestLayer>,
    pub platform: Platform,
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    pub env: Vec<String>,
    pub working_dir: String,
}

impl TestImage {
    pub fn new(layers: Vec<TestLayer>) -> TestImage {
        TestImage {
            layers,
            platform: Platform::host(),
            entrypoint: Vec::new(),
            cmd: vec!["sh".into()],
            env: vec!["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()],
            working_dir: String::new(),
        }
    }

    pub fn config(&self) -> Vec<u8> {
        let config = json!({
            "architecture": self.platform.architecture,
            "os": self.platform.os,
            "config": {
                "Entrypoint": self.entrypoint, "Cmd": self.cmd, "Env": self.env, "WorkingDir": self.working_dir,
            },
            "rootfs": { "type": "layers", "diff_ids": self.layers.iter().map(|l| &l.diff_id).collect::<Vec<_>>() },
        });
        serde_json::to_vec(&config).expect("json values serialize")
    }

    pub fn manifest(&self) -> Vec<u8> {
        let config = self.config();
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": { "mediaType": OCI_CONFIG, "digest": sha256(&config), "size": config.len() },
            "layers": self.layers.iter().map(|l| json!({
                "mediaType": l.media_type, "digest": l.digest(), "size": l.blob.len(),
            })).collect::<Vec<_>>(),
        });
        serde_json::to_vec(&manifest).expect("json values serialize")
    }

    pub fn manifest_digest(&self) -> String {
        sha256(&self.manifest())
    }

    pub fn config_digest(&self) -> String {
        sha256(&self.config())
    }
}

/// A layer with `/bin/busybox`, a symlink per applet in `/bin`, `/etc/passwd`, `/etc/group`, `/tmp`.
pub fn busybox_layer() -> anyhow::Result<Vec<u8>> {
    let busybox = fs::read(BUSYBOX_BIN)
        .with_context(|| format!("{BUSYBOX_BIN} is missing: `apt-get install -y busybox-static`"))?;
    let list = Command::new(BUSYBOX_BIN).arg("--list").output().context("busybox --list")?;
    let mut builder = Builder::default()
        .dir("bin", 0o755)
        .dir("etc", 0o755)
        .dir("tmp", 0o1777)
        .file("bin/busybox", &busybox, 0o755)
        .file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n", 0o644)
        .file("etc/group", b"root:x:0:\nnogroup:x:65534:\n", 0o644);
    for applet in String::from_utf8_lossy(&list.stdout).lines().map(str::trim).filter(|a| !a.is_empty()) {
        if applet != "busybox" {
            builder = builder.entry(TarEntry::symlink(&format!("bin/{applet}"), "busybox"));
        }
    }
    Ok(builder.tar())
}

/// The busybox image: one gzip layer from [`busybox_layer`], `Cmd ["sh"]`.
pub fn busybox_image() -> anyhow::Result<TestImage> {
    Ok(TestImage::new(vec![TestLayer::gzip(&busybox_layer()?)]))
}

/// Pushes the busybox image as `name_tag` (`kaji/busybox:1`) to the registry at `addr`.
pub async fn push_busybox(addr: &str, name_tag: &str) -> anyhow::Result<TestImage> {
    let image = busybox_image()?;
    push(addr, name_tag, &image, None).await?;
    Ok(image)
}

/// Pushes `image`'s blobs and manifest as `name:tag`; returns the manifest digest.
pub async fn push(
    addr: &str,
    name_tag: &str,
    image: &TestImage,
    creds: Option<&Credentials>,
) -> anyhow::Result<String> {
    let (name, tag) = name_tag.rsplit_once(':').context("push needs name:tag")?;
    let client = Pusher { client: client(), base: format!("http://{addr}/v2/{name}"), creds };
    for layer in &image.layers {
        client.blob(&layer.blob).await?;
    }
    client.blob(&image.config()).await?;
    client.manifest(tag, OCI_MANIFEST, &image.manifest()).await?;
    client.manifest(&image.manifest_digest(), OCI_MANIFEST, &image.manifest()).await
}

/// Pushes every image by digest, then an OCI index of them as `name:tag`; returns its digest.
pub async fn push_index(addr: &str, name_tag: &str, images: &[&TestImage]) -> anyhow::Result<String> {
    let (name, tag) = name_tag.rsplit_once(':').context("push needs name:tag")?;
    let mut entries = Vec::new();
    for image in images {
        push(addr, &format!("{name}:{}", image.platform.architecture), image, None).await?;
        entries.push(json!({
            "mediaType": OCI_MANIFEST, "digest": image.manifest_digest(), "size": image.manifest().len(),
            "platform": image.platform,
        }));
    }
    let index = serde_json::to_vec(&json!({ "schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries }))?;
    let client = Pusher { client: client(), base: format!("http://{addr}/v2/{name}"), creds: None };
    client.manifest(tag, OCI_INDEX, &index).await
}

fn client() -> reqwest::Client {
    crate::registry::install_crypto_provider();
    reqwest::Client::new()
}

struct Pusher<'a> {
    client: reqwest::Client,
    base: String,
    creds: Option<&'a Credentials>,
}

impl Pusher<'_> {
    fn auth(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match self.creds {
            Some(c) => req.basic_auth(&c.username, Some(&c.password)),
            None => req,
        }
    }

    async fn blob(&self, bytes: &[u8]) -> anyhow::Result<()> {
        let resp = self.auth(self.client.post(format!("{}/blobs/uploads/", self.base))).send().await?;
        if resp.status() != reqwest::StatusCode::ACCEPTED {
            bail!("start upload: {} {}", resp.status(), resp.text().await.unwrap_or_default());
        }
        let location = resp.headers().get(LOCATION).context("upload has no Location")?.to_str()?.to_string();
        let sep = if location.contains('?') { '&' } else { '?' };
        let url = format!("{location}{sep}digest={}", sha256(bytes));
        let resp = self
            .auth(self.client.put(url))
            .header(CONTENT_TYPE, "application/octet-stream")
            .body(bytes.to_vec())
            .send()
            .await?;
        if !resp.status().is_success() {
            bail!("finish upload: {} {}", resp.status(), resp.text().await.unwrap_or_default());
        }
        Ok(())
    }

    async fn manifest(&self, reference: &str, media_type: &str, body: &[u8]) -> anyhow::Result<String> {
        let resp = self
            .auth(self.client.put(format!("{}/manifests/{reference}", self.base)))
            .header(CONTENT_TYPE, media_type)
            .body(body.to_vec())
            .send()
            .await?;
        if !resp.status().is_success() {
            bail!("put manifest {reference}: {} {}", resp.status(), resp.text().await.unwrap_or_default());
        }
        Ok(sha256(body))
    }
}

/// Writes `images` as an OCI image layout at `dir`, each named by its `ref.name` annotation.
pub fn write_oci_layout(dir: &Path, images: &[(&str, &TestImage)]) -> anyhow::Result<()> {
    let blobs = dir.join("blobs/sha256");
    fs::create_dir_all(&blobs)?;
    let put = |bytes: &[u8]| fs::write(blobs.join(&sha256(bytes)["sha256:".len()..]), bytes);
    let mut entries = Vec::new();
    for (name, image) in images {
        for layer in &image.layers {
            put(&layer.blob)?;
        }
        put(&image.config())?;
        put(&image.manifest())?;
        entries.push(json!({
            "mediaType": OCI_MANIFEST, "digest": image.manifest_digest(), "size": image.manifest().len(),
            "annotations": { "org.opencontainers.image.ref.name": name },
        }));
    }
    fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#)?;
    fs::write(dir.join("index.json"), serde_json::to_vec(&json!({ "schemaVersion": 2, "manifests": entries }))?)?;
    Ok(())
}

/// Writes `image` as a `docker save` tar at `path`, tagged `repo_tags`; layers stored uncompressed
/// as `<n>/layer.tar` (what `docker save` writes) unless they were pushed compressed.
pub fn write_docker_archive(path: &Path, repo_tags: &[&str], image: &TestImage) -> anyhow::Result<PathBuf> {
    let config = image.config();
    let config_name = format!("{}.json", &image.config_digest()["sha256:".len()..]);
    let mut builder = Builder::default().file(&config_name, &config, 0o644);
    let mut layer_names = Vec::new();
    for (i, layer) in image.layers.iter().enumerate() {
        let name = format!("{i}/layer.tar");
        builder = builder.dir(&i.to_string(), 0o755).file(&name, &layer.blob, 0o644);
        layer_names.push(name);
    }
    let manifest = json!([{ "Config": config_name, "RepoTags": repo_tags, "Layers": layer_names }]);
    builder = builder.file("manifest.json", &serde_json::to_vec(&manifest)?, 0o644);
    let mut file = fs::File::create(path)?;
    file.write_all(&builder.tar())?;
    Ok(path.to_path_buf())
}
