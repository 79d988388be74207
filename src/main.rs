//! The `aot` command line: parses arguments, calls the library, prints results
//! and errors once, and exits with the documented code.

mod cli;

fn main() {
    std::process::exit(cli::main());
}
