//! The `seda` binary; the command line and every command are in the library
//! (`seda_cli`), which a test parses the docs' commands with.

fn main() -> std::process::ExitCode {
    seda_cli::main()
}
