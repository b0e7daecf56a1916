//! kaji-runtime: OCI runtime spec in, isolated, resource-limited process out.
//!
//! [`container::ContainerRuntime`] is the API; [`container::Native`] and [`container::Runc`] are
//! its backends. The modules below split the work by kernel concern.
pub mod cgroups;
pub mod container;
pub mod exec;
pub mod forkserver;
pub mod hooks;
pub mod init;
pub mod logs;
pub mod namespaces;
pub mod nsenter;
pub mod rootfs;
pub mod seccomp;
pub mod shim;
pub mod spec;
pub mod state;
pub mod sys;

pub use container::{ContainerRuntime, CreateOptions, Native, Runc};
pub use exec::{Exec, ExecOptions, WindowSize};
pub use state::{Exit, State, Status};
