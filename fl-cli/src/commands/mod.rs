//! One module per `fl` subcommand.

mod data;
mod list;
mod pack;
mod run;

use anyhow::Result;

use crate::args::{Cli, Command};

pub fn dispatch(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Run(args) => run::run(&args),
        Command::Pack(args) => pack::pack(&args),
        Command::List { kind } => list::list(kind.as_deref()),
        Command::Data { command } => data::data(command),
    }
}
