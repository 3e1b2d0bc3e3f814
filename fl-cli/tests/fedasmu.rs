//! FedASMU, FedSSMU and FedASMU's ablation without pulls on real MNIST (20 devices with a 5×
//! speed spread, Dirichlet α = 0.5, an MLP, 150 aggregations): all learn, and devices that pull download a
//! second model when a newer one exists, which FedASMU-FA's never do. (Whether the pulls help
//! is a question for the reproduction: on a federation this small the two trade places from
//! one evaluation to the next.)

use fl_core::{EvalRecord, Observer};

mod common;

use fl_algos as _;
use fl_data as _;
use fl_models as _;

/// The last evaluation's record.
#[derive(Default)]
struct Last(Option<EvalRecord>);

impl Observer for Last {
    fn on_eval(&mut self, record: &EvalRecord, _: &[(String, f64)]) -> fl_core::Result<()> {
        self.0 = Some(record.clone());
        Ok(())
    }
}

/// Best accuracy, bytes down and bytes up of a run of `method` with the `[scheduler]` keys
/// `scheduler`, 2 local epochs, devices of 20–100 MFLOP/s.
fn run(method: &str, scheduler: &str) -> (f64, f64, f64) {
    let rest = format!(
        "epochs = 2\n[scheduler]\n{scheduler}\n[devices]\nflops_per_s = {{ dist = \"uniform\", low = 2e7, high = 1e8 }}\n[eval]\nevery_aggregations = 25"
    );
    let e = common::mnist_experiment(method, 20, &rest);
    let mut last = Last::default();
    let summary = e.build(&common::options()).unwrap().run(&mut last).unwrap();
    let record = last.0.expect("evaluations");
    (summary.best_accuracy, record.bytes_down, record.bytes_up)
}

/// 5 devices triggered whenever fewer train, checked every 0.1 s, 150 aggregations.
const ASYNC: &str = "devices_per_trigger = 5\nperiod_s = 0.1\naggregations = 150";

#[test]
fn fedssmu_learns_with_its_rounds_merged_one_upload_at_a_time() {
    // 30 rounds of 5 devices: 150 aggregations, one per upload.
    let (acc, down, up) = run("fedssmu", "devices_per_round = 5\nrounds = 30");
    assert!(acc > 0.8, "FedSSMU: best accuracy {acc}");
    // A pull after the round's first merge receives the merged model (here about a quarter of
    // the 150 jobs pull late enough: devices of one round start together).
    assert!(down > 1.1 * up, "FedSSMU: {down} bytes down, {up} up");
}

#[test]
fn fedasmu_learns_and_its_devices_pull_fresh_models_which_fedasmu_fa_does_not() {
    let (full, full_down, full_up) = run("fedasmu", ASYNC);
    let (no_pull, no_pull_down, no_pull_up) = run("fedasmu-fa", ASYNC);
    assert!(full > 0.8, "FedASMU: best accuracy {full}");
    assert!(no_pull > 0.75, "FedASMU-FA: best accuracy {no_pull}");
    // Each job downloads its start model; a pulling job whose pull finds a newer version
    // downloads a second one. Without pulls, downloads are the dispatches alone.
    assert!(full_down > 1.5 * full_up, "FedASMU: {full_down} bytes down, {full_up} up");
    assert!(no_pull_down < 1.2 * no_pull_up, "FedASMU-FA: {no_pull_down} bytes down, {no_pull_up} up");
}
