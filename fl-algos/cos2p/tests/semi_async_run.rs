//! The semi-asynchronous loop and the segment-importance aggregation on real Fashion-MNIST
//! with a small ViT: eight clients of Co-S²P's E1 speeds (one slow Jetson NX, three AGX 32GB,
//! four AGX 64GB: TOPS 21 : 200 : 275) training FedRolex windows of heads and neurons, or
//! Co-S²P's rolling depth windows. The slow client's updates arrive late and join later rounds;
//! the global model learns.

use fl_algo_baselines as _;
use fl_algo_cos2p as _;
use fl_core::{Experiment, RunOptions};
use fl_data as _;
use fl_models as _;

/// The run's summary with `aggregator`, FedRolex's width windows on a 2-block ViT.
fn run(aggregator: &str) -> fl_core::Summary {
    run_with(aggregator, "depth = 2", "name = \"fedrolex\"\nlevels = [0.5625, 0.0625]", "", SEMI_ASYNC)
}

/// E1's waiting rule: ⌈μN⌉ = 4 of 8 updates, then T_clk more seconds (scaled to these jobs).
const SEMI_ASYNC: &str = "mu = 0.5\nt_clk_s = 0.005";

/// The run's summary with `aggregator`, the ViT's `depth` lines, the `[mask]` table's body,
/// more `[trainer]` lines and the semi-asynchronous waiting rule `wait`.
fn run_with(aggregator: &str, depth: &str, mask: &str, trainer: &str, wait: &str) -> fl_core::Summary {
    simulation(aggregator, depth, mask, trainer, wait).run(&mut ()).unwrap()
}

/// The simulation [`run_with`] runs.
fn simulation(aggregator: &str, depth: &str, mask: &str, trainer: &str, wait: &str) -> fl_core::Simulation {
    let text = format!(
        r#"
        seed = 6
        clients = 8
        [dataset]
        name = "fashion-mnist"
        train_samples = 4000
        test_samples = 1000
        [partition]
        name = "dirichlet"
        alpha = 1.5
        [model]
        name = "vit"
        {depth}
        hidden = 32
        mlp = 64
        heads = 4
        patch = 7
        [trainer]
        optimizer = "adam"
        lr = 0.003
        batch_size = 32
        {trainer}
        [mask]
        {mask}
        [scheduler]
        name = "semi-async"
        {wait}
        rounds = 12
        [aggregator]
        name = "{aggregator}"
        [devices]
        flops_per_s = {{ dist = "quota", values = [2.1e9, 2.0e10, 2.75e10], shares = [1, 3, 4] }}
    "#
    );
    let e = Experiment::parse(&text, "cos2p-semi-async").unwrap();
    let opts = RunOptions { device: fl_core::tch::Device::Cpu, workers: 2, data_dir: fl_build::data_dir() };
    e.build(&opts).unwrap()
}

#[test]
fn semi_async_rounds_aggregate_stale_updates_by_segment_and_learn() {
    let summary = run("segment-importance");
    // 18 of 78 updates came a round late (seed 6).
    let stale: u64 = summary.staleness_histogram.iter().filter(|(v, _)| **v > 0).map(|(_, n)| n).sum();
    assert!(stale > 0, "no update arrived late: {:?}", summary.staleness_histogram);
    assert_eq!(summary.aggregations, 12);
    // The fast clients wait for the slow ones' late updates less than a synchronous round would.
    let ru = summary.resource_utilization;
    assert!(ru > 0.3 && ru < 1.0, "resource utilisation {ru}");
    // 0.521, against 0.514 for the plain mean over the clients that trained each element.
    let mean = run("coverage-mean");
    assert!(
        summary.best_accuracy > 0.45 && summary.best_accuracy > mean.best_accuracy - 0.05,
        "best accuracy {} (coverage mean {})",
        summary.best_accuracy,
        mean.best_accuracy
    );
}

#[test]
fn rolling_depth_windows_train_a_deeper_vit_together() {
    // Four blocks with exits after 1, 2 and 3: the strong clients (R = 0.5625) train 3 blocks,
    // the weak one (R = 0.0625) 1, every window rolling with the round, at √R of the width; a
    // strong window also reads out where a weak one would end, distilled from its top.
    let mask = "name = \"rolling-depth\"\nratios = { levels = [0.5625, 0.0625] }";
    let distill = "distill = { lambda = 0.2, temperature = 3.0 }";
    let summary = run_with("segment-importance", "depth = 4\nexits = [1, 2, 3]", mask, distill, SEMI_ASYNC);
    assert_eq!(summary.aggregations, 12);
    // 0.470 at seed 6 in 12 short rounds (chance: 0.1).
    assert!(summary.best_accuracy > 0.4, "best accuracy {}", summary.best_accuracy);
}

#[test]
fn learned_width_masks_train_through_the_engine() {
    // The same windows, but each client learns which heads and neurons it keeps: scores train
    // for one epoch before the weights in rounds 0–3, then the windows go out cut to them.
    let mask = "name = \"rolling-depth\"\nratios = { levels = [0.5625, 0.0625] }\nwidth = \"learned\"\nmask_rounds = 4";
    let trainer = "distill = { lambda = 0.2, temperature = 3.0 }\nwidth_masks = { epochs = 1, lr = 0.05 }";
    let summary = run_with("segment-importance", "depth = 4\nexits = [1, 2, 3]", mask, trainer, SEMI_ASYNC);
    assert_eq!(summary.aggregations, 12);
    // 0.513 at seed 6 (rolling widths: 0.471), in 1.91 virtual s against 1.64: mask rounds
    // also price the score epochs over the whole window.
    assert!(summary.best_accuracy > 0.4, "best accuracy {}", summary.best_accuracy);
    // The weak client's window (1 block at width 0.25) needs far less memory than a strong one's
    // (3 blocks at 0.75).
    let peaks: Vec<f64> = summary.clients.iter().map(|c| c.peak_memory_bytes).collect();
    let (low, high) = peaks.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), &p| (lo.min(p), hi.max(p)));
    assert!(low > 0.0 && low < 0.6 * high, "peak memory per client {peaks:?}");
}

#[test]
fn the_fully_asynchronous_variant_uses_every_resource() {
    // Co-S²P(Async.): ⌈μN⌉ = 1 and T_clk = 0, each update aggregated on arrival: RU = 1 (Table 1's 100.0).
    let summary = run_with(
        "segment-importance",
        "depth = 2",
        "name = \"fedrolex\"\nlevels = [0.5625, 0.0625]",
        "",
        "mu = 0.125\nt_clk_s = 0.0",
    );
    assert_eq!(summary.resource_utilization, 1.0);
    assert!(summary.staleness_histogram.keys().any(|&v| v > 0), "asynchronous updates come stale");
}

#[test]
fn clients_keep_their_early_exits_and_the_server_keeps_the_final_head() {
    // §2.5: exit heads stay with the client. The global model's early exits are never
    // aggregated (they keep their initial values) while its blocks and final head learn;
    // shared exits (personal_exits = false) move.
    let mask = "name = \"rolling-depth\"\nratios = { levels = [0.5625, 0.0625] }";
    let distill = "distill = { lambda = 0.2, temperature = 3.0 }";
    for personal in [true, false] {
        let mask = format!("{mask}\npersonal_exits = {personal}");
        let mut sim = simulation("segment-importance", "depth = 4\nexits = [1, 2, 3]", &mask, distill, SEMI_ASYNC);
        let before = sim.global().deep_clone();
        let mut records: Vec<fl_core::EvalRecord> = Vec::new();
        let summary = sim.run(&mut records).unwrap();
        let last = records.last().unwrap();
        assert!(last.client_accuracy.is_nan(), "no client splits, no client scores");
        assert!(summary.best_accuracy > 0.35, "personal exits {personal}: best accuracy {}", summary.best_accuracy);
        let moved = |prefix: &str| {
            before.iter().filter(|(n, _)| n.starts_with(prefix)).any(|(n, t)| !t.equal(sim.global().get(n).unwrap()))
        };
        assert_eq!(moved("exits."), !personal, "personal exits {personal}: the global early exits moved?");
        assert!(moved("blocks.") && moved("head."), "the shared blocks and the final head learn");
    }
}

#[test]
fn each_client_scores_its_personalised_sub_model_on_its_own_split() {
    // 8:2 client splits: every client's last window (its depth, width and personal exit) on
    // the 20% it held out, weighted by data size, well above chance (0.1) after 12 rounds.
    // The mask table is followed by a table header, so the [eval] table can follow it.
    let mask = "name = \"rolling-depth\"\nratios = { levels = [0.5625, 0.0625] }\n[eval]\nclient_test_share = 0.2";
    let distill = "distill = { lambda = 0.2, temperature = 3.0 }";
    let mut records: Vec<fl_core::EvalRecord> = Vec::new();
    simulation("segment-importance", "depth = 4\nexits = [1, 2, 3]", mask, distill, SEMI_ASYNC)
        .run(&mut records)
        .unwrap();
    let last = records.last().unwrap();
    for (what, v) in [("top-1", last.client_accuracy), ("top-5", last.client_top5), ("F1", last.client_macro_f1)] {
        assert!(v > 0.2 && v <= 1.0, "client {what} {v}");
    }
    assert!(last.client_top5 > last.client_accuracy);
    let first = &records[0];
    assert!(first.client_accuracy < 0.25, "before training the clients are at chance: {}", first.client_accuracy);
}
