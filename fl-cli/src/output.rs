//! What `fl` prints on stdout. A reader that has gone away (`fl list | head`, `fl run … | true`)
//! is not an error: whatever the command did stands, and there is nobody left to tell.

use std::io::{ErrorKind, Write};

use anyhow::{Context, Result};

/// Writes `text` to stdout; a closed pipe ends the output quietly.
pub fn say(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == ErrorKind::BrokenPipe => Ok(()),
        other => other.context("writing to stdout"),
    }
}
