//! FedASMU, FedSSMU and FedASMU's ablation without pulls on real MNIST (20 devices with a 5×
//! speed spread, Dirichlet α = 0.5, an MLP, 150 aggregations): all learn, and devices that pull download a
//! second model when a newer one exists, which FedASMU-FA's never do; FedASMU's log traces each
//! device's α, β and RL-chosen slot. (Whether the pulls help
//! is a question for the reproduction: on a federation this small the two trade places from
//! one evaluation to the next.)

use fl_core::{EvalRecord, Observer};

mod common;

use fl_algos as _;
use fl_data as _;
use fl_models as _;

/// The last evaluation's record and diagnostics.
#[derive(Default)]
struct Last(Option<EvalRecord>, Vec<(String, f64)>);

impl Observer for Last {
    fn on_eval(&mut self, record: &EvalRecord, diagnostics: &[(String, f64)]) -> fl_core::Result<()> {
        self.0 = Some(record.clone());
        self.1 = diagnostics.to_vec();
        Ok(())
    }
}

/// What a run leaves: its best accuracy, bytes down and up, and its last diagnostics.
struct Ran {
    best: f64,
    down: f64,
    up: f64,
    diagnostics: Vec<(String, f64)>,
}

impl Ran {
    fn diagnostic(&self, name: &str) -> Option<f64> {
        self.diagnostics.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
    }

    /// The values of the per-device diagnostics `<prefix>.<device>`.
    fn per_device(&self, prefix: &str) -> Vec<f64> {
        let dotted = format!("{prefix}.");
        self.diagnostics.iter().filter(|(n, _)| n.starts_with(&dotted)).map(|(_, v)| *v).collect()
    }
}

/// A run of `method` with the `[scheduler]` keys `scheduler`, 2 local epochs, devices of
/// 20–100 MFLOP/s.
fn run(method: &str, scheduler: &str) -> Ran {
    let rest = format!(
        "epochs = 2\n[scheduler]\n{scheduler}\n[devices]\nflops_per_s = {{ dist = \"uniform\", low = 2e7, high = 1e8 }}\n[eval]\nevery_aggregations = 25"
    );
    let e = common::mnist_experiment(method, 20, &rest);
    let mut last = Last::default();
    let summary = e.build(&common::options()).unwrap().run(&mut last).unwrap();
    let record = last.0.expect("evaluations");
    Ran { best: summary.best_accuracy, down: record.bytes_down, up: record.bytes_up, diagnostics: last.1 }
}

/// 5 devices triggered whenever fewer train, checked every 0.1 s, 150 aggregations.
const ASYNC: &str = "devices_per_trigger = 5\nperiod_s = 0.1\naggregations = 150";

#[test]
fn fedssmu_learns_with_its_rounds_merged_one_upload_at_a_time() {
    // 30 rounds of 5 devices: 150 aggregations, one per upload.
    let Ran { best: acc, down, up, .. } = run("fedssmu", "devices_per_round = 5\nrounds = 30");
    assert!(acc > 0.8, "FedSSMU: best accuracy {acc}");
    // A pull after the round's first merge receives the merged model (here about a quarter of
    // the 150 jobs pull late enough: devices of one round start together).
    assert!(down > 1.1 * up, "FedSSMU: {down} bytes down, {up} up");
}

#[test]
fn fedasmu_learns_and_its_devices_pull_fresh_models_which_fedasmu_fa_does_not() {
    let fedasmu = run("fedasmu", ASYNC);
    let (full, full_down, full_up) = (fedasmu.best, fedasmu.down, fedasmu.up);
    let fa = run("fedasmu-fa", ASYNC);
    let (no_pull, no_pull_down, no_pull_up) = (fa.best, fa.down, fa.up);
    assert!(full > 0.8, "FedASMU: best accuracy {full}");
    assert!(no_pull > 0.75, "FedASMU-FA: best accuracy {no_pull}");
    // Each job downloads its start model; a pulling job whose pull finds a newer version
    // downloads a second one. Without pulls, downloads are the dispatches alone.
    assert!(full_down > 1.5 * full_up, "FedASMU: {full_down} bytes down, {full_up} up");
    assert!(no_pull_down < 1.2 * no_pull_up, "FedASMU-FA: {no_pull_down} bytes down, {no_pull_up} up");
    // The traces: each device's α at its last merge, β at its last pull, and its RL slot
    // (1 … 4 of 5 parts of the work); the rewards the slot policy learned from.
    let alphas = fedasmu.per_device("alpha");
    assert!(alphas.len() > 10 && alphas.iter().all(|a| *a > 0.0 && *a < 1.0), "α: {alphas:?}");
    let betas = fedasmu.per_device("beta");
    assert!(!betas.is_empty() && betas.iter().all(|b| *b >= 0.0 && *b < 1.0), "β: {betas:?}");
    let slots = fedasmu.per_device("slot");
    assert!(slots.len() > 10 && slots.iter().all(|s| (1.0..=4.0).contains(s) && s.fract() == 0.0), "{slots:?}");
    let reward = fedasmu.diagnostic("reward_mean").expect("the slot policy's rewards");
    assert!(reward.is_finite() && reward != 0.0, "mean reward {reward}");
    assert!(fa.per_device("beta").is_empty() && fa.diagnostic("slot_mean").is_none(), "FedASMU-FA never pulls");
}
