//! One module per xtask subcommand.

pub mod bench;
pub mod run;
pub mod test;
