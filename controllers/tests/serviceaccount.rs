//! The ServiceAccount, root CA publisher and ClusterRole aggregation controllers against a real
//! apiserver: every namespace gets `default` and `kube-root-ca.crt` (and gets them back), an
//! aggregated ClusterRole follows the roles its selector picks.

mod common;

use common::{poll, Cluster};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

async fn get_opt<K>(api: &Api<K>, name: &str) -> anyhow::Result<Option<K>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    Ok(api.get_opt(name).await?)
}

#[tokio::test]
async fn every_namespace_gets_a_default_account_and_the_root_ca() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    let manager = c.manager_with(kaji_controllers::Config { root_ca: Some(CA.into()), ..Default::default() }).await?;
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "team"}}))?;
    Api::<Namespace>::all(c.client.clone()).create(&PostParams::default(), &ns).await?;
    for namespace in ["default", "kube-system", "team"] {
        let sas: Api<ServiceAccount> = Api::namespaced(c.client.clone(), namespace);
        poll("default service account", || async { get_opt(&sas, "default").await }).await?;
        let cms: Api<ConfigMap> = Api::namespaced(c.client.clone(), namespace);
        let cm = poll("root CA config map", || async { get_opt(&cms, "kube-root-ca.crt").await }).await?;
        assert_eq!(cm.data.as_ref().and_then(|d| d.get("ca.crt")).map(String::as_str), Some(CA));
    }
    // Deleted or edited, they come back as they were.
    let sas: Api<ServiceAccount> = Api::namespaced(c.client.clone(), "team");
    let first = sas.get("default").await?;
    sas.delete("default", &DeleteParams::default()).await?;
    poll("the default service account again", || async {
        Ok(get_opt(&sas, "default").await?.filter(|sa| sa.metadata.uid != first.metadata.uid))
    })
    .await?;
    let cms: Api<ConfigMap> = Api::namespaced(c.client.clone(), "team");
    cms.patch("kube-root-ca.crt", &PatchParams::default(), &Patch::Merge(json!({"data": {"ca.crt": "forged"}})))
        .await?;
    poll("the CA mended", || async {
        let cm = cms.get("kube-root-ca.crt").await?;
        Ok(cm.data.filter(|d| d.get("ca.crt").map(String::as_str) == Some(CA)))
    })
    .await?;
    manager.shutdown().await?;
    c.stop().await
}

#[tokio::test]
async fn aggregated_cluster_roles_follow_the_roles_they_select() -> anyhow::Result<()> {
    let c = Cluster::start().await?;
    let manager = c.manager().await?;
    let roles: Api<ClusterRole> = Api::all(c.client.clone());
    let pp = PostParams::default();
    let role = |v| serde_json::from_value::<ClusterRole>(v);
    roles
        .create(
            &pp,
            &role(json!({"metadata": {"name": "monitoring"},
                "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"example.com/aggregate-to-monitoring": "true"}}]}}))?,
        )
        .await?;
    roles
        .create(
            &pp,
            &role(json!({"metadata": {"name": "monitoring-endpoints", "labels": {"example.com/aggregate-to-monitoring": "true"}},
                "rules": [{"apiGroups": [""], "resources": ["services", "endpoints", "pods"], "verbs": ["get", "list", "watch"]}]}))?,
        )
        .await?;
    let rules =
        poll("aggregated rules", || async { Ok(roles.get("monitoring").await?.rules.filter(|r| !r.is_empty())) })
            .await?;
    assert_eq!(rules[0].resources.as_deref(), Some(&["services".to_string(), "endpoints".into(), "pods".into()][..]));
    // The source loses its label: its rules leave the aggregate.
    roles
        .patch(
            "monitoring-endpoints",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"example.com/aggregate-to-monitoring": null}}})),
        )
        .await?;
    poll("rules withdrawn", || async { Ok(roles.get("monitoring").await?.rules.filter(|r| r.is_empty()).map(|_| ())) })
        .await?;
    manager.shutdown().await?;
    c.stop().await
}
