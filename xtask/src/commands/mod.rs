//! One module per xtask subcommand.

pub mod bench;
pub mod run;
pub mod setup;
pub mod test;
