//! sd_notify(3): a component started by systemd as `Type=notify` tells it when it serves
//! (`READY=1`) and when it stops (`STOPPING=1`), as one datagram to `$NOTIFY_SOCKET` (a path, or
//! an abstract socket when it starts with `@`). Without that variable (not under systemd, or
//! another service type) nothing is sent.

use std::os::unix::net::UnixDatagram;
use std::path::Path;

/// Sends `state` (e.g. `READY=1`) to systemd if it asked for notifications; errors are logged,
/// never fatal (a component serves whether or not systemd heard it).
pub fn notify(state: &str) {
    if let Some(socket) = std::env::var_os("NOTIFY_SOCKET") {
        if let Err(e) = notify_to(Path::new(&socket), state) {
            tracing::warn!(error = %e, socket = %Path::new(&socket).display(), "cannot notify systemd");
        }
    }
}

/// Sends `state` to the notification socket at `socket`.
pub fn notify_to(socket: &Path, state: &str) -> std::io::Result<()> {
    let sock = UnixDatagram::unbound()?;
    let bytes = socket.as_os_str().as_encoded_bytes();
    if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
        sock.send_to_addr(state.as_bytes(), &addr)?;
    } else {
        sock.send_to(state.as_bytes(), socket)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notification_is_one_datagram_on_the_socket() -> std::io::Result<()> {
        let dir = std::env::temp_dir().join(format!("kaji-sdnotify-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let path = dir.join("notify");
        let systemd = UnixDatagram::bind(&path)?;
        notify_to(&path, "READY=1")?;
        let mut buf = [0u8; 64];
        let n = systemd.recv(&mut buf)?;
        assert_eq!(&buf[..n], b"READY=1");
        std::fs::remove_dir_all(&dir)?;

        // An abstract socket, as systemd gives when it has no runtime directory.
        use std::os::linux::net::SocketAddrExt;
        let name = format!("kaji-sdnotify-test-{}", std::process::id());
        let systemd = UnixDatagram::bind_addr(&std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?)?;
        notify_to(Path::new(&format!("@{name}")), "STOPPING=1")?;
        let n = systemd.recv(&mut buf)?;
        assert_eq!(&buf[..n], b"STOPPING=1");
        Ok(())
    }
}
