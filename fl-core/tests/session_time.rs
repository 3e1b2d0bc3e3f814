//! `[devices] session_s`: each device's full job computes for the seconds drawn for it,
//! whatever its data size (FedASMU's device model), and it excludes `flops_per_s`.

use std::sync::Arc;

use fl_core::engine::Setup;
use fl_core::profile::{DevicesConfig, Quantity};
use fl_core::testing::{KeepGlobal, tiny_setup};
use fl_core::trainer::sgd::{Sgd, SgdConfig};
use fl_core::{Result, SchedCtx, Scheduler, Simulation};

/// Dispatches every client once and aggregates each arrival.
struct EveryClientOnce;

impl Scheduler for EveryClientOnce {
    fn on_start(&mut self, ctx: &mut SchedCtx) -> Result<()> {
        (0..ctx.num_clients()).try_for_each(|c| ctx.dispatch(c))
    }

    fn on_arrival(&mut self, ctx: &mut SchedCtx, _client: usize) -> Result<()> {
        ctx.aggregate()
    }
}

/// The seconds each client of `tiny_setup` (3, 1 and 2 samples; one epoch) was busy.
fn busy_s(edit: impl FnOnce(&mut DevicesConfig)) -> Result<Vec<f64>> {
    let trainer = Arc::new(Sgd::new(SgdConfig { lr: 0.1, batch_size: 1, epochs: 1, ..Default::default() }));
    let mut setup: Setup = tiny_setup(trainer, Box::new(EveryClientOnce), Box::new(KeepGlobal));
    edit(&mut setup.devices);
    let summary = Simulation::new(setup)?.run(&mut ())?;
    Ok(summary.clients.iter().map(|c| c.busy_s).collect())
}

fn close(got: &[f64], want: &[f64]) {
    assert!(got.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-6), "got {got:?}, want {want:?}");
}

#[test]
fn a_device_computes_its_full_job_in_its_session_time_whatever_its_data() {
    // At 24 FLOP/s a job of n samples takes n seconds; with session times it takes them.
    close(&busy_s(|_| {}).unwrap(), &[3.0, 1.0, 2.0]);
    let reset = |d: &mut DevicesConfig| d.flops_per_s = DevicesConfig::default().flops_per_s;
    let constant = busy_s(|d| {
        reset(d);
        d.session_s = Some(Quantity::Constant { value: 5.0 });
    })
    .unwrap();
    close(&constant, &[5.0, 5.0, 5.0]);
    let drawn = busy_s(|d| {
        reset(d);
        d.session_s = Some(Quantity::Uniform { low: 200.0, high: 1000.0 });
    })
    .unwrap();
    assert!(drawn.iter().all(|s| (200.0..=1000.0).contains(s)), "{drawn:?}");
    assert!(drawn[0] != drawn[1] && drawn[1] != drawn[2], "drawn per device: {drawn:?}");
}

#[test]
fn session_times_and_a_throughput_together_are_an_error_naming_the_key() {
    let err = busy_s(|d| d.session_s = Some(Quantity::Constant { value: 5.0 })).unwrap_err();
    let text = format!("{err:#}");
    assert!(text.contains("devices.session_s") && text.contains("not both"), "{text}");
    let err = busy_s(|d| {
        d.flops_per_s = DevicesConfig::default().flops_per_s;
        d.session_s = Some(Quantity::Constant { value: f64::INFINITY });
    })
    .unwrap_err();
    assert!(format!("{err:#}").contains("devices.session_s: expected finite seconds"), "{err:#}");
}
