//! What FedASMU's two schedulers share: starting devices drawn uniformly at random from the
//! idle ones, each optionally asking for the newest model after a share of its work.

use fl_core::{InvalidKey, Result, SchedCtx};
use rand::seq::IndexedRandom;

/// Starts `count` idle devices drawn uniformly at random (fewer if fewer are idle); with
/// `pull_at`, each asks for the newest global model after that share of its local work.
pub(crate) fn start_random_idle(ctx: &mut SchedCtx, count: usize, pull_at: Option<f64>) -> Result<()> {
    let idle = ctx.idle_clients();
    let chosen: Vec<usize> = idle.choose_multiple(ctx.rng(), count).copied().collect();
    for c in chosen {
        match pull_at {
            Some(share) => ctx.dispatch_with_pull(c, share)?,
            None => ctx.dispatch(c)?,
        }
    }
    Ok(())
}

/// Checks `pull_at`: a share of the local work in (0, 1), or absent.
pub(crate) fn validate_pull_at(pull_at: Option<f64>) -> std::result::Result<(), InvalidKey> {
    match pull_at.filter(|s| !(*s > 0.0 && *s < 1.0)) {
        Some(share) => {
            Err(InvalidKey::new("pull_at", format!("expected a share of the local work in (0, 1), got {share}")))
        }
        None => Ok(()),
    }
}
