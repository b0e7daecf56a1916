//! The connection every command shares: kubeconfig (`--kubeconfig`, `KUBECONFIG`,
//! `~/.kube/config`, in-cluster), `--context`, the namespace, and discovery done once.

use crate::errors;
use crate::resources::{self, Resource};
use anyhow::{anyhow, Context, Result};
use kube::api::{Api, DynamicObject};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::Value;
use tokio::sync::OnceCell;

#[derive(clap::Args, Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnArgs {
    /// Path to the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config).
    #[arg(long, global = true, value_name = "PATH")]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// The kubeconfig context to use (default: its current-context).
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// The namespace (default: the context's, else "default").
    #[arg(short = 'n', long, global = true, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
}

/// A client, the namespace commands act in, and the server's resource types (fetched on first use).
pub struct Cluster {
    pub client: kube::Client,
    pub namespace: String,
    /// `-n` was given (a manifest's own namespace must then match it).
    pub namespace_flag: bool,
    resources: OnceCell<Vec<Resource>>,
}

impl Cluster {
    pub async fn connect(args: &ConnArgs) -> Result<Self> {
        let opts = KubeConfigOptions { context: args.context.clone(), ..Default::default() };
        let config = match &args.kubeconfig {
            Some(path) => {
                let kc = Kubeconfig::read_from(path).map_err(|e| anyhow!("cannot load kubeconfig: {e}"))?;
                kube::Config::from_custom_kubeconfig(kc, &opts).await.map_err(|e| anyhow!("invalid kubeconfig: {e}"))?
            }
            None => match Kubeconfig::read() {
                Ok(kc) => kube::Config::from_custom_kubeconfig(kc, &opts)
                    .await
                    .map_err(|e| anyhow!("invalid kubeconfig: {e}"))?,
                Err(_) if args.context.is_none() && std::env::var_os("KUBECONFIG").is_none() => {
                    kube::Config::incluster().map_err(|_| {
                        anyhow!(
                            "no kubeconfig: pass --kubeconfig, set KUBECONFIG or create ~/.kube/config \
                             (a lab's is <dir>/kubeconfig, /tmp/kaji-lab/kubeconfig by default)"
                        )
                    })?
                }
                Err(e) => return Err(anyhow!("cannot load kubeconfig: {e}")),
            },
        };
        errors::set_server(&config.cluster_url.to_string());
        // The apiserver records writes without a fieldManager under this product, as kubectl's are.
        let mut config = config;
        config.headers.push((
            http::header::USER_AGENT,
            http::HeaderValue::from_static(concat!("kaji/", env!("CARGO_PKG_VERSION"))),
        ));
        let namespace = args.namespace.clone().unwrap_or_else(|| config.default_namespace.clone());
        let client = kube::Client::try_from(config).context("cannot build a client")?;
        Ok(Self { client, namespace, namespace_flag: args.namespace.is_some(), resources: OnceCell::new() })
    }

    /// The server's resource types (discovery runs once per command).
    pub async fn resources(&self) -> Result<&[Resource]> {
        let list = self.resources.get_or_try_init(|| resources::discover(&self.client)).await?;
        Ok(list)
    }

    pub async fn resolve(&self, word: &str) -> Result<Resource> {
        Ok(resources::resolve(self.resources().await?, word)?.clone())
    }

    /// The namespace to use for `r`: None for cluster-scoped resources.
    pub fn namespace_for(&self, r: &Resource) -> Option<&str> {
        r.namespaced.then_some(self.namespace.as_str())
    }

    /// A dynamic API for `r` in `namespace` (None: all namespaces, or cluster-scoped).
    pub fn api(&self, r: &Resource, namespace: Option<&str>) -> Api<DynamicObject> {
        match namespace {
            Some(ns) if r.namespaced => Api::namespaced_with(self.client.clone(), ns, &r.api_resource()),
            _ => Api::all_with(self.client.clone(), &r.api_resource()),
        }
    }

    /// GET `uri` with `accept`; the JSON body.
    pub async fn get_json(&self, uri: &str, accept: &str) -> Result<Value> {
        let req = http::Request::get(uri).header(http::header::ACCEPT, accept).body(Vec::new())?;
        self.client.request::<Value>(req).await.map_err(errors::api)
    }
}

/// kubectl's Accept header for Tables.
pub const ACCEPT_TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";

/// `key=value&...` with everything but unreserved characters percent-encoded.
pub fn query(pairs: &[(&str, &str)]) -> String {
    let enc = |s: &str| {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect::<String>()
    };
    pairs.iter().map(|(k, v)| format!("{}={}", enc(k), enc(v))).collect::<Vec<_>>().join("&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_are_percent_encoded() {
        assert_eq!(
            query(&[("labelSelector", "app in (a,b),tier!=db"), ("watch", "1")]),
            "labelSelector=app%20in%20%28a%2Cb%29%2Ctier%21%3Ddb&watch=1"
        );
    }
}
