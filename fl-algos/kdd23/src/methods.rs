//! The paper's methods as presets: uniform weighting, momentum-0.5 SGD with batch 128 and 5
//! local epochs (spec §5.3), full participation, region masks at level L (override
//! `[mask] level`). The learning rate is the MNIST-MLP one (0.01); set `[trainer] lr` per task.

use fl_core::Method;

/// The part every method of the paper shares, followed by the method's `[aggregator]` keys.
macro_rules! preset {
    ($aggregator:literal) => {
        concat!(
            r#"
            [scheduler]
            name = "sync-rounds"
            [mask]
            name = "region-partition"
            [trainer]
            name = "sgd"
            lr = 0.01
            momentum = 0.5
            batch_size = 128
            epochs = 5
            [aggregator]
            "#,
            $aggregator
        )
    };
}

inventory::submit! {
    Method {
        name: "ra-fed",
        summary: "RA-Fed: region submodels, each coordinate averaged over the clients that trained it",
        paper: "Wang et al., KDD 2023",
        preset: preset!("name = \"coverage-mean\"\nweighting = \"uniform\"\n"),
        origin: module_path!(),
    }
}

inventory::submit! {
    Method {
        name: "ram-fed",
        summary: "RAM-Fed: RA-Fed plus every client's stored update standing in where it did not train",
        paper: "Wang et al., KDD 2023",
        preset: preset!("name = \"ram-fed\"\n"),
        origin: module_path!(),
    }
}

inventory::submit! {
    Method {
        name: "oap",
        summary: "OAP as run in KDD'23: RA-Fed's masks, but coordinates nobody trained are set to 0",
        paper: "Zhou et al., arXiv:2201.11803; as configured by Wang et al., KDD 2023",
        preset: preset!("name = \"coverage-mean\"\nweighting = \"uniform\"\nuncovered = \"zero\"\n"),
        origin: module_path!(),
    }
}
