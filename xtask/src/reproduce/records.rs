//! The records of finished runs kept beside a report, in
//! `reports/<paper>/<scale>/runs/<dataset>-<setting>/<id>-s<seed>/`: the small files of each
//! finished run (experiment, summary, per-evaluation metrics, events). They are committed with
//! the report, so a grid too large for one session or machine is completed over several: a
//! planned run with a record of the same experiment is restored instead of run again, and
//! `--report-only` rebuilds the report anywhere. A variant set's run that is the same
//! experiment as one of the scale alone, or of a smaller set of the same variants, is restored
//! from, and left in, that set's records.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::grid::PlannedRun;
use super::runner::is_done;

/// The files of a run directory a record keeps: what the report reads, and what says how the
/// run was made. Logs and anything else stay in the run directory. `summary.json` comes last,
/// so that an interrupted copy never leaves a directory that looks finished.
const FILES: [&str; 7] =
    ["experiment.toml", "config.toml", "manifest.json", "metrics.csv", "events.jsonl", "timing.csv", "summary.json"];

pub struct Records {
    pub root: PathBuf,
    /// The records of the scale alone and of smaller sets of the same variants, when these are
    /// a variant set's: read, never written.
    pub shared: Vec<PathBuf>,
}

/// The records under `reports` that a run of `scale` with `variants` may share: those of the
/// scale alone and of every smaller set of the same variants that has a report directory
/// (`<scale>-<v1>+<v2>…`, in any order). A record is only restored for the same experiment, so
/// sharing never mixes runs; it saves running again what the extra variants leave unchanged.
pub fn shared_roots(reports: &Path, scale: &str, variants: &[String]) -> Vec<PathBuf> {
    if variants.is_empty() {
        return Vec::new();
    }
    let smaller = |name: &str| {
        if name == scale {
            return true;
        }
        let Some(set) = name.strip_prefix(scale).and_then(|rest| rest.strip_prefix('-')) else { return false };
        let set: Vec<&str> = set.split('+').collect();
        set.len() < variants.len() && set.iter().all(|v| variants.iter().any(|w| w == v))
    };
    let mut roots: Vec<PathBuf> = std::fs::read_dir(reports)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(smaller))
        .map(|e| e.path().join("runs"))
        .filter(|r| r.is_dir())
        .collect();
    roots.sort();
    roots
}

impl Records {
    /// Every directory a record may be restored from, its own first.
    pub fn dirs(&self) -> impl Iterator<Item = &PathBuf> {
        std::iter::once(&self.root).chain(&self.shared)
    }

    /// Where `run`'s record lies under `root`.
    fn dir(root: &Path, run: &PlannedRun) -> PathBuf {
        root.join(format!("{}-s{}", run.key, run.seed))
    }

    /// The finished record of `run`'s experiment under `root`, if there is one.
    pub(super) fn find(root: &Path, run: &PlannedRun) -> Option<PathBuf> {
        let record = Records::dir(root, run);
        let same = std::fs::read_to_string(record.join("experiment.toml")).is_ok_and(|t| t == run.experiment);
        (same && record.join("summary.json").is_file()).then_some(record)
    }

    /// Copies the record of `run` into its run directory when the run is not done there and a
    /// record of the same experiment exists; returns whether it did.
    pub fn restore(&self, run: &PlannedRun) -> Result<bool> {
        if is_done(run) {
            return Ok(false);
        }
        let found = self.dirs().find_map(|r| Records::find(r, run));
        match found {
            Some(record) => copy_files(&record, &run.dir).map(|()| true),
            None => Ok(false),
        }
    }

    /// Keeps the record of `run` if it is done (replacing an older record), unless shared
    /// records already hold it.
    pub fn save(&self, run: &PlannedRun) -> Result<()> {
        if !is_done(run) || self.shared.iter().any(|s| Records::find(s, run).is_some()) {
            return Ok(());
        }
        copy_files(&run.dir, &Records::dir(&self.root, run))
    }
}

/// Copies the record files present in `from` into `to`, in the order of `FILES`.
fn copy_files(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    for name in FILES {
        let source = from.join(name);
        if source.is_file() {
            std::fs::copy(&source, to.join(name))
                .with_context(|| format!("copying {} to {}", source.display(), to.display()))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_run_is_restored_into_an_empty_run_directory_only_for_the_same_experiment() {
        let tmp = tempfile::tempdir().unwrap();
        let records = Records { root: tmp.path().join("records"), shared: Vec::new() };
        let first = PlannedRun::example(&tmp.path().join("a"), "seed = 1\n");
        std::fs::create_dir_all(&first.dir).unwrap();
        for (name, text) in [("experiment.toml", "seed = 1\n"), ("summary.json", "{}"), ("metrics.csv", "v\n1\n")] {
            std::fs::write(first.dir.join(name), text).unwrap();
        }
        std::fs::write(first.dir.join("log.txt"), "noise").unwrap();
        records.save(&first).unwrap();
        let record = tmp.path().join("records/d-a0.1/x-s1");
        assert_eq!(std::fs::read_to_string(record.join("metrics.csv")).unwrap(), "v\n1\n");
        assert!(!record.join("log.txt").exists(), "logs are not part of a record");

        let elsewhere = PlannedRun::example(&tmp.path().join("b"), "seed = 1\n");
        assert!(records.restore(&elsewhere).unwrap());
        assert!(is_done(&elsewhere));
        assert!(!records.restore(&elsewhere).unwrap(), "already done: nothing to restore");

        let changed = PlannedRun::example(&tmp.path().join("c"), "seed = 2\n");
        assert!(!records.restore(&changed).unwrap(), "another experiment: run it");
        assert!(!is_done(&changed));
    }

    #[test]
    fn an_unfinished_run_leaves_no_record() {
        let tmp = tempfile::tempdir().unwrap();
        let records = Records { root: tmp.path().join("records"), shared: Vec::new() };
        let run = PlannedRun::example(&tmp.path().join("a"), "seed = 1\n");
        std::fs::create_dir_all(&run.dir).unwrap();
        std::fs::write(run.dir.join("experiment.toml"), "seed = 1\n").unwrap();
        records.save(&run).unwrap();
        assert!(!tmp.path().join("records").exists());
    }

    #[test]
    fn a_variant_restores_the_scales_records_and_keeps_only_its_own() {
        let tmp = tempfile::tempdir().unwrap();
        let scale = Records { root: tmp.path().join("full"), shared: Vec::new() };
        let variant = Records { root: tmp.path().join("full-v"), shared: vec![scale.root.clone()] };
        let finish = |run: &PlannedRun| {
            std::fs::create_dir_all(&run.dir).unwrap();
            std::fs::write(run.dir.join("experiment.toml"), &run.experiment).unwrap();
            std::fs::write(run.dir.join("summary.json"), "{}").unwrap();
        };
        let unchanged = PlannedRun::example(&tmp.path().join("scale-run"), "lr = 1\n");
        finish(&unchanged);
        scale.save(&unchanged).unwrap();

        let in_variant = PlannedRun::example(&tmp.path().join("variant-run"), "lr = 1\n");
        assert!(variant.restore(&in_variant).unwrap(), "the scale's run of the same experiment");
        variant.save(&in_variant).unwrap();
        assert!(!variant.root.exists(), "a run the variant leaves unchanged stays in the scale's records");

        let changed = PlannedRun::example(&tmp.path().join("variant-run-2"), "lr = 2\n");
        assert!(!variant.restore(&changed).unwrap());
        finish(&changed);
        variant.save(&changed).unwrap();
        assert!(variant.root.join("d-a0.1/x-s1/summary.json").is_file());
        assert!(!scale.restore(&PlannedRun::example(&tmp.path().join("r"), "lr = 2\n")).unwrap(), "never written");
    }

    #[test]
    fn a_variant_set_shares_the_records_of_the_scale_and_of_its_smaller_sets_only() {
        let tmp = tempfile::tempdir().unwrap();
        for dir in ["full", "full-a", "full-b+a", "full-a+b", "full-a+c", "full-c", "fuller-a", "reduced", "full-d"] {
            std::fs::create_dir_all(tmp.path().join(dir).join("runs")).unwrap();
        }
        std::fs::create_dir_all(tmp.path().join("full-b")).unwrap(); // no records yet
        let names = |variants: &[&str]| -> Vec<String> {
            let variants: Vec<String> = variants.iter().map(|v| v.to_string()).collect();
            shared_roots(tmp.path(), "full", &variants)
                .iter()
                .map(|r| r.parent().unwrap().file_name().unwrap().to_string_lossy().into_owned())
                .collect()
        };
        assert_eq!(names(&["a", "b"]), ["full", "full-a"], "not itself (in either order), nor other sets");
        assert_eq!(names(&["b", "a", "c"]), ["full", "full-a", "full-a+b", "full-a+c", "full-b+a", "full-c"]);
        assert!(names(&[]).is_empty(), "the scale alone shares nothing");
    }
}
