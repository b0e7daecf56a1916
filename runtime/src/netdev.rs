//! `linux.netDevices`: existing network devices moved from the runtime's network namespace into
//! the container's, as the runtime spec says (config-linux.md, "Network Devices"): renamed in the
//! same request that moves it (a name with `%d` lets the kernel pick a free one, any other name
//! taken in the container is an error), its permanent addresses of global scope carried over (the
//! kernel drops addresses on a move), and set up. Nothing moves a device back: when the
//! container's namespace goes, the kernel returns physical devices to the initial namespace and
//! destroys virtual ones, which is what the spec asks for.
//!
//! Plain rtnetlink requests over a blocking socket: the runtime has no async executor, and a
//! socket opened by a thread that joined the container's namespace stays bound to it.

use std::os::fd::{AsRawFd, BorrowedFd};

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL, NLM_F_REQUEST,
};
use netlink_packet_route::address::{AddressAttribute, AddressFlags, AddressHeaderFlags, AddressMessage, AddressScope};
use netlink_packet_route::link::{LinkAttribute, LinkFlags, LinkMessage};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("network device {0} not found in the runtime's network namespace")]
    NotFound(String),
    #[error("cannot move network device {device}: {name} already exists in the container's network namespace")]
    NameTaken { device: String, name: String },
    #[error("failed to {what} network device {device}")]
    Netlink {
        what: &'static str,
        device: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot open a netlink socket")]
    Socket(#[source] std::io::Error),
    #[error("cannot reach the container's network namespace")]
    Namespace(#[source] std::io::Error),
}

type Result<T> = std::result::Result<T, Error>;

/// Moves each `host name -> device` of `devices` into the network namespace `target`.
pub fn move_all(
    devices: &std::collections::HashMap<String, oci_spec::runtime::LinuxNetDevice>,
    target: BorrowedFd<'_>,
) -> Result<()> {
    if devices.is_empty() {
        return Ok(());
    }
    let mut here = Rtnl::open().map_err(Error::Socket)?;
    let mut there = Rtnl::open_in(target)?;
    // In a stable order, so that a failure names the same device every time.
    let mut names: Vec<&String> = devices.keys().collect();
    names.sort();
    for host in names {
        let new_name = devices[host].name().clone().filter(|n| !n.is_empty()).unwrap_or_else(|| host.clone());
        move_one(&mut here, &mut there, host, &new_name, target)?;
    }
    Ok(())
}

fn move_one(here: &mut Rtnl, there: &mut Rtnl, host: &str, new_name: &str, target: BorrowedFd<'_>) -> Result<()> {
    let op = |what: &'static str| move |source| Error::Netlink { what, device: host.to_string(), source };
    let link = here.link_by_name(host).map_err(|e| match e.raw_os_error() {
        Some(libc::ENODEV) => Error::NotFound(host.to_string()),
        _ => op("look up")(e),
    })?;
    if !new_name.contains("%d") {
        match there.link_by_name(new_name) {
            Ok(_) => return Err(Error::NameTaken { device: host.to_string(), name: new_name.to_string() }),
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => {}
            Err(e) => return Err(op("check the container's names for")(e)),
        }
    }
    let index = link.header.index;
    let keep = permanent_global_addresses(&here.addresses(index).map_err(op("read the addresses of"))?);
    here.set_up(index, false).map_err(op("set down"))?;
    let mut moved = LinkMessage::default();
    moved.header.index = index;
    moved.attributes.push(LinkAttribute::IfName(new_name.to_string()));
    moved.attributes.push(LinkAttribute::NetNsFd(target.as_raw_fd()));
    here.request(RouteNetlinkMessage::SetLink(moved), 0).map_err(op("move"))?;
    let index = there.find_moved(&link).map_err(op("find the moved"))?;
    for mut addr in keep {
        addr.header.index = index;
        there
            .request(RouteNetlinkMessage::NewAddress(addr), NLM_F_CREATE | NLM_F_EXCL)
            .map_err(op("keep an address of"))?;
    }
    there.set_up(index, true).map_err(op("set up"))?;
    Ok(())
}

/// What the spec says moves with a device: permanent (IFA_F_PERMANENT) addresses of global
/// scope, of any family — as they can be added again (without the old label, which names the
/// device as it was called before).
pub fn permanent_global_addresses(addrs: &[AddressMessage]) -> Vec<AddressMessage> {
    addrs
        .iter()
        .filter(|a| a.header.scope == AddressScope::Universe)
        .filter(|a| {
            let flags = a.attributes.iter().find_map(|at| match at {
                AddressAttribute::Flags(f) => Some(*f),
                _ => None,
            });
            match flags {
                Some(f) => f.contains(AddressFlags::Permanent),
                None => a.header.flags.contains(AddressHeaderFlags::Permanent),
            }
        })
        .map(|a| {
            let mut copy = AddressMessage::default();
            copy.header.family = a.header.family;
            copy.header.prefix_len = a.header.prefix_len;
            copy.header.scope = AddressScope::Universe;
            copy.attributes = a
                .attributes
                .iter()
                .filter(|at| {
                    matches!(
                        at,
                        AddressAttribute::Address(_) | AddressAttribute::Local(_) | AddressAttribute::Broadcast(_)
                    )
                })
                .cloned()
                .collect();
            copy
        })
        .collect()
}

/// One rtnetlink socket, bound to the network namespace of the thread that opened it.
struct Rtnl {
    socket: Socket,
    seq: u32,
}

impl Rtnl {
    fn open() -> std::io::Result<Self> {
        let mut socket = Socket::new(NETLINK_ROUTE)?;
        socket.bind_auto()?;
        socket.connect(&SocketAddr::new(0, 0))?;
        Ok(Self { socket, seq: 0 })
    }

    /// A socket in the network namespace `ns`: opened by a thread of ours that joined it (setns
    /// of a network namespace changes only the calling thread), so this process stays where it is.
    fn open_in(ns: BorrowedFd<'_>) -> Result<Self> {
        let ns = ns.try_clone_to_owned().map_err(Error::Namespace)?;
        std::thread::scope(|s| {
            s.spawn(move || {
                nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET)
                    .map_err(|e| Error::Namespace(std::io::Error::from(e)))?;
                Self::open().map_err(Error::Namespace)
            })
            .join()
            .unwrap_or_else(|_| Err(Error::Namespace(std::io::Error::other("the joining thread panicked"))))
        })
    }

    /// Sends `msg` and collects what comes back until the kernel's ack or the end of a dump.
    fn request(&mut self, msg: RouteNetlinkMessage, flags: u16) -> std::io::Result<Vec<RouteNetlinkMessage>> {
        self.seq = self.seq.wrapping_add(1);
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | flags | if flags & NLM_F_DUMP == NLM_F_DUMP { 0 } else { NLM_F_ACK };
        header.sequence_number = self.seq;
        let mut nl = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(msg));
        nl.finalize();
        let mut buf = vec![0u8; nl.buffer_len()];
        nl.serialize(&mut buf);
        self.socket.send(&buf, 0)?;
        let mut answers = Vec::new();
        loop {
            let (data, _) = self.socket.recv_from_full()?;
            let mut at = 0;
            while at < data.len() {
                let msg = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&data[at..])
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))?;
                let len = (msg.header.length as usize).max(16);
                at += (len + 3) & !3;
                if msg.header.sequence_number != self.seq {
                    continue;
                }
                match msg.payload {
                    NetlinkPayload::Error(e) => {
                        return match e.code {
                            None => Ok(answers),
                            Some(_) => Err(e.to_io()),
                        }
                    }
                    NetlinkPayload::Done(_) => return Ok(answers),
                    NetlinkPayload::InnerMessage(m) => answers.push(m),
                    _ => {}
                }
            }
        }
    }

    fn link_by_name(&mut self, name: &str) -> std::io::Result<LinkMessage> {
        let mut get = LinkMessage::default();
        get.attributes.push(LinkAttribute::IfName(name.to_string()));
        self.one_link(get)
    }

    fn one_link(&mut self, get: LinkMessage) -> std::io::Result<LinkMessage> {
        let answers = self.request(RouteNetlinkMessage::GetLink(get), 0)?;
        answers
            .into_iter()
            .find_map(|m| match m {
                RouteNetlinkMessage::NewLink(l) => Some(l),
                _ => None,
            })
            .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENODEV))
    }

    /// The index the device `before` has here now: its old one unless that was taken, else the
    /// link with its hardware address.
    fn find_moved(&mut self, before: &LinkMessage) -> std::io::Result<u32> {
        let mac = |l: &LinkMessage| {
            l.attributes.iter().find_map(|a| match a {
                LinkAttribute::Address(m) => Some(m.clone()),
                _ => None,
            })
        };
        let mut get = LinkMessage::default();
        get.header.index = before.header.index;
        if let Ok(l) = self.one_link(get) {
            if mac(&l) == mac(before) {
                return Ok(l.header.index);
            }
        }
        let all = self.request(RouteNetlinkMessage::GetLink(LinkMessage::default()), NLM_F_DUMP)?;
        all.into_iter()
            .find_map(|m| match m {
                RouteNetlinkMessage::NewLink(l) if mac(&l).is_some() && mac(&l) == mac(before) => Some(l.header.index),
                _ => None,
            })
            .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENODEV))
    }

    fn addresses(&mut self, index: u32) -> std::io::Result<Vec<AddressMessage>> {
        let all = self.request(RouteNetlinkMessage::GetAddress(AddressMessage::default()), NLM_F_DUMP)?;
        Ok(all
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewAddress(a) if a.header.index == index => Some(a),
                _ => None,
            })
            .collect())
    }

    fn set_up(&mut self, index: u32, up: bool) -> std::io::Result<()> {
        let mut set = LinkMessage::default();
        set.header.index = index;
        set.header.change_mask = LinkFlags::Up;
        if up {
            set.header.flags = LinkFlags::Up;
        }
        self.request(RouteNetlinkMessage::SetLink(set), 0).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    fn addr(scope: AddressScope, permanent: bool, ip: [u8; 4]) -> AddressMessage {
        let mut a = AddressMessage::default();
        a.header.prefix_len = 24;
        a.header.scope = scope;
        a.header.index = 7;
        let ip = IpAddr::V4(Ipv4Addr::from(ip));
        a.attributes = vec![
            AddressAttribute::Address(ip),
            AddressAttribute::Local(ip),
            AddressAttribute::Label("old0".into()),
            AddressAttribute::Flags(if permanent { AddressFlags::Permanent } else { AddressFlags::empty() }),
        ];
        a
    }

    #[test]
    fn only_permanent_global_addresses_move_without_their_old_label() {
        let kept = permanent_global_addresses(&[
            addr(AddressScope::Universe, true, [10, 0, 0, 5]),
            addr(AddressScope::Link, true, [169, 254, 0, 5]),
            addr(AddressScope::Universe, false, [10, 0, 0, 6]),
        ]);
        assert_eq!(kept.len(), 1);
        let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 5));
        assert_eq!(kept[0].attributes, vec![AddressAttribute::Address(ip), AddressAttribute::Local(ip)]);
        assert_eq!((kept[0].header.prefix_len, kept[0].header.index), (24, 0), "index set after the move");
    }
}
