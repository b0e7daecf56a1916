//! Root-only tests of `linux.netDevices` (runtime spec, "Network Devices"): a device of the
//! runtime's network namespace moves into the container's, renamed, up, with its permanent
//! addresses and without the others; a missing device or a name the container already has fails
//! the create and moves nothing. The runtime runs inside a network namespace each test makes
//! (`nsenter --net`), so the machine's own devices are never touched. runc 1.1 predates
//! netDevices (it ignores the field), so there is no reference run.

mod common;

use std::process::{Command, Output, Stdio};

use common::Fixture;
use oci_spec::runtime::{LinuxNetDevice, Spec};

/// A network namespace of the test's own, removed on drop.
struct Netns(String);

impl Netns {
    fn new(tag: &str) -> anyhow::Result<Self> {
        let name = format!("kaji-rt-nd-{}-{tag}", std::process::id());
        anyhow::ensure!(Command::new("ip").args(["netns", "add", &name]).status()?.success(), "ip netns add {name}");
        Ok(Self(name))
    }

    /// `ip -n <ns> <args>`, which must succeed.
    fn ip(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new("ip").arg("-n").arg(&self.0).args(args).output()?;
        anyhow::ensure!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn has_link(&self, name: &str) -> bool {
        self.ip(&["link", "show", "dev", name]).is_ok()
    }

    /// `kaji-runtime --root <fixture's> run --bundle <b> <id>` in this network namespace.
    fn run(&self, fx: &mut Fixture, id: &str, spec: &Spec) -> anyhow::Result<Output> {
        let bundle = fx.bundle(id, spec)?;
        fx.created.push(id.to_string());
        // nsenter joins only the network namespace (`ip netns exec` would also remount /sys, and
        // the cgroup hierarchies below it with it).
        let out = Command::new("nsenter")
            .arg(format!("--net=/run/netns/{}", self.0))
            .args(["--", common::HELPER, "--root"])
            .arg(&fx.state_root)
            .arg("run")
            .arg("--bundle")
            .arg(&bundle)
            .arg(id)
            .stdin(Stdio::null())
            .output()?;
        Ok(out)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn with_devices(fx: &Fixture, id: &str, script: &str, devices: &[(&str, Option<&str>)]) -> anyhow::Result<Spec> {
    let mut spec = fx.spec(id, script)?;
    common::edit_linux(&mut spec, |l| {
        let map = devices
            .iter()
            .map(|(host, name)| {
                let mut d = LinuxNetDevice::default();
                d.set_name(name.map(str::to_string));
                ((*host).to_string(), d)
            })
            .collect();
        l.set_net_devices(Some(map));
    })?;
    Ok(spec)
}

#[test]
fn a_device_moves_in_renamed_and_up_with_its_permanent_addresses_only() -> anyhow::Result<()> {
    common::require_root_and_busybox();
    let mut fx = Fixture::new()?;
    let ns = Netns::new("move")?;
    ns.ip(&["link", "add", "kd0", "type", "veth", "peer", "name", "kp0"])?;
    ns.ip(&["addr", "add", "10.77.0.5/24", "dev", "kd0"])?;
    // An address with a lifetime is not permanent: the spec leaves it behind.
    ns.ip(&["addr", "add", "10.77.1.5/24", "dev", "kd0", "valid_lft", "900", "preferred_lft", "900"])?;
    let spec = with_devices(&fx, "nd-move", "ip addr show dev ctr0; ip link show dev ctr0", &[("kd0", Some("ctr0"))])?;
    let out = ns.run(&mut fx, "nd-move", &spec)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "run failed: {}{stdout}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("ctr0"), "renamed in the container:\n{stdout}");
    assert!(stdout.contains("inet 10.77.0.5/24"), "the permanent address came along:\n{stdout}");
    assert!(!stdout.contains("10.77.1.5"), "the address with a lifetime did not:\n{stdout}");
    assert!(stdout.contains(",UP") || stdout.contains("<UP"), "set up:\n{stdout}");
    // A virtual device goes with the container's namespace (a veth with its peer); nothing moved
    // it back.
    // The kernel frees a namespace in the background: give it a moment.
    let gone = || !ns.has_link("kd0") && !ns.has_link("ctr0") && !ns.has_link("kp0");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !gone() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(gone(), "{}", ns.ip(&["link"])?);
    fx.assert_clean();
    Ok(())
}

#[test]
fn a_missing_device_or_a_name_the_container_has_fails_the_create_and_moves_nothing() -> anyhow::Result<()> {
    common::require_root_and_busybox();
    let mut fx = Fixture::new()?;
    let ns = Netns::new("fail")?;
    ns.ip(&["link", "add", "kd1", "type", "veth", "peer", "name", "kp1"])?;

    let spec = with_devices(&fx, "nd-missing", "true", &[("nope0", None)])?;
    let out = ns.run(&mut fx, "nd-missing", &spec)?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a missing device must fail the create");
    assert!(stderr.contains("network device nope0 not found"), "{stderr}");

    let spec = with_devices(&fx, "nd-taken", "true", &[("kd1", Some("lo"))])?;
    let out = ns.run(&mut fx, "nd-taken", &spec)?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a taken name must fail the create");
    assert!(stderr.contains("lo already exists in the container's network namespace"), "{stderr}");
    assert!(ns.has_link("kd1"), "kd1 stays where it was");

    // A `%d` template lets the kernel pick the name instead.
    let spec = with_devices(&fx, "nd-template", "ip link show", &[("kd1", Some("lo%d"))])?;
    let out = ns.run(&mut fx, "nd-template", &spec)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("lo0"), "the kernel named it from the template:\n{stdout}");
    fx.assert_clean();
    Ok(())
}
