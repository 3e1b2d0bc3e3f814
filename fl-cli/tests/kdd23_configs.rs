//! The KDD'23 base experiments of CIFAR-10 and AG News (`experiments/kdd23/base/`) run end to
//! end, with RA-Fed, IST and PruneFL masks on their maskable tensors, on small files written in
//! the official formats (the real datasets are in no package registry; MNIST's base runs in
//! the smoke reproduction).

use std::path::Path;
use std::process::Command;

/// Writes CIFAR-10's binary files into `dir`: `n` training records over 5 batches and `n / 5`
/// test records; the label is the record index mod 10 and the pixels encode the label.
fn write_cifar10(dir: &Path, n: usize) {
    std::fs::create_dir_all(dir).unwrap();
    let record = |i: usize| {
        let label = (i % 10) as u8;
        let mut r = vec![label];
        r.extend((0..3072).map(|p| label.wrapping_mul(25).wrapping_add((p % 7) as u8 + (i % 3) as u8)));
        r
    };
    for b in 0..5 {
        let bytes: Vec<u8> = (b * n / 5..(b + 1) * n / 5).flat_map(record).collect();
        std::fs::write(dir.join(format!("data_batch_{}.bin", b + 1)), bytes).unwrap();
    }
    std::fs::write(dir.join("test_batch.bin"), (0..n / 5).flat_map(record).collect::<Vec<u8>>()).unwrap();
}

/// Writes AG News `train.csv` and `test.csv`: the class's keyword in a few words of filler.
fn write_agnews(dir: &Path, n: usize) {
    std::fs::create_dir_all(dir).unwrap();
    let words = ["world", "sports", "business", "science"];
    let csv = |count: usize| -> String {
        (0..count)
            .map(|i| {
                let class = i % 4;
                format!(
                    "\"{}\",\"News, {} today\",\"The \"\"{}\"\" story ({i}).\"\n",
                    class + 1,
                    words[class],
                    words[class]
                )
            })
            .collect()
    };
    std::fs::write(dir.join("train.csv"), csv(n)).unwrap();
    std::fs::write(dir.join("test.csv"), csv(n / 5)).unwrap();
}

fn run(dataset: &str, method: &str, data_dir: &Path, out: &Path) -> serde_json::Value {
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../experiments/kdd23/base/{dataset}.toml"));
    let text = std::fs::read_to_string(base).unwrap();
    let text = text
        .replace("method = \"ra-fed\"", &format!("method = \"{method}\""))
        .replace("rounds = 300", "rounds = 2")
        .replace("[trainer]\n", "[trainer]\nepochs = 1\n");
    let file = out.join(format!("{dataset}-{method}.toml"));
    std::fs::write(&file, text).unwrap();
    let dir = out.join(format!("{dataset}-{method}"));
    let o = Command::new(env!("CARGO_BIN_EXE_fl"))
        .args(["run", file.to_str().unwrap(), "--quiet", "--workers", "2", "--device", "cpu", "--out"])
        .arg(&dir)
        .env("FL_DATA_DIR", data_dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{dataset}/{method}: {}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap()
}

#[test]
fn cifar10_and_agnews_base_experiments_run_with_every_mask_policy() {
    let data = tempfile::tempdir().unwrap();
    write_cifar10(&data.path().join("cifar10"), 1000);
    write_agnews(&data.path().join("agnews"), 800);
    let out = tempfile::tempdir().unwrap();
    for dataset in ["cifar10", "agnews"] {
        for method in ["ra-fed", "ist", "prunefl", "ram-fed"] {
            let summary = run(dataset, method, data.path(), out.path());
            assert_eq!(summary["aggregations"].as_u64(), Some(2), "{dataset}/{method}");
            let loss = summary["final_loss"].as_f64();
            assert!(loss.is_some_and(f64::is_finite), "{dataset}/{method}: final loss {loss:?}");
        }
    }
}
