//! `features` (what this runtime supports, in the runtime-spec's features JSON) and `spec` (a
//! default config.json, as `runc spec` writes it).

use std::path::Path;

use anyhow::{bail, Context};
use oci_spec::runtime::{LinuxIdMappingBuilder, LinuxNamespaceBuilder, LinuxNamespaceType, MountBuilder, Spec};
use serde_json::{json, Value};

use super::logging;

/// Mount options the runtime understands (see `rootfs::parse_options`).
pub const MOUNT_OPTIONS: &[&str] = &[
    "async",
    "atime",
    "bind",
    "defaults",
    "dev",
    "diratime",
    "dirsync",
    "exec",
    "iversion",
    "lazytime",
    "loud",
    "mand",
    "noatime",
    "nodev",
    "nodiratime",
    "noexec",
    "noiversion",
    "nolazytime",
    "nomand",
    "norelatime",
    "nostrictatime",
    "nosuid",
    "nosymfollow",
    "private",
    "ratime",
    "rbind",
    "rdev",
    "rdiratime",
    "relatime",
    "remount",
    "rexec",
    "rnoatime",
    "rnodev",
    "rnodiratime",
    "rnoexec",
    "rnorelatime",
    "rnostrictatime",
    "rnosuid",
    "rnosymfollow",
    "ro",
    "rprivate",
    "rrelatime",
    "rro",
    "rrw",
    "rshared",
    "rslave",
    "rstrictatime",
    "rsuid",
    "rsymfollow",
    "runbindable",
    "rw",
    "shared",
    "silent",
    "slave",
    "strictatime",
    "suid",
    "symfollow",
    "sync",
    "unbindable",
];

/// Pure: the features document (runtime-spec `features.md`), as `runc features` prints it.
pub fn document(libseccomp: &str) -> Value {
    let capabilities: Vec<String> =
        caps::all().iter().map(|c| c.to_string()).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
    json!({
        "ociVersionMin": "1.0.0",
        "ociVersionMax": crate::state::OCI_VERSION,
        "hooks": ["prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"],
        "mountOptions": MOUNT_OPTIONS,
        "linux": {
            "namespaces": ["cgroup", "ipc", "mount", "network", "pid", "user", "uts"],
            "capabilities": capabilities,
            "cgroup": {"v1": true, "v2": true, "systemd": true, "systemdUser": false},
            "seccomp": {
                "enabled": true,
                "actions": [
                    "SCMP_ACT_ALLOW", "SCMP_ACT_ERRNO", "SCMP_ACT_KILL", "SCMP_ACT_KILL_PROCESS",
                    "SCMP_ACT_KILL_THREAD", "SCMP_ACT_LOG", "SCMP_ACT_NOTIFY", "SCMP_ACT_TRACE", "SCMP_ACT_TRAP",
                ],
                "operators": [
                    "SCMP_CMP_EQ", "SCMP_CMP_GE", "SCMP_CMP_GT", "SCMP_CMP_LE", "SCMP_CMP_LT",
                    "SCMP_CMP_MASKED_EQ", "SCMP_CMP_NE",
                ],
                "archs": ["SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM", "SCMP_ARCH_X32", "SCMP_ARCH_X86", "SCMP_ARCH_X86_64"],
            },
            "netDevices": {"enabled": true},
            "apparmor": {"enabled": false},
            "selinux": {"enabled": false},
        },
        "annotations": {
            "io.github.seccomp.libseccomp.version": libseccomp,
            "io.kaji.runtime.version": env!("CARGO_PKG_VERSION"),
        },
    })
}

pub fn features() -> anyhow::Result<()> {
    let v = libseccomp::ScmpVersion::current().map(|v| format!("{}.{}.{}", v.major, v.minor, v.micro));
    let doc = document(&v.unwrap_or_default());
    logging::print(&format!("{}\n", serde_json::to_string_pretty(&doc)?));
    Ok(())
}

/// The config.json `runc spec` writes (runc 1.1).
const TEMPLATE: &str = r#"{
  "ociVersion": "1.0.2-dev",
  "process": {
    "terminal": true,
    "user": {
      "uid": 0,
      "gid": 0
    },
    "args": [
      "sh"
    ],
    "env": [
      "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
      "TERM=xterm"
    ],
    "cwd": "/",
    "capabilities": {
      "bounding": [
        "CAP_AUDIT_WRITE",
        "CAP_KILL",
        "CAP_NET_BIND_SERVICE"
      ],
      "effective": [
        "CAP_AUDIT_WRITE",
        "CAP_KILL",
        "CAP_NET_BIND_SERVICE"
      ],
      "permitted": [
        "CAP_AUDIT_WRITE",
        "CAP_KILL",
        "CAP_NET_BIND_SERVICE"
      ],
      "ambient": [
        "CAP_AUDIT_WRITE",
        "CAP_KILL",
        "CAP_NET_BIND_SERVICE"
      ]
    },
    "rlimits": [
      {
        "type": "RLIMIT_NOFILE",
        "hard": 1024,
        "soft": 1024
      }
    ],
    "noNewPrivileges": true
  },
  "root": {
    "path": "rootfs",
    "readonly": true
  },
  "hostname": "runc",
  "mounts": [
    {
      "destination": "/proc",
      "type": "proc",
      "source": "proc"
    },
    {
      "destination": "/dev",
      "type": "tmpfs",
      "source": "tmpfs",
      "options": [
        "nosuid",
        "strictatime",
        "mode=755",
        "size=65536k"
      ]
    },
    {
      "destination": "/dev/pts",
      "type": "devpts",
      "source": "devpts",
      "options": [
        "nosuid",
        "noexec",
        "newinstance",
        "ptmxmode=0666",
        "mode=0620",
        "gid=5"
      ]
    },
    {
      "destination": "/dev/shm",
      "type": "tmpfs",
      "source": "shm",
      "options": [
        "nosuid",
        "noexec",
        "nodev",
        "mode=1777",
        "size=65536k"
      ]
    },
    {
      "destination": "/dev/mqueue",
      "type": "mqueue",
      "source": "mqueue",
      "options": [
        "nosuid",
        "noexec",
        "nodev"
      ]
    },
    {
      "destination": "/sys",
      "type": "sysfs",
      "source": "sysfs",
      "options": [
        "nosuid",
        "noexec",
        "nodev",
        "ro"
      ]
    },
    {
      "destination": "/sys/fs/cgroup",
      "type": "cgroup",
      "source": "cgroup",
      "options": [
        "nosuid",
        "noexec",
        "nodev",
        "relatime",
        "ro"
      ]
    }
  ],
  "linux": {
    "resources": {
      "devices": [
        {
          "allow": false,
          "access": "rwm"
        }
      ]
    },
    "namespaces": [
      {
        "type": "pid"
      },
      {
        "type": "network"
      },
      {
        "type": "ipc"
      },
      {
        "type": "uts"
      },
      {
        "type": "mount"
      }
    ],
    "maskedPaths": [
      "/proc/acpi",
      "/proc/asound",
      "/proc/kcore",
      "/proc/keys",
      "/proc/latency_stats",
      "/proc/timer_list",
      "/proc/timer_stats",
      "/proc/sched_debug",
      "/sys/firmware",
      "/proc/scsi"
    ],
    "readonlyPaths": [
      "/proc/bus",
      "/proc/fs",
      "/proc/irq",
      "/proc/sys",
      "/proc/sysrq-trigger"
    ]
  }
}"#;

/// Pure: `runc spec`'s default ([`TEMPLATE`]), or with `rootless`
/// the same turned into one for an unprivileged user (`specconv.ToRootless`): a user namespace
/// mapping `uid`/`gid` to root, no network namespace, /sys bind-mounted, no cgroup limits.
pub fn default_spec(rootless: Option<(u32, u32)>) -> anyhow::Result<Spec> {
    let mut spec: Spec = serde_json::from_str(TEMPLATE)?;
    let Some((uid, gid)) = rootless else { return Ok(spec) };
    let linux = spec.linux_mut().as_mut().context("default spec without linux")?;
    let mut namespaces: Vec<_> = linux
        .namespaces()
        .iter()
        .flatten()
        .filter(|n| !matches!(n.typ(), LinuxNamespaceType::Network | LinuxNamespaceType::User))
        .cloned()
        .collect();
    namespaces.push(LinuxNamespaceBuilder::default().typ(LinuxNamespaceType::User).build()?);
    linux.set_namespaces(Some(namespaces));
    let map = |host: u32| LinuxIdMappingBuilder::default().host_id(host).container_id(0u32).size(1u32).build();
    linux.set_uid_mappings(Some(vec![map(uid)?]));
    linux.set_gid_mappings(Some(vec![map(gid)?]));
    linux.set_resources(None);
    let mut mounts: Vec<_> = spec
        .mounts()
        .iter()
        .flatten()
        .filter(|m| !m.destination().starts_with("/sys"))
        .cloned()
        .map(|mut m| {
            let options: Vec<String> = m
                .options()
                .iter()
                .flatten()
                .filter(|o| !o.starts_with("gid=") && !o.starts_with("uid="))
                .cloned()
                .collect();
            m.set_options(Some(options));
            m
        })
        .collect();
    mounts.push(
        MountBuilder::default()
            .destination("/sys")
            .typ("none")
            .source("/sys")
            .options(["rbind", "nosuid", "noexec", "nodev", "ro"].map(String::from).to_vec())
            .build()?,
    );
    spec.set_mounts(Some(mounts));
    Ok(spec)
}

pub fn spec(bundle: &Path, rootless: bool) -> anyhow::Result<()> {
    let path = bundle.join("config.json");
    if path.exists() {
        bail!("File {} exists. Remove it first", path.display());
    }
    // runc's own text (its key and list order), unless it must be changed.
    let text = match rootless {
        false => TEMPLATE.as_bytes().to_vec(),
        true => {
            let ids = (nix::unistd::geteuid().as_raw(), nix::unistd::getegid().as_raw());
            serde_json::to_vec_pretty(&default_spec(Some(ids))?)?
        }
    };
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `runc spec`'s template: the parts a user relies on.
    #[test]
    fn the_default_spec_is_runcs() -> anyhow::Result<()> {
        let v = serde_json::to_value(default_spec(None)?)?;
        assert_eq!(v["process"]["args"], json!(["sh"]));
        assert_eq!(v["process"]["terminal"], true);
        assert_eq!(v["root"], json!({"path": "rootfs", "readonly": true}));
        assert_eq!(v["hostname"], "runc");
        let kinds: Vec<&str> =
            v["mounts"].as_array().into_iter().flatten().filter_map(|m| m["type"].as_str()).collect();
        assert!(kinds.contains(&"cgroup"), "{kinds:?}");
        assert_eq!(v["linux"]["resources"]["devices"], json!([{"allow": false, "access": "rwm"}]));
        assert_eq!(v["process"]["capabilities"]["ambient"].as_array().map(Vec::len), Some(3));
        Ok(())
    }

    #[test]
    fn a_rootless_spec_maps_the_user_to_root_and_keeps_no_limits() -> anyhow::Result<()> {
        let v = serde_json::to_value(default_spec(Some((1000, 1001)))?)?;
        assert_eq!(v["linux"]["uidMappings"], json!([{"containerID": 0, "hostID": 1000, "size": 1}]));
        assert_eq!(v["linux"]["gidMappings"], json!([{"containerID": 0, "hostID": 1001, "size": 1}]));
        let kinds: Vec<&str> =
            v["linux"]["namespaces"].as_array().into_iter().flatten().filter_map(|n| n["type"].as_str()).collect();
        assert!(kinds.contains(&"user") && !kinds.contains(&"network"), "{kinds:?}");
        assert!(v["linux"].get("resources").is_none_or(Value::is_null));
        let sys = v["mounts"].as_array().into_iter().flatten().find(|m| m["destination"] == "/sys").cloned();
        assert_eq!(sys.map(|m| m["type"].clone()), Some(json!("none")));
        Ok(())
    }

    #[test]
    fn features_list_what_runc_lists() {
        let doc = document("2.5.4");
        assert_eq!(doc["linux"]["cgroup"]["v2"], true);
        assert!(doc["mountOptions"].as_array().is_some_and(|o| o.contains(&json!("rsuid"))));
        assert_eq!(doc["linux"]["netDevices"]["enabled"], true);
        assert!(doc["linux"]["capabilities"].as_array().is_some_and(|c| c.contains(&json!("CAP_SYS_ADMIN"))));
    }
}
