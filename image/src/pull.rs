//! `Store::pull`: resolve a reference to a manifest (picking our platform from an index), fetch
//! the config, download and unpack the layers we lack, record the image. Concurrent pulls of the
//! same reference share one attempt.

use std::sync::Arc;

use futures::stream::{self, StreamExt, TryStreamExt};
use tracing::{debug, info};

use crate::auth::Credentials;
use crate::digest;
use crate::error::{Error, Result};
use crate::manifest::{is_supported_layer, parse_config, parse_document, Document, ImageConfig, Manifest};
use crate::meta::{ImageRecord, LayerRecord};
use crate::reference::{normalize, Reference};
use crate::registry::Session;
use crate::store::{Image, Store};

impl Store {
    /// Pulls `reference` from its registry (anonymously, or with `creds` when it asks). Callers
    /// pulling the same reference with the same credentials at the same time share one download.
    pub async fn pull(&self, reference: &str, creds: Option<&Credentials>) -> Result<Image> {
        let r = normalize(reference)?;
        let creds_key = creds.map(|c| digest::sha256(format!("{}:{}", c.username, c.password).as_bytes()));
        let key = format!("{r}|{}", creds_key.unwrap_or_default());
        let cell = {
            let mut inflight = self.inner.inflight.lock().unwrap_or_else(|p| p.into_inner());
            inflight.entry(key.clone()).or_default().clone()
        };
        let result = cell.get_or_init(|| self.pull_once(&r, creds)).await.clone();
        let mut inflight = self.inner.inflight.lock().unwrap_or_else(|p| p.into_inner());
        if inflight.get(&key).is_some_and(|c| Arc::ptr_eq(c, &cell)) {
            inflight.remove(&key);
        }
        result
    }

    #[tracing::instrument(skip_all, fields(image = %r))]
    async fn pull_once(&self, r: &Reference, creds: Option<&Credentials>) -> Result<Image> {
        let session = Session::new(&self.inner, r, creds);
        let (body, content_type) = session.manifest(r.manifest_ref()).await?;
        let manifest_digest = digest::sha256(&body);
        if let Some(pinned) = &r.digest {
            digest::verify(|| format!("manifest of {r}"), pinned, &manifest_digest)?;
        }
        let mut blobs = vec![body.clone()];
        let manifest = match parse_document(&body, content_type.as_deref())? {
            Document::Manifest(m) => m,
            Document::Index(index) => {
                let platform = &self.inner.opts.platform;
                let Some(entry) = crate::manifest::select_platform(&index, platform) else {
                    let available: Vec<String> =
                        index.manifests.iter().filter_map(|d| d.platform.as_ref().map(|p| p.to_string())).collect();
                    return Err(Error::Unsupported {
                        reference: r.to_string(),
                        message: format!("no image for platform {platform} (available: {})", available.join(", ")),
                    });
                };
                debug!(platform = %platform, manifest = %entry.digest, "selected platform manifest");
                let (body, content_type) = session.manifest(&entry.digest).await?;
                digest::verify(|| format!("{platform} manifest of {r}"), &entry.digest, &digest::sha256(&body))?;
                blobs.push(body.clone());
                match parse_document(&body, content_type.as_deref())? {
                    Document::Manifest(m) => m,
                    Document::Index(_) => {
                        return Err(Error::Unsupported {
                            reference: r.to_string(),
                            message: "nested image index".into(),
                        })
                    }
                }
            }
        };
        check_layers(r, &manifest)?;
        let config_bytes = match self.read_blob(&manifest.config.digest)? {
            Some(bytes) => bytes,
            None => session.blob_bytes(&manifest.config).await?,
        };
        let config = parse_config(&config_bytes, manifest.layers.len())?;
        blobs.push(config_bytes);

        let diff_ids = config.rootfs.diff_ids.clone();
        let _pins = self.pin(&diff_ids);
        // Collected first: a lazy `Map` with a borrowing closure held across the await makes the
        // pull future fail rustc's `Send` check (callers spawn it on tokio).
        let jobs: Vec<_> = manifest
            .layers
            .iter()
            .zip(&diff_ids)
            .map(|(desc, diff_id)| {
                let session = &session;
                async move {
                    if self.layer_dir(diff_id).is_dir() {
                        return Ok::<_, Error>(0);
                    }
                    let tmp = self.tmp_path("blob");
                    let downloaded = session.blob_to_file(desc, &tmp).await;
                    let result = match downloaded {
                        Ok(()) => {
                            let (store, blob, diff_id) = (self.clone(), tmp.clone(), diff_id.clone());
                            tokio::task::spawn_blocking(move || store.install_layer(&blob, &diff_id))
                                .await
                                .map_err(|e| Error::invalid("layer unpacking task", e))?
                        }
                        Err(e) => Err(e),
                    };
                    let _ = tokio::fs::remove_file(&tmp).await;
                    Ok(result?.unwrap_or(0))
                }
            })
            .collect();
        let sizes: Vec<u64> =
            stream::iter(jobs).buffered(self.inner.opts.max_concurrent_downloads.max(1)).try_collect().await?;

        let mut blob_digests = Vec::new();
        for blob in &blobs {
            blob_digests.push(self.put_blob(blob)?);
        }
        let record = ImageRecord {
            config_digest: manifest.config.digest.clone(),
            config: ImageConfig::from(config.config.unwrap_or_default()),
            layers: diff_ids
                .iter()
                .zip(sizes)
                .map(|(d, size)| LayerRecord { diff_id: d.clone(), unpacked_size: size })
                .collect(),
            blobs: blob_digests,
            size: manifest.config.size + manifest.layers.iter().map(|l| l.size).sum::<u64>(),
            last_used: 0,
        };
        let image = self.commit(&[r.to_string()], &manifest_digest, record)?;
        info!(digest = %manifest_digest, id = %image.id, layers = image.layers.len(), "pulled image");
        Ok(image)
    }
}

pub(crate) fn check_layers(r: &impl std::fmt::Display, manifest: &Manifest) -> Result<()> {
    for layer in &manifest.layers {
        if !is_supported_layer(&layer.media_type) {
            return Err(Error::Unsupported {
                reference: r.to_string(),
                message: format!("layer {} has unsupported media type {:?}", layer.digest, layer.media_type),
            });
        }
        crate::reference::validate_digest(&layer.digest).map_err(|e| Error::invalid("manifest", e))?;
    }
    crate::reference::validate_digest(&manifest.config.digest).map_err(|e| Error::invalid("manifest", e))
}
