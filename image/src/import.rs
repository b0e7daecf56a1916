//! `Store::import`: images from an OCI image layout (directory or tar) or a `docker save`
//! archive (tar, optionally gzipped, or already extracted), tagged by their ref-name annotations
//! or `RepoTags`.

use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use tracing::info;

use crate::digest::{self, HashingReader};
use crate::error::{Error, IoContext, Result};
use crate::manifest::{
    parse_config, parse_document, select_platform, Compression, Descriptor, Document, ImageConfig, Index, Manifest,
    DOCKER_CONFIG, DOCKER_LAYER_GZIP, DOCKER_MANIFEST,
};
use crate::meta::{ImageRecord, LayerRecord};
use crate::reference::{normalize, validate_digest};
use crate::store::{Image, Store};
use crate::unpack::{clean_relative, clear, ensure_dirs};

const REF_NAME: &str = "org.opencontainers.image.ref.name";
const CONTAINERD_NAME: &str = "io.containerd.image.name";

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DockerEntry {
    config: String,
    #[serde(default)]
    repo_tags: Option<Vec<String>>,
    layers: Vec<String>,
}

impl Store {
    /// Imports every image in the OCI layout or docker archive at `path`.
    pub fn import(&self, path: &Path) -> Result<Vec<Image>> {
        let meta = fs::metadata(path).ctx("inspect", path)?;
        if meta.is_dir() {
            return self.import_dir(path, path);
        }
        let tmp = self.tmp_path("import");
        let result = extract(path, &tmp).and_then(|()| self.import_dir(&tmp, path));
        let _ = fs::remove_dir_all(&tmp);
        result
    }

    /// `docker import`: a root filesystem — a directory or a plain tar of one — becomes a
    /// one-layer image named `reference` with `config` (entrypoint, cmd, env, working dir, user).
    pub fn import_rootfs(&self, source: &Path, reference: &str, config: &ImageConfig) -> Result<Image> {
        let tag = normalize(reference)?.to_string();
        let tmp = self.tmp_path("rootfs");
        fs::create_dir_all(&tmp).ctx("create", &tmp)?;
        let result = self.import_rootfs_in(source, &tag, config, &tmp);
        let _ = fs::remove_dir_all(&tmp);
        result
    }

    fn import_rootfs_in(&self, source: &Path, tag: &str, config: &ImageConfig, tmp: &Path) -> Result<Image> {
        let layer = if fs::metadata(source).ctx("inspect", source)?.is_dir() {
            let path = tmp.join("layer.tar");
            let file = fs::File::create(&path).ctx("create", &path)?;
            let mut builder = tar::Builder::new(std::io::BufWriter::new(file));
            builder.follow_symlinks(false);
            builder.append_dir_all(".", source).ctx("pack", source)?;
            builder.into_inner().and_then(|mut w| std::io::Write::flush(&mut w)).ctx("write", &path)?;
            path
        } else {
            source.to_path_buf()
        };
        let (diff_id, size, compression) = hash_file(&layer)?;
        if compression != Compression::None {
            return Err(Error::invalid(
                format!("root filesystem {}", source.display()),
                "give a directory or an uncompressed tar",
            ));
        }
        let platform = &self.inner.opts.platform;
        let config_bytes = serde_json::to_vec(&serde_json::json!({
            "architecture": platform.architecture,
            "os": platform.os,
            "config": {
                "Entrypoint": config.entrypoint, "Cmd": config.cmd, "Env": config.env,
                "WorkingDir": config.working_dir, "User": config.user,
            },
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        }))
        .expect("json values serialize");
        let layer_desc = Descriptor {
            media_type: crate::manifest::OCI_LAYER_TAR.into(),
            digest: diff_id,
            size,
            platform: None,
            annotations: Default::default(),
        };
        let manifest = Manifest {
            schema_version: 2,
            media_type: Some(crate::manifest::OCI_MANIFEST.into()),
            config: descriptor(crate::manifest::OCI_CONFIG, &config_bytes),
            layers: vec![layer_desc],
        };
        let body = serde_json::to_vec(&manifest).expect("manifest serializes");
        let manifest_digest = digest::sha256(&body);
        let image = self.install(tag, &manifest_digest, vec![body], &manifest, config_bytes, &[layer])?;
        info!(reference = %tag, source = %source.display(), "imported root filesystem");
        Ok(image)
    }

    fn import_dir(&self, dir: &Path, origin: &Path) -> Result<Vec<Image>> {
        let images = if dir.join("manifest.json").is_file() {
            self.import_docker(dir, origin)?
        } else if dir.join("index.json").is_file() {
            self.import_oci(dir, origin)?
        } else {
            return Err(Error::invalid(
                format!("image archive {}", origin.display()),
                "neither manifest.json (docker save) nor index.json (OCI layout) found",
            ));
        };
        info!(path = %origin.display(), images = images.len(), "imported images");
        Ok(images)
    }

    fn import_oci(&self, dir: &Path, origin: &Path) -> Result<Vec<Image>> {
        let index: Index = serde_json::from_slice(&read_in(dir, "index.json")?)
            .map_err(|e| Error::invalid(format!("index.json of {}", origin.display()), e))?;
        let mut images = Vec::new();
        for desc in &index.manifests {
            let name = desc.annotations.get(CONTAINERD_NAME).or(desc.annotations.get(REF_NAME)).ok_or_else(|| {
                Error::invalid(
                    format!("OCI layout {}", origin.display()),
                    format!("manifest {} has no {REF_NAME} annotation to name it by", desc.digest),
                )
            })?;
            let tag = normalize(name)?.to_string();
            let body = read_blob(dir, &desc.digest)?;
            let mut blobs = vec![body.clone()];
            let manifest = match parse_document(&body, Some(&desc.media_type))? {
                Document::Manifest(m) => m,
                Document::Index(inner) => {
                    let platform = &self.inner.opts.platform;
                    let entry = select_platform(&inner, platform).ok_or_else(|| Error::Unsupported {
                        reference: tag.clone(),
                        message: format!("no image for platform {platform} in {}", origin.display()),
                    })?;
                    let body = read_blob(dir, &entry.digest)?;
                    blobs.push(body.clone());
                    match parse_document(&body, Some(&entry.media_type))? {
                        Document::Manifest(m) => m,
                        Document::Index(_) => {
                            return Err(Error::Unsupported { reference: tag, message: "nested image index".into() })
                        }
                    }
                }
            };
            crate::pull::check_layers(&tag, &manifest)?;
            let config = read_blob(dir, &manifest.config.digest)?;
            let layer_paths = manifest
                .layers
                .iter()
                .map(|l| in_dir(dir, &format!("blobs/sha256/{}", digest::hex(&l.digest))))
                .collect::<Result<Vec<_>>>()?;
            images.push(self.install(&tag, &desc.digest, blobs, &manifest, config, &layer_paths)?);
        }
        Ok(images)
    }

    fn import_docker(&self, dir: &Path, origin: &Path) -> Result<Vec<Image>> {
        let entries: Vec<DockerEntry> = serde_json::from_slice(&read_in(dir, "manifest.json")?)
            .map_err(|e| Error::invalid(format!("manifest.json of {}", origin.display()), e))?;
        let mut images = Vec::new();
        for entry in entries {
            let config = read_in(dir, &entry.config)?;
            let config_desc = descriptor(DOCKER_CONFIG, &config);
            let mut layers = Vec::new();
            let mut layer_paths = Vec::new();
            for layer in &entry.layers {
                let path = in_dir(dir, layer)?;
                let (digest, size, compression) = hash_file(&path)?;
                let media_type = match compression {
                    Compression::Gzip => DOCKER_LAYER_GZIP,
                    Compression::Zstd => "application/vnd.docker.image.rootfs.diff.tar.zstd",
                    Compression::None => "application/vnd.docker.image.rootfs.diff.tar",
                };
                layers.push(Descriptor {
                    media_type: media_type.into(),
                    digest,
                    size,
                    platform: None,
                    annotations: Default::default(),
                });
                layer_paths.push(path);
            }
            // docker archives carry no registry manifest; synthesize the one `docker push` would send.
            let manifest =
                Manifest { schema_version: 2, media_type: Some(DOCKER_MANIFEST.into()), config: config_desc, layers };
            let body = serde_json::to_vec(&manifest).expect("manifest serializes");
            let manifest_digest = digest::sha256(&body);
            let tags = entry.repo_tags.unwrap_or_default();
            if tags.is_empty() {
                return Err(Error::invalid(
                    format!("docker archive {}", origin.display()),
                    format!("image {} has no RepoTags to name it by", manifest.config.digest),
                ));
            }
            for tag in tags {
                let tag = normalize(&tag)?.to_string();
                images.push(self.install(
                    &tag,
                    &manifest_digest,
                    vec![body.clone()],
                    &manifest,
                    config.clone(),
                    &layer_paths,
                )?);
            }
        }
        Ok(images)
    }

    /// Unpacks the layers at `layer_paths` (in manifest order) and records the image under `tag`.
    fn install(
        &self,
        tag: &str,
        manifest_digest: &str,
        mut blobs: Vec<Vec<u8>>,
        manifest: &Manifest,
        config_bytes: Vec<u8>,
        layer_paths: &[PathBuf],
    ) -> Result<Image> {
        let config = parse_config(&config_bytes, manifest.layers.len())?;
        blobs.push(config_bytes);
        let _pins = self.pin(&config.rootfs.diff_ids);
        let mut layers = Vec::new();
        for (path, diff_id) in layer_paths.iter().zip(&config.rootfs.diff_ids) {
            let size = self.install_layer(path, diff_id)?.unwrap_or(0);
            layers.push(LayerRecord { diff_id: diff_id.clone(), unpacked_size: size });
        }
        let blob_digests = blobs.iter().map(|b| self.put_blob(b)).collect::<Result<Vec<_>>>()?;
        let record = ImageRecord {
            config_digest: manifest.config.digest.clone(),
            config: ImageConfig::from(config.config.unwrap_or_default()),
            layers,
            blobs: blob_digests,
            size: manifest.config.size + manifest.layers.iter().map(|l| l.size).sum::<u64>(),
            last_used: 0,
        };
        self.commit(&[tag.to_string()], manifest_digest, record)
    }
}

fn descriptor(media_type: &str, bytes: &[u8]) -> Descriptor {
    Descriptor {
        media_type: media_type.into(),
        digest: digest::sha256(bytes),
        size: bytes.len() as u64,
        platform: None,
        annotations: Default::default(),
    }
}

/// `rel` under `dir`, refusing names (or symlinks) that lead outside it.
fn in_dir(dir: &Path, rel: &str) -> Result<PathBuf> {
    let escape = || Error::invalid("image archive", format!("path {rel:?} leads outside the archive"));
    let clean = clean_relative(Path::new(rel)).map_err(|_| escape())?.ok_or_else(escape)?;
    let path = dir.join(clean);
    let real = path.canonicalize().ctx("open", &path)?;
    let base = dir.canonicalize().ctx("open", dir)?;
    if !real.starts_with(&base) {
        return Err(escape());
    }
    Ok(real)
}

fn read_in(dir: &Path, rel: &str) -> Result<Vec<u8>> {
    let path = in_dir(dir, rel)?;
    fs::read(&path).ctx("read", &path)
}

/// An OCI layout blob, verified against its digest.
fn read_blob(dir: &Path, digest: &str) -> Result<Vec<u8>> {
    validate_digest(digest).map_err(|e| Error::invalid("OCI layout", e))?;
    let bytes = read_in(dir, &format!("blobs/sha256/{}", digest::hex(digest)))?;
    digest::verify(|| format!("blob {digest} of OCI layout"), digest, &digest::sha256(&bytes))?;
    Ok(bytes)
}

fn hash_file(path: &Path) -> Result<(String, u64, Compression)> {
    let mut reader = BufReader::new(fs::File::open(path).ctx("open", path)?);
    let compression = Compression::sniff(reader.fill_buf().ctx("read", path)?);
    let mut hashing = HashingReader::new(reader);
    let size = std::io::copy(&mut hashing, &mut std::io::sink()).ctx("read", path)?;
    Ok((hashing.finish().ctx("read", path)?, size, compression))
}

/// Unpacks an archive's files, directories and symlinks (not devices, not owners) into `dest`.
fn extract(archive: &Path, dest: &Path) -> Result<()> {
    fs::create_dir(dest).ctx("create", dest)?;
    let mut reader = BufReader::new(fs::File::open(archive).ctx("open", archive)?);
    let input: Box<dyn Read> = match Compression::sniff(reader.fill_buf().ctx("read", archive)?) {
        Compression::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(reader)),
        Compression::Zstd => Box::new(zstd::stream::read::Decoder::with_buffer(reader).ctx("read", archive)?),
        Compression::None => Box::new(reader),
    };
    let bad = |e: std::io::Error| Error::invalid(format!("image archive {}", archive.display()), e);
    let mut tar = tar::Archive::new(input);
    for entry in tar.entries().map_err(bad)? {
        let mut entry = entry.map_err(bad)?;
        let raw = entry.path().map_err(bad)?.into_owned();
        let Some(rel) = clean_relative(&raw)? else { continue };
        // Parents must be real directories: an archive symlink must not redirect a later write.
        let path =
            ensure_dirs(dest, rel.parent().unwrap_or(Path::new("")), true)?.join(rel.file_name().unwrap_or_default());
        let kind = entry.header().entry_type();
        clear(&path, kind.is_dir())?;
        match kind {
            tar::EntryType::Directory => fs::create_dir_all(&path).ctx("create", &path)?,
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let mut file = fs::OpenOptions::new().write(true).create_new(true).open(&path).ctx("create", &path)?;
                std::io::copy(&mut entry, &mut file).map_err(bad)?;
            }
            tar::EntryType::Symlink => {
                // Followed later only through `in_dir`, which refuses targets outside `dest`.
                if let Some(target) = entry.link_name().map_err(bad)? {
                    std::os::unix::fs::symlink(target, &path).ctx("create symlink", &path)?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}
