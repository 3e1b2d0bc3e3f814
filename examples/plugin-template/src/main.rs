//! The plugin's own `fl`: every built-in component plus this crate's.

use fl_plugin_template as _;

fn main() -> std::process::ExitCode {
    fl_cli::main()
}
