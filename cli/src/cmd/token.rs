//! `kaji token create`: a bootstrap token (`kubeadm token create`) — the Secret
//! `kube-system/bootstrap-token-<id>` of type `bootstrap.kubernetes.io/token` that the apiserver's
//! `--enable-bootstrap-token-auth` accepts as `system:bootstrap:<id>`, and prints `<id>.<secret>`
//! for a node's `--bootstrap-kubeconfig`.

use crate::cluster::Cluster;
use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, PostParams};
use std::collections::BTreeMap;
use std::time::Duration;

/// The group a node token carries beside `system:bootstrappers` (kubeadm's is
/// `system:bootstrappers:kubeadm:default-node-token`); kaji's default bindings let every
/// bootstrapper ask for a node certificate.
pub const DEFAULT_GROUP: &str = "system:bootstrappers:kaji:default-node-token";
const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";

#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Create a bootstrap token and print it (`<id>.<secret>`).
    Create(CreateArgs),
}

#[derive(clap::Args, Debug)]
pub struct CreateArgs {
    /// The token to create, `<id>.<secret>` (`[a-z0-9]{6}.[a-z0-9]{16}`, as `kubeadm token create
    /// [token]`); default: a random one.
    pub token: Option<String>,
    /// How long the token lasts (e.g. 24h, 30m); 0 never expires.
    #[arg(long, default_value = "24h", value_parser = kaji_component::duration::parse_duration)]
    pub ttl: Duration,
    /// A human-readable note stored with the token.
    #[arg(long, default_value = "")]
    pub description: String,
    /// Extra groups the token authenticates as (each must start with system:bootstrappers:).
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_GROUP)]
    pub groups: Vec<String>,
}

pub async fn run(cl: &Cluster, command: Command) -> Result<()> {
    let Command::Create(args) = command;
    for g in &args.groups {
        if !g.starts_with("system:bootstrappers:") {
            anyhow::bail!("--groups: {g:?} does not start with \"system:bootstrappers:\"");
        }
    }
    let (id, secret) = match &args.token {
        Some(t) => {
            anyhow::ensure!(crate::pki::valid_token(t), "token {t:?} is not of the form [a-z0-9]{{6}}.[a-z0-9]{{16}}");
            let (id, secret) = t.split_once('.').expect("a valid token has a dot");
            (id.to_string(), secret.to_string())
        }
        None => random_token()?,
    };
    let expires = (!args.ttl.is_zero()).then(|| jiff::Timestamp::now() + args.ttl);
    store(&cl.client, &token_secret(&id, &secret, expires, &args.description, &args.groups)).await?;
    println!("{id}.{secret}");
    Ok(())
}

/// A new token id and secret from the system's randomness.
pub fn random_token() -> Result<(String, String)> {
    let mut random = [0u8; 22];
    kaji_pki::tls::provider().secure_random.fill(&mut random).map_err(|_| anyhow::anyhow!("no randomness"))?;
    Ok(token_from(&random))
}

/// Creates a token's Secret (from [`token_secret`]) in kube-system.
pub async fn store(client: &kube::Client, secret: &Secret) -> Result<()> {
    Api::<Secret>::namespaced(client.clone(), "kube-system")
        .create(&PostParams::default(), secret)
        .await
        .context("creating the bootstrap token Secret")?;
    Ok(())
}

/// A token id (6 characters) and secret (16) of `[a-z0-9]` from 22 random bytes.
pub fn token_from(random: &[u8; 22]) -> (String, String) {
    let text: String = random.iter().map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char).collect();
    (text[..6].to_string(), text[6..].to_string())
}

/// The Secret kubeadm writes for a token.
pub fn token_secret(
    id: &str,
    secret: &str,
    expires: Option<jiff::Timestamp>,
    description: &str,
    groups: &[String],
) -> Secret {
    let mut data = BTreeMap::from([
        ("token-id".to_string(), id.to_string()),
        ("token-secret".to_string(), secret.to_string()),
        ("usage-bootstrap-authentication".to_string(), "true".to_string()),
        ("usage-bootstrap-signing".to_string(), "true".to_string()),
    ]);
    if let Some(t) = expires {
        data.insert("expiration".into(), t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
    }
    if !description.is_empty() {
        data.insert("description".into(), description.into());
    }
    if !groups.is_empty() {
        data.insert("auth-extra-groups".into(), groups.join(","));
    }
    Secret {
        metadata: ObjectMeta {
            name: Some(format!("bootstrap-token-{id}")),
            namespace: Some("kube-system".into()),
            ..Default::default()
        },
        type_: Some("bootstrap.kubernetes.io/token".into()),
        string_data: Some(data),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_have_kubeadms_shape() {
        let (id, secret) = token_from(&[200; 22]);
        assert_eq!((id.len(), secret.len()), (6, 16));
        let all = format!("{id}{secret}");
        assert!(all.bytes().all(|b| ALPHABET.contains(&b)), "{all}");
    }

    #[test]
    fn the_secret_is_what_bootstrap_token_auth_reads() {
        let t = jiff::Timestamp::from_second(1_700_000_000).expect("time");
        let s = token_secret("abcdef", "0123456789abcdef", Some(t), "", &[DEFAULT_GROUP.to_string()]);
        assert_eq!(s.metadata.name.as_deref(), Some("bootstrap-token-abcdef"));
        assert_eq!(s.type_.as_deref(), Some("bootstrap.kubernetes.io/token"));
        let d = s.string_data.expect("data");
        assert_eq!(d["expiration"], "2023-11-14T22:13:20Z");
        assert_eq!(d["usage-bootstrap-authentication"], "true");
        assert_eq!(d["auth-extra-groups"], DEFAULT_GROUP);
        assert!(!d.contains_key("description"));
    }
}
