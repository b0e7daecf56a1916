//! kaji-runtime: OCI runtime spec in, isolated, resource-limited process out.
//!
//! [`container::ContainerRuntime`] is the API; [`container::Native`] and [`container::Runc`] are
//! its backends. The modules below split the work by kernel concern.
pub mod cgroupfs;
pub mod cgroups;
pub mod cli;
pub mod container;
pub mod devices;
pub mod exec;
pub mod forkserver;
pub mod hooks;
pub mod idmap;
pub mod init;
pub mod launch;
pub mod logs;
pub mod mountopts;
pub mod namespaces;
pub mod netdev;
pub mod nsenter;
pub mod rootfs;
pub mod seccomp;
pub mod securejoin;
pub mod shim;
pub mod spec;
pub mod state;
pub mod sys;

pub use container::{ContainerRuntime, CreateOptions, Native, Runc};
pub use exec::{Exec, ExecOptions, WindowSize};
pub use state::{Exit, State, Status};
