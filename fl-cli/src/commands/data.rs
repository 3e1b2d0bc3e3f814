//! `fl data fetch NAME` and `fl data info NAME [--json]`.

use anyhow::{Context, Result};

use crate::args::DataCommand;

pub fn data(command: DataCommand) -> Result<()> {
    let dir = fl_build::data_dir();
    match command {
        DataCommand::Fetch { name } => {
            let outcome =
                fl_data::fetch(&name, &dir).with_context(|| format!("fetching `{name}` into {}", dir.display()))?;
            for note in &outcome.notes {
                eprintln!("note: {note}");
            }
            let state = if outcome.already_present { "already present" } else { "fetched and verified" };
            println!("{name}: {state} in {}", outcome.dir.display());
        }
        DataCommand::Info { name, json } => {
            let info =
                fl_data::info(&name, &dir).with_context(|| format!("inspecting `{name}` in {}", dir.display()))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&info)?);
            } else {
                print!("{info}");
            }
        }
    }
    Ok(())
}
