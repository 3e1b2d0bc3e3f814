//! Depth windows through the engine, on real Fashion-MNIST with a 3-block ViT that has early
//! exits after one and two blocks: clients hold the blocks below their window frozen and
//! train the window and the exit at its top; what nobody trains stays exactly as it was.

mod common;

use fl_algos as _;
use fl_core::{Experiment, Mask, MaskCtx, MaskPolicy, Result};
use fl_data as _;
use fl_models as _;

/// Client c trains the window `c mod 3 .. c mod 3 + 1` (its exit: after 1, 2 or all 3 blocks).
#[derive(Default)]
struct RotatingWindows;

impl MaskPolicy for RotatingWindows {
    fn mask(&mut self, ctx: &mut MaskCtx) -> Result<Mask> {
        let start = ctx.client % 3;
        ctx.structure.submodel(start..start + 1, &vec![None; ctx.structure.groups.len()])
    }

    fl_core::stateless!();
}

/// Every client trains the top block alone (the window 2..3).
#[derive(Default)]
struct TopBlock;

impl MaskPolicy for TopBlock {
    fn mask(&mut self, ctx: &mut MaskCtx) -> Result<Mask> {
        ctx.structure.submodel(2..3, &vec![None; ctx.structure.groups.len()])
    }

    fl_core::stateless!();
}

fl_core::register!(MaskPolicy "test-rotating-windows" => RotatingWindows::default(), summary: "test", paper: "");
fl_core::register!(MaskPolicy "test-top-block" => TopBlock::default(), summary: "test", paper: "");

fn experiment(mask: &str) -> Experiment {
    with_devices(mask, "")
}

/// [`experiment`] with `devices` as the `[devices]` table's body.
fn with_devices(mask: &str, devices: &str) -> Experiment {
    let text = format!(
        r#"
        seed = 4
        clients = 6
        [dataset]
        name = "fashion-mnist"
        train_samples = 3000
        test_samples = 1000
        [partition]
        name = "iid"
        [model]
        name = "vit"
        depth = 3
        hidden = 32
        mlp = 64
        heads = 4
        patch = 7
        exits = [1, 2]
        [trainer]
        optimizer = "adam"
        lr = 0.003
        batch_size = 32
        [scheduler]
        name = "sync-rounds"
        rounds = 6
        [aggregator]
        name = "coverage-mean"
        [mask]
        name = "{mask}"
        [devices]
        {devices}
        "#
    );
    Experiment::parse(&text, mask).unwrap()
}

#[test]
fn what_no_window_trains_stays_as_it_was() {
    let mut sim = experiment("test-top-block").build(&common::options()).unwrap();
    let start = sim.global().deep_clone();
    let summary = sim.run(&mut ()).unwrap();
    for (name, (before, after)) in start.names().iter().zip(start.tensors().iter().zip(sim.global().tensors())) {
        let trained = name.starts_with("blocks.2.") || name.starts_with("norm.") || name.starts_with("head.");
        assert_eq!(!before.equal(after), trained, "`{name}`: trained by the window 2..3: {trained}");
    }
    // Training the top block over a frozen random stem still learns something.
    assert!(summary.best_accuracy > 0.3, "best accuracy {}", summary.best_accuracy);
}

#[test]
fn clients_of_every_window_train_the_global_model_together_in_less_time() {
    let run = |mask| experiment(mask).build(&common::options()).unwrap().run(&mut ()).unwrap();
    let (windows, full) = (run("test-rotating-windows"), run("full"));
    // The full model's forward reads every block and the final head, which only a third of the
    // clients train; the global model must still learn (0.569 at seed 4; the full model 0.560).
    assert!(
        windows.best_accuracy > 0.45,
        "best accuracy {} (full model {})",
        windows.best_accuracy,
        full.best_accuracy
    );
    // A window trains one block and runs the frozen ones forward only: the slowest job (the
    // top window: stem and two blocks frozen, one block and the head trained) costs about
    // (⅓·3 + 1 + ε)/4 of the full model's, and the round waits for it (measured: 0.48).
    assert!(
        windows.virtual_time_s < 0.6 * full.virtual_time_s,
        "{} virtual s against {} for the full model",
        windows.virtual_time_s,
        full.virtual_time_s
    );
}

#[test]
fn a_device_refuses_a_job_whose_memory_estimate_exceeds_its_memory() {
    use fl_core::{DataSpec, Mask, job_memory};
    use fl_models::{Vit, VitConfig};
    // The same ViT; Adam keeps two states per trained element; batches of 32.
    let cfg = VitConfig {
        depth: Some(3),
        hidden: Some(32),
        mlp: Some(64),
        heads: Some(4),
        patch: Some(7),
        exits: vec![1, 2],
        ..VitConfig::default()
    };
    let vit = Vit::new(cfg, &DataSpec { input_shape: vec![1, 28, 28], classes: 10, vocab_size: None }).unwrap();
    let s = fl_core::Model::structure(&vit);
    let window = s.submodel(2..3, &vec![None; s.groups.len()]).unwrap();
    let small = job_memory(&vit, &s.shapes(), &window, 2, 32).total();
    let full = job_memory(&vit, &s.shapes(), &Mask::Full, 2, 32).total();
    assert!(small < 0.8 * full, "the window's job {small} B, the full model's {full} B");
    let limit = format!("memory_bytes = {{ dist = \"constant\", value = {} }}", (small + full) / 2.0);
    // Windows fit; the full model does not, and the error says who and by how much.
    experiment_run(with_devices("test-top-block", &limit)).unwrap();
    let err = experiment_run(with_devices("full", &limit)).unwrap_err().to_string();
    assert!(
        err.contains("client 0's job needs") && err.contains("memory_bytes") && err.contains("activations"),
        "{err}"
    );
}

fn experiment_run(e: Experiment) -> fl_core::Result<fl_core::Summary> {
    e.build(&common::options())?.run(&mut ())
}
