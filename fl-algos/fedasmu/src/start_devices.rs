//! What FedASMU's two schedulers share: starting devices drawn uniformly at random from the
//! idle ones, each asking for the newest model when its request slot says.

use fl_core::{Result, SchedCtx};
use rand::seq::IndexedRandom;

use fl_algo_baselines::LagTracker;

use crate::request_slot::RequestSlot;

/// Starts `count` idle devices drawn uniformly at random (fewer if fewer are idle), each with
/// the request share `request` gives it, or else as `lags` starts a job (with the delay it
/// reports).
pub(crate) fn start_random_idle(
    ctx: &mut SchedCtx,
    count: usize,
    request: &mut RequestSlot,
    lags: &mut LagTracker,
) -> Result<()> {
    let idle = ctx.idle_clients();
    let chosen: Vec<usize> = idle.choose_multiple(ctx.rng(), count).copied().collect();
    for c in chosen {
        match request.share(ctx, c) {
            Some(share) => ctx.dispatch_with_pull(c, share)?,
            None => lags.dispatch(ctx, c)?,
        }
    }
    Ok(())
}
