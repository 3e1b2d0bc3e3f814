//! The `fl` binary. A third-party plugin's binary is the same three lines plus a
//! `use my_plugin as _;` so that its registrations are linked.

fn main() -> std::process::ExitCode {
    fl_cli::main()
}
