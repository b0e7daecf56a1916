//! Root-only tests of bundles made elsewhere than kaji: the config `runc spec` writes runs
//! unchanged (its cgroup mount, its ambient capabilities, its terminal) and shows what runc's
//! shows; specs runc refuses are refused with a clear reason; a spec without a mount namespace
//! runs and leaves no mount behind; a setuid binary on an `rsuid` bind mount switches user.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{Cli, Fixture};
use serde_json::{json, Value};

/// `<fx>/<name>`, a bundle dir with a busybox rootfs and the config `cli spec` writes.
fn stock_bundle(fx: &Fixture, cli: Cli, name: &str) -> anyhow::Result<PathBuf> {
    let dir = fx.dir.join(name);
    common::busybox_rootfs(&dir.join("rootfs"))?;
    let st = cli.cmd(fx, &["spec", "--bundle", &dir.display().to_string()]).status()?;
    anyhow::ensure!(st.success(), "{cli:?} spec");
    Ok(dir)
}

fn config(dir: &Path) -> anyhow::Result<Value> {
    Ok(serde_json::from_slice(&std::fs::read(dir.join("config.json"))?)?)
}

fn write_config(dir: &Path, v: &Value) -> anyhow::Result<()> {
    Ok(std::fs::write(dir.join("config.json"), serde_json::to_vec_pretty(v)?)?)
}

/// Cgroup directories named `id` anywhere under /sys/fs/cgroup (a stock spec names no
/// cgroupsPath: the runtime picks one ending in the id).
fn cgroups_named(id: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![PathBuf::from("/sys/fs/cgroup")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                if e.file_name() == id {
                    found.push(e.path());
                }
                if d.components().count() < 8 {
                    stack.push(e.path());
                }
            }
        }
    }
    found
}

#[test]
fn stock_runc_spec_bundles_run_unchanged_and_show_what_runcs_show() -> anyhow::Result<()> {
    common::require_cli();
    let fx = Fixture::new()?;
    let (ours, theirs) = (stock_bundle(&fx, Cli::Kaji, "stock-kaji")?, stock_bundle(&fx, Cli::Runc, "stock-runc")?);
    assert_eq!(config(&ours)?, config(&theirs)?, "`spec` writes runc's config");

    // Unchanged: `sh` on a terminal bridged to ours (script(1) gives the runtime one: runc
    // wants a controlling terminal), its ambient capabilities not inheritable, the cgroup mount.
    let mut codes = Vec::new();
    for (cli, dir) in [(Cli::Kaji, &ours), (Cli::Runc, &theirs)] {
        let id = format!("stock-{cli:?}").to_lowercase();
        let run_cmd = cli.cmd(&fx, &["run", "--bundle", &dir.display().to_string(), &id]);
        let line = std::iter::once(run_cmd.get_program())
            .chain(run_cmd.get_args())
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ");
        let mut run = Command::new("script")
            .args(["-q", "-e", "-c", &line, "/dev/null"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        run.stdin.take().expect("stdin").write_all(b"exit 3\n")?;
        let out = run.wait_with_output()?;
        codes.push((out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned()));
        assert!(cgroups_named(&id).is_empty(), "{cli:?} left its cgroups");
    }
    assert_eq!(codes[0], (Some(3), String::new()), "{codes:?}");
    assert_eq!(codes[0], codes[1], "kaji vs runc");

    // The same config with only the command changed (no terminal): what it sees.
    let probe = "hostname; id -u; grep -E '^(Cap|NoNewPrivs|Seccomp)' /proc/self/status; \
                 cut -d' ' -f2,3,4 /proc/mounts | cut -d, -f1 | sort; ls -a /sys/fs/cgroup | tr '\\n' ' '; echo; \
                 ls /sys/fs/cgroup/pids | head -3; ls /dev | sort | tr '\\n' ' '; echo; \
                 grep -v memory /proc/self/cgroup | cut -d: -f2,3; touch /x 2>&1; exit 0";
    let mut seen = Vec::new();
    for (cli, dir) in [(Cli::Kaji, &ours), (Cli::Runc, &theirs)] {
        let mut v = config(dir)?;
        v["process"]["terminal"] = json!(false);
        v["process"]["args"] = json!(["sh", "-c", probe]);
        write_config(dir, &v)?;
        let out = cli.cmd(&fx, &["run", "--bundle", &dir.display().to_string(), "probe"]).output()?;
        assert!(out.status.success(), "{cli:?}: {}", String::from_utf8_lossy(&out.stderr));
        // Without a cgroupsPath each runtime puts the container below its own cgroup (runc per
        // hierarchy, kaji at the root on v1): compare the leaf.
        let text = String::from_utf8_lossy(&out.stdout);
        let leaf = |l: &str| match l.rsplit_once(':') {
            Some((ctrl, path)) if path.ends_with("/probe") => format!("{ctrl}:/probe"),
            _ => l.to_string(),
        };
        seen.push(text.lines().map(leaf).collect::<Vec<_>>().join("\n"));
    }
    for (a, b) in seen[0].lines().zip(seen[1].lines()) {
        assert_eq!(a, b, "kaji vs runc\nkaji:\n{}\nrunc:\n{}", seen[0], seen[1]);
    }
    assert_eq!(seen[0], seen[1]);
    assert!(seen[0].contains("/sys/fs/cgroup/pids cgroup ro"), "{}", seen[0]);
    assert!(seen[0].contains("pids:/probe"), "{}", seen[0]);
    assert!(cgroups_named("probe").is_empty());
    fx.assert_clean();
    Ok(())
}

/// The fixture's spec for `id`, as JSON, with `edit` applied.
fn spec_json(fx: &Fixture, id: &str, script: &str, edit: impl FnOnce(&mut Value)) -> anyhow::Result<PathBuf> {
    let mut v = serde_json::to_value(fx.spec(id, script)?)?;
    edit(&mut v);
    let dir = fx.dir.join("bundles").join(id);
    std::fs::create_dir_all(&dir)?;
    write_config(&dir, &v)?;
    Ok(dir)
}

/// Runs `create` of `id`; returns its error output, or `None` if it succeeded (then deletes it).
fn create_fails(fx: &Fixture, cli: Cli, id: &str, bundle: &Path) -> anyhow::Result<Option<String>> {
    let out = cli
        .cmd(fx, &["create", "--bundle", &bundle.display().to_string(), id])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .output()?;
    if out.status.success() {
        let _ = cli.cmd(fx, &["delete", "--force", id]).status();
        return Ok(None);
    }
    Ok(Some(String::from_utf8_lossy(&out.stderr).into_owned()))
}

#[test]
fn specs_that_cannot_be_honoured_are_refused_with_a_reason() -> anyhow::Result<()> {
    common::require_cli();
    let mut fx = Fixture::new()?;
    std::os::unix::fs::symlink("../loop", fx.rootfs.join("loop"))?;
    std::fs::create_dir(fx.rootfs.join("realproc"))?;
    type Edit = Box<dyn Fn(&mut Value)>;
    let push = |field: &'static str, value: &'static str| -> Edit {
        Box::new(move |v: &mut Value| {
            if let Some(a) = v["linux"][field].as_array_mut() {
                a.push(json!(value));
            }
        })
    };
    // (case, edit, what kaji says, whether runc 1.1 refuses it too)
    let cases: Vec<(&str, Edit, &str, bool)> = vec![
        ("masked-loop", push("maskedPaths", "/loop"), "Too many levels of symbolic links", true),
        ("ro-loop", push("readonlyPaths", "/loop"), "Too many levels of symbolic links", true),
        ("masked-relative", push("maskedPaths", "../x"), "must be absolute", false),
        ("ro-relative", push("readonlyPaths", "proc/x"), "must be absolute", false),
        (
            "proc-symlink",
            Box::new(|v: &mut Value| {
                if let Some(m) = v["mounts"].as_array_mut().and_then(|m| m.iter_mut().find(|m| m["type"] == "proc")) {
                    m["destination"] = json!("/procsym");
                }
            }),
            "must be mounted on ordinary directory",
            true,
        ),
        (
            "sysctl",
            Box::new(|v: &mut Value| v["linux"]["sysctl"] = json!({"kernel.core_pattern": "x"})),
            "is not in a separate kernel namespace",
            true,
        ),
        (
            "hostname",
            Box::new(|v: &mut Value| {
                if let Some(n) = v["linux"]["namespaces"].as_array_mut() {
                    n.retain(|n| n["type"] != "uts");
                }
                v["hostname"] = json!("h");
            }),
            "without a private UTS namespace",
            true,
        ),
        (
            "netdevice",
            Box::new(|v: &mut Value| v["linux"]["netDevices"] = json!({"eth/0": {}})),
            "not a valid interface name",
            false,
        ),
        (
            "no-mntns-masks",
            Box::new(|v: &mut Value| {
                if let Some(n) = v["linux"]["namespaces"].as_array_mut() {
                    n.retain(|n| n["type"] != "mount");
                }
            }),
            "without a private MNT namespace",
            true,
        ),
    ];
    std::os::unix::fs::symlink("/realproc", fx.rootfs.join("procsym"))?;
    for (case, edit, why, runc_refuses) in cases {
        let bundle = spec_json(&fx, case, "true", |v| edit(v))?;
        fx.created.push(case.to_string());
        let kaji = create_fails(&fx, Cli::Kaji, case, &bundle)?;
        assert!(kaji.as_deref().is_some_and(|e| e.contains(why)), "{case}: {kaji:?}");
        if runc_refuses {
            assert!(create_fails(&fx, Cli::Runc, case, &bundle)?.is_some(), "{case}: runc accepted it");
        }
    }
    fx.assert_clean();
    Ok(())
}

#[test]
fn a_spec_without_a_mount_namespace_runs_chrooted_and_leaves_no_mount() -> anyhow::Result<()> {
    common::require_cli();
    let mut fx = Fixture::new()?;
    let host_ns = std::fs::read_link("/proc/self/ns/mnt")?;
    let root_line = |info: &str| info.lines().find(|l| l.split(' ').nth(4) == Some("/")).map(str::to_string);
    let before = root_line(&std::fs::read_to_string("/proc/self/mountinfo")?);
    let bundle = spec_json(
        &fx,
        "nomnt",
        "readlink /proc/self/ns/mnt; ls /bin/busybox; if [ -e /work ] || [ -e /root/.cargo ]; then echo escaped; fi",
        |v| {
            if let Some(n) = v["linux"]["namespaces"].as_array_mut() {
                n.retain(|n| n["type"] != "mount");
            }
            v["linux"]["maskedPaths"] = json!([]);
            v["linux"]["readonlyPaths"] = json!([]);
        },
    )?;
    fx.created.push("nomnt".into());
    let out = Cli::Kaji.cmd(&fx, &["run", "--bundle", &bundle.display().to_string(), "nomnt"]).output()?;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{}\n/bin/busybox\n", host_ns.display()));
    assert_eq!(root_line(&std::fs::read_to_string("/proc/self/mountinfo")?), before, "the host's / is untouched");
    fx.assert_clean();
    Ok(())
}

/// A static x86-64 program whose exit code is its effective uid (`exit(geteuid())`).
fn euid_program() -> Vec<u8> {
    let code: [u8; 16] = [
        0xb8, 0x6b, 0, 0, 0, // mov eax, 107 (geteuid)
        0x0f, 0x05, // syscall
        0x89, 0xc7, // mov edi, eax
        0xb8, 0x3c, 0, 0, 0, // mov eax, 60 (exit)
        0x0f, 0x05, // syscall
    ];
    let base: u64 = 0x40_0000;
    let (ehdr, phdr) = (64u64, 56u64);
    let size = ehdr + phdr + code.len() as u64;
    let mut elf = Vec::new();
    elf.extend_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    elf.extend_from_slice(&2u16.to_le_bytes()); // ET_EXEC
    elf.extend_from_slice(&0x3eu16.to_le_bytes()); // x86-64
    elf.extend_from_slice(&1u32.to_le_bytes());
    elf.extend_from_slice(&(base + ehdr + phdr).to_le_bytes()); // entry
    elf.extend_from_slice(&ehdr.to_le_bytes()); // phoff
    elf.extend_from_slice(&0u64.to_le_bytes()); // shoff
    elf.extend_from_slice(&0u32.to_le_bytes());
    for v in [ehdr as u16, phdr as u16, 1, 64, 0, 0] {
        elf.extend_from_slice(&v.to_le_bytes());
    }
    elf.extend_from_slice(&1u32.to_le_bytes()); // PT_LOAD
    elf.extend_from_slice(&5u32.to_le_bytes()); // R+X
    for v in [0, base, base, size, size, 0x1000] {
        elf.extend_from_slice(&v.to_le_bytes());
    }
    elf.extend_from_slice(&code);
    elf
}

/// A directory bind-mounted onto itself nosuid in the host's namespace, unmounted when dropped.
struct NosuidDir(PathBuf);

impl Drop for NosuidDir {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn a_setuid_binary_on_an_rsuid_bind_mount_switches_user() -> anyhow::Result<()> {
    use nix::mount::MsFlags;
    use std::os::unix::fs::PermissionsExt;
    common::require_cli();
    let mut fx = Fixture::new()?;
    let dir = fx.dir.join("suid");
    std::fs::create_dir(&dir)?;
    std::fs::write(dir.join("euid"), euid_program())?;
    std::fs::set_permissions(dir.join("euid"), std::fs::Permissions::from_mode(0o4755))?;
    nix::mount::mount(Some(&dir), &dir, None::<&str>, MsFlags::MS_BIND, None::<&str>)?;
    let guard = NosuidDir(dir.clone());
    nix::mount::mount(
        None::<&str>,
        &dir,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_NOSUID,
        None::<&str>,
    )?;
    let mut codes = Vec::new();
    for (case, options) in [("rsuid", json!(["rbind", "rsuid"])), ("plain", json!(["rbind"]))] {
        for cli in [Cli::Kaji, Cli::Runc] {
            let id = format!("{case}-{cli:?}").to_lowercase();
            let bundle = spec_json(&fx, &id, "", |v| {
                v["process"]["args"] = json!(["/suid/euid"]);
                v["process"]["user"] = json!({"uid": 1000, "gid": 1000});
                v["process"]["noNewPrivileges"] = json!(false);
                if let Some(m) = v["mounts"].as_array_mut() {
                    m.push(json!({"destination": "/suid", "type": "bind", "source": dir, "options": options.clone()}));
                }
            })?;
            fx.created.push(id.clone());
            let out = cli.cmd(&fx, &["run", "--bundle", &bundle.display().to_string(), &id]).output()?;
            if !out.stderr.is_empty() {
                eprintln!("{case} {cli:?}: {}", String::from_utf8_lossy(&out.stderr));
            }
            codes.push((case, cli, out.status.code()));
        }
    }
    drop(guard);
    let code = |case: &str, cli: Cli| codes.iter().find(|c| c.0 == case && c.1 == cli).and_then(|c| c.2);
    assert_eq!(code("rsuid", Cli::Kaji), Some(0), "setuid root took effect: {codes:?}");
    assert_eq!(code("plain", Cli::Kaji), Some(1000 & 0xff), "nosuid kept it the caller's: {codes:?}");
    assert_eq!(code("rsuid", Cli::Kaji), code("rsuid", Cli::Runc));
    assert_eq!(code("plain", Cli::Kaji), code("plain", Cli::Runc));
    fx.assert_clean();
    Ok(())
}
