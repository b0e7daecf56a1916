//! A pod's volumes on the node: emptyDir (disk or tmpfs), hostPath, persistentVolumeClaim (the
//! bound PersistentVolume's hostPath or local directory), configMap, secret,
//! downwardAPI and projected files (with ServiceAccount tokens) written atomically (`..data` swap, as kubelet's AtomicWriter),
//! the pod's /etc/hosts, /etc/resolv.conf and /etc/hostname, and the teardown of all of it.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use k8s_openapi::api::core::v1::{KeyToPath, Pod, Volume};
use nix::mount::{MntFlags, MsFlags};

use crate::env::{self, ClaimState, Refs};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A configuration problem the user must fix (shown as the pod's waiting message).
    #[error("{0}")]
    Config(String),
    #[error("failed to {op} {path}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to {op} {path}")]
    Sys {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: nix::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::Io { op, path: path.to_path_buf(), source }
}

/// Where one pod's files live: `<pods_dir>/<uid>`.
#[derive(Clone, Debug)]
pub struct PodDir(pub PathBuf);

impl PodDir {
    pub fn volume(&self, name: &str) -> PathBuf {
        self.0.join("volumes").join(name)
    }
    pub fn hosts(&self) -> PathBuf {
        self.0.join("etc-hosts")
    }
    pub fn resolv_conf(&self) -> PathBuf {
        self.0.join("resolv.conf")
    }
    pub fn hostname(&self) -> PathBuf {
        self.0.join("hostname")
    }
    /// The host file bind-mounted at a container's terminationMessagePath.
    pub fn termination_log(&self, container: &str, restart: u32) -> PathBuf {
        self.0.join("termination").join(format!("{container}-{restart}"))
    }
}

/// Sets every volume up (idempotent) and returns the host path of each, by volume name.
pub fn ensure(dir: &PodDir, pod: &Pod, refs: &Refs, node: &env::Node) -> Result<HashMap<String, PathBuf>> {
    let mut paths = HashMap::new();
    for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        paths.insert(v.name.clone(), ensure_one(dir, pod, v, refs, node)?);
    }
    Ok(paths)
}

fn ensure_one(dir: &PodDir, pod: &Pod, v: &Volume, refs: &Refs, node: &env::Node) -> Result<PathBuf> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    if let Some(hp) = &v.host_path {
        return host_path(&hp.path, hp.type_.as_deref().unwrap_or(""));
    }
    if let Some(c) = &v.persistent_volume_claim {
        return claim_path(&c.claim_name, refs.claims.get(&c.claim_name));
    }
    let path = dir.volume(&v.name);
    std::fs::create_dir_all(&path).map_err(io("create", &path))?;
    // Secrets and tokens are root's alone on the host, as under kubelet's 0750 pods dir.
    let all = dir.0.join("volumes");
    std::fs::set_permissions(&all, std::fs::Permissions::from_mode(0o750)).map_err(io("chmod", &all))?;
    if let Some(e) = &v.empty_dir {
        if e.medium.as_deref() == Some("Memory") && !is_mountpoint(&path) {
            let size = e.size_limit.as_ref().and_then(|q| crate::node::parse_bytes(&q.0));
            let data = match size {
                Some(b) => format!("mode=0777,size={b}"),
                None => "mode=0777".to_string(),
            };
            nix::mount::mount(
                Some("tmpfs"),
                &path,
                Some("tmpfs"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
                Some(data.as_str()),
            )
            .map_err(|source| Error::Sys { op: "mount tmpfs on", path: path.clone(), source })?;
        } else {
            let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777));
        }
        return Ok(path);
    }
    if (v.secret.is_some() || v.projected.is_some()) && !is_mountpoint(&path) {
        // As kubelet: Secrets and tokens live in memory (a tmpfs per volume), never on the disk.
        // nosuid and nodev as every bind of a volume has them; not noexec (kubelet's has none):
        // in a `hostUsers: false` pod a flag of the source is locked, and the bind's remount,
        // which does not ask for noexec, would be refused.
        nix::mount::mount(
            Some("tmpfs"),
            &path,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some("mode=0755"),
        )
        .map_err(|source| Error::Sys { op: "mount tmpfs on", path: path.clone(), source })?;
    }
    let mut files: BTreeMap<String, (Vec<u8>, u32)> = BTreeMap::new();
    let mode_of = |m: Option<i32>| m.unwrap_or(0o644) as u32;
    if let Some(c) = &v.config_map {
        let r = Ref { kind: Kind::ConfigMap, name: &c.name, optional: c.optional, items: c.items.as_deref() };
        project_ref(&mut files, refs, r, mode_of(c.default_mode), ns)?;
    } else if let Some(s) = &v.secret {
        let name = s.secret_name.as_deref().unwrap_or_default();
        let r = Ref { kind: Kind::Secret, name, optional: s.optional, items: s.items.as_deref() };
        project_ref(&mut files, refs, r, mode_of(s.default_mode), ns)?;
    } else if let Some(d) = &v.downward_api {
        downward(&mut files, pod, d.items.as_deref().unwrap_or(&[]), mode_of(d.default_mode), node)?;
    } else if let Some(p) = &v.projected {
        let mode = mode_of(p.default_mode);
        for (i, src) in p.sources.iter().flatten().enumerate() {
            if let Some(t) = &src.service_account_token {
                if safe_relative(&t.path).is_none() {
                    return Err(Error::Config(format!("invalid serviceAccountToken path {:?}", t.path)));
                }
                let token = match refs.tokens.get(&env::token_key(&v.name, i)) {
                    Some(Ok(token)) => token,
                    Some(Err(e)) => return Err(Error::Config(format!("failed to fetch token: {e}"))),
                    None => return Err(Error::Config("failed to fetch token: not requested yet".into())),
                };
                files.insert(t.path.clone(), (token.clone().into_bytes(), mode));
            }
            if let Some(c) = &src.config_map {
                let r = Ref { kind: Kind::ConfigMap, name: &c.name, optional: c.optional, items: c.items.as_deref() };
                project_ref(&mut files, refs, r, mode, ns)?;
            }
            if let Some(s) = &src.secret {
                let r = Ref { kind: Kind::Secret, name: &s.name, optional: s.optional, items: s.items.as_deref() };
                project_ref(&mut files, refs, r, mode, ns)?;
            }
            if let Some(d) = &src.downward_api {
                downward(&mut files, pod, d.items.as_deref().unwrap_or(&[]), mode, node)?;
            }
        }
    } else {
        return Err(Error::Config(format!("volume {:?}: unsupported volume type", v.name)));
    }
    write_atomic(&path, &files)?;
    Ok(path)
}

#[derive(Clone, Copy)]
enum Kind {
    ConfigMap,
    Secret,
}

/// A configMap or secret source of a volume.
#[derive(Clone, Copy)]
struct Ref<'a> {
    kind: Kind,
    name: &'a str,
    optional: Option<bool>,
    items: Option<&'a [KeyToPath]>,
}

/// Adds a ConfigMap's or Secret's keys to `files`; a missing one is an error unless optional.
fn project_ref(
    files: &mut BTreeMap<String, (Vec<u8>, u32)>,
    refs: &Refs,
    r: Ref<'_>,
    mode: u32,
    ns: &str,
) -> Result<()> {
    let (data, kind, lower) = match r.kind {
        Kind::ConfigMap => (
            refs.config_map(r.name).map(|d| d.iter().map(|(k, v)| (k.clone(), v.clone().into_bytes())).collect()),
            "ConfigMap",
            "configmap",
        ),
        Kind::Secret => (refs.secret(r.name).cloned(), "Secret", "secret"),
    };
    match data {
        Some(data) => project(files, &data, r.items, mode, kind, ns, r.name),
        None if r.optional.unwrap_or(false) => Ok(()),
        None => Err(Error::Config(format!("{lower} \"{}\" not found", r.name))),
    }
}

/// The node directory of a claim's bound volume (a local-path volume's directory is made here,
/// on the node, the first time a pod uses it); an unbound or missing claim waits.
fn claim_path(name: &str, state: Option<&ClaimState>) -> Result<PathBuf> {
    match state {
        None | Some(ClaimState::Missing) => Err(Error::Config(format!("persistentvolumeclaim {name:?} not found"))),
        Some(ClaimState::Unbound) => Err(Error::Config(format!("persistentvolumeclaim {name:?} is not bound"))),
        Some(ClaimState::Bound { volume, path: None }) => Err(Error::Config(format!(
            "persistentvolume {volume:?} of claim {name:?} has no hostPath or local path the node can mount"
        ))),
        Some(ClaimState::Bound { path: Some(p), .. }) => {
            // World-writable as local-path-provisioner makes it, so non-root containers can write.
            let fresh = !Path::new(p).exists();
            let dir = host_path(p, "DirectoryOrCreate")?;
            if fresh {
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).map_err(io("chmod", &dir))?;
            }
            Ok(dir)
        }
    }
}

fn host_path(path: &str, kind: &str) -> Result<PathBuf> {
    let p = PathBuf::from(path);
    let meta = std::fs::metadata(&p).ok();
    let bad = |what: &str| Err(Error::Config(format!("hostPath type check failed: {path} is not a {what}")));
    use std::os::unix::fs::FileTypeExt;
    match kind {
        "DirectoryOrCreate" => {
            if meta.is_none() {
                std::fs::create_dir_all(&p).map_err(io("create", &p))?;
                let _ = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755));
            } else if !meta.as_ref().is_some_and(|m| m.is_dir()) {
                return bad("directory");
            }
        }
        "FileOrCreate" => {
            if meta.is_none() {
                if let Some(parent) = p.parent() {
                    std::fs::create_dir_all(parent).map_err(io("create", parent))?;
                }
                std::fs::OpenOptions::new().create(true).append(true).mode(0o644).open(&p).map_err(io("create", &p))?;
            } else if !meta.as_ref().is_some_and(|m| m.is_file()) {
                return bad("file");
            }
        }
        "Directory" if !meta.as_ref().is_some_and(|m| m.is_dir()) => return bad("directory"),
        "File" if !meta.as_ref().is_some_and(|m| m.is_file()) => return bad("file"),
        "Socket" if !meta.as_ref().is_some_and(|m| m.file_type().is_socket()) => return bad("socket"),
        "CharDevice" if !meta.as_ref().is_some_and(|m| m.file_type().is_char_device()) => {
            return bad("character device")
        }
        "BlockDevice" if !meta.as_ref().is_some_and(|m| m.file_type().is_block_device()) => return bad("block device"),
        _ => {}
    }
    Ok(p)
}

/// A relative path inside a volume: no absolute paths, no `..`.
pub fn safe_relative(path: &str) -> Option<PathBuf> {
    let p = Path::new(path);
    if path.is_empty() || !p.components().all(|c| matches!(c, Component::Normal(_))) {
        return None;
    }
    Some(p.to_path_buf())
}

fn project(
    files: &mut BTreeMap<String, (Vec<u8>, u32)>,
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&[KeyToPath]>,
    mode: u32,
    kind: &str,
    ns: &str,
    name: &str,
) -> Result<()> {
    match items {
        None => {
            for (k, v) in data {
                files.insert(k.clone(), (v.clone(), mode));
            }
        }
        Some(items) => {
            for item in items {
                let Some(v) = data.get(&item.key) else {
                    return Err(Error::Config(format!("couldn't find key {} in {kind} {ns}/{name}", item.key)));
                };
                if safe_relative(&item.path).is_none() {
                    return Err(Error::Config(format!("invalid path {:?} for key {}", item.path, item.key)));
                }
                files.insert(item.path.clone(), (v.clone(), item.mode.map(|m| m as u32).unwrap_or(mode)));
            }
        }
    }
    Ok(())
}

fn downward(
    files: &mut BTreeMap<String, (Vec<u8>, u32)>,
    pod: &Pod,
    items: &[k8s_openapi::api::core::v1::DownwardAPIVolumeFile],
    mode: u32,
    node: &env::Node,
) -> Result<()> {
    for item in items {
        if safe_relative(&item.path).is_none() {
            return Err(Error::Config(format!("invalid downwardAPI path {:?}", item.path)));
        }
        let value = if let Some(f) = &item.field_ref {
            env::field_value(pod, &f.field_path, node).map_err(Error::Config)?
        } else if let Some(r) = &item.resource_field_ref {
            let name = r.container_name.clone().unwrap_or_default();
            let c = pod
                .spec
                .iter()
                .flat_map(|s| s.containers.iter())
                .find(|c| c.name == name)
                .ok_or_else(|| Error::Config(format!("resourceFieldRef names unknown container {name:?}")))?;
            env::resource_value(c, &r.resource, r.divisor.as_ref().map(|d| d.0.as_str()), node)
                .map_err(Error::Config)?
        } else {
            continue;
        };
        files.insert(item.path.clone(), (value.into_bytes(), item.mode.map(|m| m as u32).unwrap_or(mode)));
    }
    Ok(())
}

/// Writes `files` into `dir` as kubelet does: a fresh timestamped directory, `..data` switched
/// to it by one rename, and a symlink per top-level entry through `..data`. Readers never see a
/// half-written set; unchanged content is left alone.
pub fn write_atomic(dir: &Path, files: &BTreeMap<String, (Vec<u8>, u32)>) -> Result<()> {
    let data_link = dir.join("..data");
    if let Ok(current) = std::fs::read_link(&data_link) {
        if same_content(&dir.join(&current), files) {
            return Ok(());
        }
    }
    let stamp = format!("..{}.{:08x}", jiff::Timestamp::now().as_millisecond(), fastrand::u32(..));
    let target = dir.join(&stamp);
    std::fs::create_dir(&target).map_err(io("create", &target))?;
    for (rel, (content, mode)) in files {
        let p = target.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).map_err(io("create", parent))?;
        }
        std::fs::write(&p, content).map_err(io("write", &p))?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(*mode & 0o777)).map_err(io("chmod", &p))?;
    }
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&stamp, &tmp).map_err(io("link", &tmp))?;
    let old = std::fs::read_link(&data_link).ok();
    std::fs::rename(&tmp, &data_link).map_err(io("switch", &data_link))?;
    let tops: std::collections::BTreeSet<String> =
        files.keys().filter_map(|k| k.split('/').next().map(str::to_string)).collect();
    for top in &tops {
        let link = dir.join(top);
        if std::fs::read_link(&link).is_err() {
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(Path::new("..data").join(top), &link).map_err(io("link", &link))?;
        }
    }
    for e in std::fs::read_dir(dir).map_err(io("list", dir))?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("..") || tops.contains(&name) {
            continue;
        }
        let _ = std::fs::remove_file(e.path());
    }
    if let Some(old) = old {
        let _ = std::fs::remove_dir_all(dir.join(old));
    }
    Ok(())
}

fn same_content(dir: &Path, files: &BTreeMap<String, (Vec<u8>, u32)>) -> bool {
    let mut count = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.path().is_dir() {
                stack.push(e.path());
            } else {
                count += 1;
            }
        }
    }
    count == files.len()
        && files.iter().all(|(rel, (content, mode))| {
            let p = dir.join(rel);
            std::fs::read(&p).is_ok_and(|c| &c == content)
                && std::fs::metadata(&p).is_ok_and(|m| m.permissions().mode() & 0o777 == mode & 0o777)
        })
}

/// True when `path` is a mount point (listed in the calling thread's mountinfo).
pub fn is_mountpoint(path: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/thread-self/mountinfo").unwrap_or_default();
    let want = path.to_string_lossy();
    info.lines().any(|l| l.split(' ').nth(4) == Some(want.as_ref()))
}

/// The pod's hostname as kubelet's GeneratePodHostNameAndDomain gives it: `spec.hostname`, else
/// the pod's name, cut to 63 characters (a UTS hostname's limit is 64) without a trailing `-` or
/// `.` (truncatePodHostnameIfNeeded). A longer one made sethostname fail and the pod never start.
pub fn pod_hostname(pod: &Pod) -> String {
    let spec = pod.spec.as_ref();
    let name = spec.and_then(|s| s.hostname.clone()).filter(|h| !h.is_empty());
    let name = name.unwrap_or_else(|| pod.metadata.name.clone().unwrap_or_default());
    if name.len() <= 63 {
        return name;
    }
    name[..63].trim_end_matches(['-', '.']).to_string()
}

/// Writes the pod's /etc/hosts, /etc/resolv.conf (per its dnsPolicy, `dns`) and /etc/hostname;
/// returns the DNS warnings (kubelet's events) when resolv.conf was (re)written.
pub fn write_etc(dir: &PodDir, pod: &Pod, pod_ip: &str, host: &crate::Config) -> Result<Vec<crate::dns::Warning>> {
    std::fs::create_dir_all(&dir.0).map_err(io("create", &dir.0))?;
    let spec = pod.spec.clone().unwrap_or_default();
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let hostname = pod_hostname(pod);
    let host_network = spec.host_network.unwrap_or(false);
    let hosts = if host_network {
        std::fs::read_to_string("/etc/hosts").unwrap_or_default()
    } else {
        let mut h = String::from(
            "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n\
             fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n",
        );
        if !pod_ip.is_empty() {
            match &spec.subdomain {
                Some(sub) if !sub.is_empty() => {
                    h.push_str(&format!("{pod_ip}\t{hostname}.{sub}.{ns}.svc.{} {hostname}\n", host.cluster_domain))
                }
                _ => h.push_str(&format!("{pod_ip}\t{hostname}\n")),
            }
        }
        for a in spec.host_aliases.iter().flatten() {
            let names = a.hostnames.clone().unwrap_or_default().join("\t");
            h.push_str(&format!("\n# Entries added by HostAliases.\n{}\t{names}\n", a.ip));
        }
        h
    };
    let host_resolv = if host.resolv_conf.as_os_str().is_empty() {
        None
    } else {
        Some(std::fs::read_to_string(&host.resolv_conf).unwrap_or_else(|e| {
            tracing::warn!(path = %host.resolv_conf.display(), error = %e, "cannot read the node's resolv.conf");
            String::new()
        }))
    };
    let node = crate::dns::Node {
        resolv_conf: host_resolv.as_deref(),
        cluster_dns: &host.cluster_dns,
        cluster_domain: &host.cluster_domain,
        ipv6: host.node_ip.is_ipv6(),
    };
    let (resolv, mut dns_warnings) = crate::dns::for_pod(pod, node);
    let resolv = resolv.render();
    if std::fs::read(dir.resolv_conf()).is_ok_and(|old| old == resolv.as_bytes()) {
        // Written before: its warnings were reported then.
        dns_warnings.clear();
    }
    for (path, content) in
        [(dir.hosts(), hosts), (dir.resolv_conf(), resolv), (dir.hostname(), format!("{hostname}\n"))]
    {
        // Every sync calls this; unchanged files are left alone (containers bind-mount them).
        if std::fs::read(&path).is_ok_and(|old| old == content.as_bytes()) {
            continue;
        }
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, content).map_err(io("write", &tmp))?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644)).map_err(io("chmod", &tmp))?;
        std::fs::rename(&tmp, &path).map_err(io("write", &path))?;
    }
    Ok(dns_warnings)
}

/// Unmounts the pod's subPath binds and tmpfs volumes and removes its directory — never through a
/// mount still there (that would delete what a bind shows: a volume's, or the node's, files).
pub fn teardown(dir: &PodDir) -> Result<()> {
    crate::subpath::cleanup(dir).map_err(|e| Error::Config(format!("cannot unmount the pod's subPaths: {e}")))?;
    let volumes = dir.0.join("volumes");
    for e in std::fs::read_dir(&volumes).into_iter().flatten().flatten() {
        if is_mountpoint(&e.path()) {
            nix::mount::umount2(&e.path(), MntFlags::MNT_DETACH).map_err(|source| Error::Sys {
                op: "unmount",
                path: e.path(),
                source,
            })?;
        }
    }
    if let Some(left) = crate::subpath::mounts_under(&dir.0).first() {
        return Err(Error::Config(format!("{} is still mounted: the pod directory is kept", left.display())));
    }
    match std::fs::remove_dir_all(&dir.0) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(Error::Io { op: "remove", path: dir.0.clone(), source }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_name_past_63_characters_is_cut_to_a_hostname_as_the_kubelet_cuts_it() {
        let pod = |name: &str, hostname: Option<&str>| -> Pod {
            serde_json::from_value(
                serde_json::json!({"metadata": {"name": name}, "spec": {"containers": [], "hostname": hostname}}),
            )
            .expect("pod")
        };
        let long = format!("termination-message-container-{}", "a".repeat(40));
        assert_eq!(pod_hostname(&pod(&long, None)), long[..63]);
        let dashed = format!("{}-{}", "b".repeat(62), "c".repeat(10));
        assert_eq!(pod_hostname(&pod(&dashed, None)), "b".repeat(62), "no trailing dash");
        assert_eq!(pod_hostname(&pod("web-0", Some("web-0"))), "web-0");
        assert_eq!(pod_hostname(&pod("web-0", None)), "web-0");
    }

    fn files(pairs: &[(&str, &str, u32)]) -> BTreeMap<String, (Vec<u8>, u32)> {
        pairs.iter().map(|(k, v, m)| (k.to_string(), (v.as_bytes().to_vec(), *m))).collect()
    }

    #[test]
    fn atomic_writer_switches_data_and_drops_removed_keys() {
        let dir = tempfile::tempdir().expect("temp dir");
        write_atomic(dir.path(), &files(&[("a", "1", 0o644), ("sub/b", "2", 0o600)])).expect("writes");
        assert_eq!(std::fs::read_to_string(dir.path().join("a")).expect("a"), "1");
        assert_eq!(std::fs::read_to_string(dir.path().join("sub/b")).expect("b"), "2");
        let mode = std::fs::metadata(dir.path().join("sub/b")).expect("b").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let first = std::fs::read_link(dir.path().join("..data")).expect("data link");
        write_atomic(dir.path(), &files(&[("a", "1", 0o644), ("sub/b", "2", 0o600)])).expect("writes");
        assert_eq!(std::fs::read_link(dir.path().join("..data")).expect("data link"), first, "unchanged: no swap");
        write_atomic(dir.path(), &files(&[("a", "changed", 0o644)])).expect("writes");
        assert_eq!(std::fs::read_to_string(dir.path().join("a")).expect("a"), "changed");
        assert!(!dir.path().join("sub").exists(), "removed key's link is gone");
        assert!(!dir.path().join(&first).exists(), "old data dir removed");
    }

    #[test]
    fn a_projected_token_is_written_with_the_other_sources_or_the_volume_waits() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "app", "uid": "u1"},
            "spec": {"containers": [], "volumes": [{"name": "kube-api-access-x", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
            ]}}]},
        }))
        .expect("pod");
        let root = tempfile::tempdir().expect("temp dir");
        let dir = PodDir(root.path().to_path_buf());
        let mut refs = Refs::default();
        let err = ensure(&dir, &pod, &refs, &env::Node::default()).expect_err("no token yet");
        assert!(matches!(&err, Error::Config(m) if m.starts_with("failed to fetch token")), "{err}");
        refs.tokens.insert(env::token_key("kube-api-access-x", 0), Err("forbidden".into()));
        let err = ensure(&dir, &pod, &refs, &env::Node::default()).expect_err("refused");
        assert_eq!(err.to_string(), "failed to fetch token: forbidden");
        refs.tokens.insert(env::token_key("kube-api-access-x", 0), Ok("a.b.c".into()));
        let paths = ensure(&dir, &pod, &refs, &env::Node::default()).expect("written");
        let vol = &paths["kube-api-access-x"];
        assert_eq!(std::fs::read_to_string(vol.join("token")).expect("token"), "a.b.c");
        assert_eq!(std::fs::read_to_string(vol.join("namespace")).expect("namespace"), "app");
        assert_eq!(std::fs::read_link(vol.join("token")).expect("link"), Path::new("..data/token"));
    }

    #[test]
    fn item_paths_must_stay_inside_the_volume() {
        assert!(safe_relative("conf/app.yaml").is_some());
        assert!(safe_relative("../etc/passwd").is_none());
        assert!(safe_relative("/etc/passwd").is_none());
        assert!(safe_relative("").is_none());
        let data = BTreeMap::from([("k".to_string(), b"v".to_vec())]);
        let mut out = BTreeMap::new();
        let items = [KeyToPath { key: "k".into(), path: "../x".into(), mode: None, user: None }];
        assert!(matches!(
            project(&mut out, &data, Some(&items), 0o644, "ConfigMap", "ns", "cm"),
            Err(Error::Config(_))
        ));
        let items = [KeyToPath { key: "missing".into(), path: "x".into(), mode: None, user: None }];
        let err = project(&mut out, &data, Some(&items), 0o644, "ConfigMap", "ns", "cm").expect_err("missing key");
        assert_eq!(err.to_string(), "couldn't find key missing in ConfigMap ns/cm");
    }

    #[test]
    fn claims_mount_their_bound_volume_or_wait() {
        let dir = tempfile::tempdir().expect("tempdir");
        let at = dir.path().join("pvc-1_default_data-web-0");
        let bound = ClaimState::Bound { volume: "pvc-1".into(), path: Some(at.to_str().expect("utf8").into()) };
        assert_eq!(claim_path("data-web-0", Some(&bound)).expect("mounts"), at);
        assert!(at.is_dir(), "a local-path directory is made on first use");
        let waiting = |s: Option<&ClaimState>| match claim_path("c", s) {
            Err(Error::Config(m)) => m,
            other => panic!("expected a config error, got {other:?}"),
        };
        assert_eq!(waiting(None), "persistentvolumeclaim \"c\" not found");
        assert_eq!(waiting(Some(&ClaimState::Unbound)), "persistentvolumeclaim \"c\" is not bound");
        assert!(waiting(Some(&ClaimState::Bound { volume: "nfs".into(), path: None })).contains("no hostPath"));
    }

    #[test]
    fn host_path_types_are_checked_or_created() {
        let dir = tempfile::tempdir().expect("temp dir");
        let d = dir.path().join("made/here");
        host_path(d.to_str().expect("utf8"), "DirectoryOrCreate").expect("creates");
        assert!(d.is_dir());
        let f = dir.path().join("f");
        host_path(f.to_str().expect("utf8"), "FileOrCreate").expect("creates");
        assert!(f.is_file());
        assert!(host_path(f.to_str().expect("utf8"), "Directory").is_err());
        assert!(host_path(dir.path().join("nope").to_str().expect("utf8"), "File").is_err());
    }
}
