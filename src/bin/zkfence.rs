//! The `zkfence` command line tool. Its commands (`run`, `holders`, `demo`) arrive with the CLI
//! issue; for now it only says so.

fn main() {
    eprintln!(
        "zkfence {}: the command line tool is not built yet; use the library",
        env!("CARGO_PKG_VERSION")
    );
    std::process::exit(2);
}
