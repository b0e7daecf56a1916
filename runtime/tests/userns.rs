//! User namespaces through the runc command line, kaji-runtime against runc: a stock `spec`
//! bundle with `linux.namespaces` type `user` and uid/gid mappings runs with the container's
//! root mapped to the given host ids — not the host's root — for its init and for `exec`.
//! Root only, needs busybox-static and runc.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use common::{Cli, Fixture};
use serde_json::{json, Value};

/// Host ids the container's 0..65536 map to.
const HOST_BASE: u32 = 100000;

/// A `spec` bundle for `cli` with a user namespace, running `script`; `secret` (the host root's,
/// mode 0600) bound at /secret; its cgroup under the fixture's parent.
fn bundle(fx: &Fixture, cli: Cli, id: &str, script: &str, secret: &Path) -> anyhow::Result<PathBuf> {
    let dir = fx.dir.join(id);
    common::busybox_rootfs(&dir.join("rootfs"))?;
    // Its mount point: the rootfs is the host root's, which the container's root cannot write
    // to (runc refuses to make it there too).
    std::fs::write(dir.join("rootfs/secret"), "")?;
    let st = cli.cmd(fx, &["spec", "--bundle", &dir.display().to_string()]).status()?;
    anyhow::ensure!(st.success(), "{cli:?} spec");
    let path = dir.join("config.json");
    let mut v: Value = serde_json::from_slice(&std::fs::read(&path)?)?;
    v["process"]["terminal"] = json!(false);
    v["process"]["args"] = json!(["sh", "-c", script]);
    // Raised (lowering it from inside a user namespace is refused: runc 1.1 fails there).
    v["process"]["oomScoreAdj"] = json!(100);
    let map = json!([{"containerID": 0, "hostID": HOST_BASE, "size": 65536}]);
    v["linux"]["uidMappings"] = map.clone();
    v["linux"]["gidMappings"] = map;
    v["linux"]["namespaces"].as_array_mut().expect("namespaces").push(json!({"type": "user"}));
    v["linux"]["cgroupsPath"] = json!(format!("/{}/{id}", fx.cgroup_parent));
    v["mounts"].as_array_mut().expect("mounts").push(json!({
        "destination": "/secret", "type": "bind", "source": secret, "options": ["bind", "ro"]
    }));
    std::fs::write(&path, serde_json::to_vec_pretty(&v)?)?;
    Ok(dir)
}

/// `create` of [`bundle`] `id` running `sleep 60`, recorded for the fixture's cleanup.
fn created_sleeping(fx: &mut Fixture, cli: Cli, id: &str, secret: &Path) -> anyhow::Result<()> {
    fx.created.push(id.to_string());
    let dir = bundle(fx, cli, id, "sleep 60", secret)?;
    let mut create = cli.cmd(fx, &["create", "--bundle", &dir.display().to_string(), id]);
    let st = create.stdout(Stdio::null()).stderr(Stdio::null()).status()?;
    anyhow::ensure!(st.success(), "{cli:?} create");
    Ok(())
}

#[test]
fn the_containers_root_is_the_mapped_host_id_in_its_init_and_in_exec() -> anyhow::Result<()> {
    common::require_cli();
    let mut fx = Fixture::new()?;
    let secret = fx.dir.join("secret");
    std::fs::write(&secret, "host root only\n")?;
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600))?;
    let probe = "id; cat /proc/self/uid_map /proc/self/gid_map; ls -ln /bin/busybox /dev/null | cut -c1-40; \
                 grep CapEff /proc/self/status; cat /secret 2>&1; echo x > /dev/null && echo dev-null-writable; \
                 touch /dev/shm/x && ls -ln /dev/shm/x | cut -c1-40; ls /sys/fs/cgroup | head -2; \
                 cat /proc/self/oom_score_adj; hostname";
    let mut seen = Vec::new();
    for cli in Cli::both() {
        let id = cli.id("userns");
        fx.created.push(id.clone());
        let dir = bundle(&fx, cli, &id, probe, &secret)?;
        let out = cli.cmd(&fx, &["run", "--bundle", &dir.display().to_string(), &id]).output()?;
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{cli:?}: {err}");
        seen.push(String::from_utf8_lossy(&out.stdout).into_owned());

        // exec joins the user namespace: the same mapped root.
        let id = cli.id("userns-exec");
        created_sleeping(&mut fx, cli, &id, &secret)?;
        cli.out(&fx, &["start", &id])?;
        let exec = cli.out(&fx, &["exec", &id, "sh", "-c", "id; cat /proc/self/uid_map; cat /secret 2>&1; true"])?;
        seen.push(exec);
        cli.out(&fx, &["delete", "--force", &id])?;
    }
    let want_id = "uid=0(root) gid=0";
    for s in &seen {
        assert!(s.starts_with(want_id), "{s}");
        assert!(s.contains(&format!("0     {HOST_BASE}      65536")), "the map: {s}");
        assert!(s.contains("cat: can't open '/secret': Permission denied"), "host root's file: {s}");
    }
    assert!(seen[0].contains("65534    65534"), "the host's root shows as nobody: {}", seen[0]);
    assert!(seen[0].contains("dev-null-writable"), "{}", seen[0]);
    assert_eq!(seen[0], seen[2], "kaji vs runc: run");
    assert_eq!(seen[1], seen[3], "kaji vs runc: exec");
    fx.assert_clean();
    Ok(())
}

/// A new user namespace with a network namespace joined by path (another container's): the
/// join comes before the user namespace, as in runc, so the container runs in that network
/// namespace. /sys is a bind of the host's: sysfs can only be mounted where the network
/// namespace belongs to the container's user namespace (runc refuses it too).
#[test]
fn a_new_user_namespace_may_join_another_containers_network_namespace() -> anyhow::Result<()> {
    common::require_cli();
    let mut fx = Fixture::new()?;
    let secret = fx.dir.join("secret");
    std::fs::write(&secret, "")?;
    let mut seen = Vec::new();
    for cli in Cli::both() {
        let holder = cli.id("netns-holder");
        created_sleeping(&mut fx, cli, &holder, &secret)?;
        let state: Value = serde_json::from_str(&cli.out(&fx, &["state", &holder])?)?;
        let netns = format!("/proc/{}/ns/net", state["pid"]);
        let want = std::fs::read_link(&netns)?;

        let id = cli.id("netns-joiner");
        fx.created.push(id.clone());
        let dir = bundle(&fx, cli, &id, "readlink /proc/self/ns/net; cat /proc/self/uid_map", &secret)?;
        let path = dir.join("config.json");
        let mut v: Value = serde_json::from_slice(&std::fs::read(&path)?)?;
        for n in v["linux"]["namespaces"].as_array_mut().expect("namespaces") {
            if n["type"] == "network" {
                n["path"] = json!(netns);
            }
        }
        for m in v["mounts"].as_array_mut().expect("mounts") {
            if m["destination"] == "/sys" {
                *m = json!({"destination": "/sys", "type": "none", "source": "/sys",
                            "options": ["rbind", "nosuid", "noexec", "nodev", "ro"]});
            }
        }
        std::fs::write(&path, serde_json::to_vec_pretty(&v)?)?;
        let out = cli.cmd(&fx, &["run", "--bundle", &dir.display().to_string(), &id]).output()?;
        assert!(out.status.success(), "{cli:?}: {}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(text.starts_with(&format!("{}\n", want.display())), "{cli:?}: the holder's {want:?}: {text}");
        cli.out(&fx, &["delete", "--force", &holder])?;
        seen.push(text.lines().skip(1).collect::<Vec<_>>().join("\n"));
    }
    assert_eq!(seen[0], seen[1], "kaji vs runc");
    fx.assert_clean();
    Ok(())
}
