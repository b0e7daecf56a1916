//! Root-only: a container in a user namespace gets its overlay rootfs and its bind mounts
//! idmapped (a mount's `uidMappings`/`gidMappings`, as runc 1.2 reads them), so files the
//! host's root owns are its root's — under both backends, since the mounts are made on the
//! host before runc (1.1, which has no idmapped mounts) sees the bundle.

mod common;

use std::os::unix::fs::MetadataExt;

use common::{can_run, stdout_of, Fixture};
use oci_spec::runtime::{LinuxIdMappingBuilder, LinuxNamespaceBuilder, LinuxNamespaceType, MountBuilder};

const HOST_BASE: u32 = 300000;

#[test]
fn the_rootfs_and_an_idmapped_bind_mount_belong_to_the_containers_root() -> anyhow::Result<()> {
    if !can_run() {
        return Ok(());
    }
    let mut fx = Fixture::new()?;
    let data = fx.dir.join("data");
    std::fs::create_dir_all(&data)?;
    std::fs::write(data.join("given"), "from the host\n")?;
    let map = || {
        vec![LinuxIdMappingBuilder::default()
            .container_id(0u32)
            .host_id(HOST_BASE)
            .size(65536u32)
            .build()
            .expect("map")]
    };
    let script = "stat -c %u /bin/busybox /data/given; cat /data/given; echo made > /data/made; \
                  echo root > /written && cat /written; cat /proc/self/uid_map | tr -s ' ' | sed 's/^ //'";
    let runc = fx.runc().expect("runc is installed");
    let backends: [(&str, &dyn kaji_runtime::ContainerRuntime); 2] = [("native", &fx.native()), ("runc", &runc)];
    for (name, rt) in backends {
        let id = format!("idmap-{name}");
        let mut spec = fx.spec(&id, script)?;
        let mut ann = std::collections::HashMap::new();
        ann.insert(kaji_runtime::spec::ANNOTATION_LOWERDIRS.to_string(), fx.rootfs.display().to_string());
        spec.set_annotations(Some(ann));
        common::edit_linux(&mut spec, |l| {
            let mut ns = l.namespaces().clone().unwrap_or_default();
            ns.push(LinuxNamespaceBuilder::default().typ(LinuxNamespaceType::User).build().expect("ns"));
            l.set_namespaces(Some(ns));
            l.set_uid_mappings(Some(map()));
            l.set_gid_mappings(Some(map()));
        })?;
        let mut mounts = spec.mounts().clone().unwrap_or_default();
        mounts.push(
            MountBuilder::default()
                .destination("/data")
                .typ("bind")
                .source(&data)
                .options(vec!["rbind".to_string(), "rw".to_string()])
                .uid_mappings(map())
                .gid_mappings(map())
                .build()?,
        );
        spec.set_mounts(Some(mounts));
        let (exit, log) = fx.run(rt, &id, &spec)?;
        assert_eq!(exit.code, 0, "{name}: {log:?}");
        let want = ["0", "0", "from the host", "root", &format!("0 {HOST_BASE} 65536")];
        assert_eq!(stdout_of(&log), want, "{name}");
        // Written through the idmapped mount by the container's root: the host's root on disk.
        assert_eq!(std::fs::metadata(data.join("made"))?.uid(), 0, "{name}");
        std::fs::remove_file(data.join("made"))?;
        assert!(!fx.rootfs.join("written").exists(), "{name}: write leaked into the lower layer");
        assert_eq!(fx.leftover_mounts(), Vec::<String>::new(), "{name}: mounts left behind");
    }
    fx.assert_clean();
    Ok(())
}
