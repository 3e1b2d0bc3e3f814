//! FedPM on real Fashion-MNIST: clients learn only Bernoulli masks over a frozen random MLP,
//! the server counts their sampled masks into a Beta posterior, and the masked random network
//! learns to classify.

mod common;

use fl_algos as _;
use fl_core::Experiment;
use fl_data as _;
use fl_models as _;

#[test]
fn fedpm_learns_a_mask_over_frozen_random_weights() {
    let text = r#"
        seed = 5
        clients = 10
        method = "fedpm"
        [dataset]
        name = "fashion-mnist"
        train_samples = 6000
        test_samples = 2000
        [partition]
        name = "dirichlet"
        alpha = 1.0
        [model]
        name = "probability-mask"
        base = { name = "mlp", hidden = [256] }
        [trainer]
        optimizer = "adam"
        lr = 0.1
        batch_size = 32
        [scheduler]
        rounds = 10
    "#;
    let e = Experiment::parse(text, "fedpm").unwrap();
    let summary = e.build(&common::options()).unwrap().run(&mut ()).unwrap();
    // 0.749 at seed 5 (a random MLP with every weight kept with probability ½ is at chance).
    assert!(summary.best_accuracy > 0.65, "best accuracy {}", summary.best_accuracy);
}
