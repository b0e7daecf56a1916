//! `kaji-runtime`: an OCI-runtime command line with runc's shape (see the library's `cli`).

fn main() {
    std::process::exit(kaji_runtime::cli::main());
}
