//! `fl data fetch NAME` and `fl data info NAME [--json]`.

use anyhow::{Context, Result, bail};
use fl_data::DataState;

use crate::args::DataCommand;
use crate::output::say;

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
            say(&format!("{name}: {state} in {}\n", outcome.dir.display()))?;
        }
        DataCommand::Info { name, json } => {
            let info =
                fl_data::info(&name, &dir).with_context(|| format!("inspecting `{name}` in {}", dir.display()))?;
            if json {
                say(&format!("{}\n", serde_json::to_string_pretty(&info)?))?;
            } else {
                say(&info.to_string())?;
            }
            // A script can test the exit status: only data a run can use is a success.
            match &info.state {
                DataState::Present { .. } | DataState::Generated(_) => {}
                DataState::Missing(_) => bail!("{name}: not present in {}", dir.display()),
                DataState::Unreadable(_) => bail!("{name}: present in {} but unreadable", dir.display()),
                DataState::Altered(_) => bail!("{name}: present in {} but altered since it was fetched", dir.display()),
            }
        }
    }
    Ok(())
}
