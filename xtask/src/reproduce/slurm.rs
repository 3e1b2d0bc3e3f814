//! `--emit slurm DIR`: the pending runs of a reproduction as a Slurm job array, for a cluster's
//! existing scheduler instead of the local runner. DIR receives `manifest.tsv` (one line per
//! array index: index, run key, seed, run directory, experiment file), the experiment files
//! `experiments/<index>.toml`, `logs/` for Slurm's output and `job.sbatch`, whose task `i` takes
//! line `i` of the manifest through the local runner's steps: `runner::prepare` (repeated in bash)
//! and the command line of `runner::fl_run_args`. The runs land in their usual directories, from
//! which `--report-only` collects and records them.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use super::grid::PlannedRun;
use super::runner::{self, Arg, EXPERIMENT_FILE, LOG_FILE, SUMMARY_FILE};

/// The script Slurm runs once per array index. `@NAME@` marks are filled in by `SlurmArray`.
/// sbatch reads `#SBATCH` lines up to the first command; `##SBATCH` lines are comments.
const SCRIPT: &str = r#"#!/bin/bash
#SBATCH --job-name=@JOB_NAME@
#SBATCH --array=0-@LAST@
#SBATCH --output="@LOGS@/%A_%a.out"
# Resources: edit for your cluster (delete one `#` to enable a line).
##SBATCH --gres=gpu:1
##SBATCH --cpus-per-task=4
##SBATCH --time=12:00:00
##SBATCH --partition=NAME
#
# @COUNT@ run(s) of a reproduction, one array task each: task i runs line i of the manifest
# (index, key, seed, run directory, experiment file) with the steps and the `fl run` command of
# the local runner (xtask/src/reproduce/runner.rs). The nodes must see this directory, the run
# directories and the `fl` binary (a shared filesystem).
#
# Submit:  sbatch @SCRIPT@
# Collect: @COLLECT@
set -euo pipefail

fl=@FL@
manifest=@MANIFEST@
count=@COUNT@
workers=@WORKERS@

task=${SLURM_ARRAY_TASK_ID-}
if [[ -z $task ]]; then
    echo "job.sbatch: SLURM_ARRAY_TASK_ID is not set; submit this script with sbatch (or set it to an index from 0 to $((count - 1)))" >&2
    exit 2
fi
if ! [[ $task =~ ^(0|[1-9][0-9]{0,8})$ ]] || ((task >= count)); then
    echo "job.sbatch: SLURM_ARRAY_TASK_ID=$task is out of range: $manifest has the indices 0 to $((count - 1))" >&2
    exit 2
fi
found=
while IFS=$'\t' read -r index key seed run_dir experiment; do
    if [[ $index == "$task" ]]; then
        found=1
        break
    fi
done <"$manifest"
if [[ -z $found ]]; then
    echo "job.sbatch: $manifest has no line $task" >&2
    exit 2
fi

echo "task $task: $key (seed $seed) in $run_dir"
if [[ -f $run_dir/@SUMMARY@ ]] && cmp -s "$experiment" "$run_dir/@EXPERIMENT@"; then
    echo "task $task: $key is already done"
    exit 0
fi
mkdir -p "$run_dir"
rm -f "$run_dir/@SUMMARY@"
cp "$experiment" "$run_dir/@EXPERIMENT@"
status=0
"$fl" @ARGS@ >"$run_dir/@LOG@" 2>&1 || status=$?
if ((status != 0)); then
    echo "task $task: $key failed (exit status $status); the end of $run_dir/@LOG@:" >&2
    tail -n 5 "$run_dir/@LOG@" >&2
    exit "$status"
fi
echo "task $task: $key finished"
"#;

/// A Slurm job array of runs, written into `dir`.
pub struct SlurmArray {
    /// Where the script, manifest, experiment files and logs go.
    pub dir: PathBuf,
    /// The `fl` binary the local runner uses.
    pub fl: PathBuf,
    pub device: String,
    /// `--workers` of each run; `None`: the task's `SLURM_CPUS_PER_TASK`, else 1.
    pub workers: Option<usize>,
    pub job_name: String,
    /// The command that collects the runs afterwards, for the script's header.
    pub collect: String,
}

impl SlurmArray {
    /// Writes the job array of the runs of `runs` that are not done, and returns how many that
    /// is. With none, no script is written (a stale one is removed): there is nothing to submit.
    pub fn write(&self, runs: &[PlannedRun]) -> Result<usize> {
        let pending = runner::pending(runs);
        let dir = std::path::absolute(&self.dir).with_context(|| format!("resolving {}", self.dir.display()))?;
        let experiments = dir.join("experiments");
        let logs = dir.join("logs");
        let script = dir.join("job.sbatch");
        let manifest = dir.join("manifest.tsv");
        for stale in [&script, &manifest] {
            remove_if_present(stale)?;
        }
        remove_stale_experiments(&experiments)?;
        if pending.is_empty() {
            return Ok(0);
        }
        for d in [&experiments, &logs] {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
        }

        let mut lines = String::from("index\tkey\tseed\trun_dir\texperiment\n");
        for (index, run) in pending.iter().enumerate() {
            let file = experiments.join(format!("{index}.toml"));
            std::fs::write(&file, &run.experiment).with_context(|| format!("writing {}", file.display()))?;
            let run_dir = std::path::absolute(&run.dir).with_context(|| format!("resolving {}", run.dir.display()))?;
            let fields = [index.to_string(), run.key.clone(), run.seed.to_string(), text(&run_dir)?, text(&file)?];
            if let Some(bad) = fields.iter().find(|f| f.contains(['\t', '\n', '\r'])) {
                bail!("{}: `{bad}` holds a tab or line break, which a manifest line cannot", run.key);
            }
            let _ = writeln!(lines, "{}", fields.join("\t"));
        }
        std::fs::write(&manifest, lines).with_context(|| format!("writing {}", manifest.display()))?;

        let fl = std::path::absolute(&self.fl).with_context(|| format!("resolving {}", self.fl.display()))?;
        let logs = text(&logs)?;
        if logs.contains('"') {
            bail!("{logs}: a path with `\"` cannot be given to #SBATCH --output");
        }
        let workers = self.workers.map_or_else(|| "${SLURM_CPUS_PER_TASK:-1}".to_string(), |w| w.to_string());
        let filled = SCRIPT
            .replace("@JOB_NAME@", &self.job_name)
            .replace("@LAST@", &(pending.len() - 1).to_string())
            .replace("@LOGS@", &logs)
            .replace("@COUNT@", &pending.len().to_string())
            .replace("@SCRIPT@", &quote(&text(&script)?))
            .replace("@COLLECT@", &self.collect)
            .replace("@FL@", &quote(&text(&fl)?))
            .replace("@MANIFEST@", &quote(&text(&manifest)?))
            .replace("@WORKERS@", &workers)
            .replace("@ARGS@", &shell_args(&self.device))
            .replace("@SUMMARY@", SUMMARY_FILE)
            .replace("@EXPERIMENT@", EXPERIMENT_FILE)
            .replace("@LOG@", LOG_FILE);
        std::fs::write(&script, filled).with_context(|| format!("writing {}", script.display()))?;
        Ok(pending.len())
    }
}

/// `runner::fl_run_args` as shell words: fixed words quoted, the run's values the script's
/// variables.
fn shell_args(device: &str) -> String {
    let words: Vec<String> = runner::fl_run_args(device)
        .into_iter()
        .map(|a| match a {
            Arg::Word(w) => quote(w),
            Arg::ExperimentFile => format!("\"$run_dir/{EXPERIMENT_FILE}\""),
            Arg::RunDir => "\"$run_dir\"".to_string(),
            Arg::Workers => "\"$workers\"".to_string(),
        })
        .collect();
    words.join(" ")
}

/// `s` as one shell word: as it is when no character of it is special to the shell, else
/// single-quoted.
fn quote(s: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_./:=+,-".contains(c);
    if !s.is_empty() && s.chars().all(plain) { s.to_string() } else { format!("'{}'", s.replace('\'', r"'\''")) }
}

fn text(path: &Path) -> Result<String> {
    path.to_str().map(str::to_string).with_context(|| format!("{}: not a UTF-8 path", path.display()))
}

fn remove_if_present(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("removing {}", path.display()))
        }
        _ => Ok(()),
    }
}

/// Removes the `<index>.toml` files of an earlier job array from `dir`, and nothing else.
fn remove_stale_experiments(dir: &Path) -> Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        entries => entries.with_context(|| format!("reading {}", dir.display()))?,
    };
    for entry in entries {
        let path = entry.with_context(|| format!("reading {}", dir.display()))?.path();
        let index = path.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".toml"));
        if index.is_some_and(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit())) {
            remove_if_present(&path)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::os::unix::fs::PermissionsExt;
    use std::process::{Command, Output};

    use super::*;
    use crate::reproduce::records::Records;
    use crate::reproduce::runner::Runner;

    /// A stand-in for `fl`: records its arguments beside the run, prints a line (into the log)
    /// and writes the files of a finished run; with `FAIL` set it fails before finishing.
    const FAKE_FL: &str = r#"#!/bin/sh
out=
prev=
for a in "$@"; do
    if [ "$prev" = --out ]; then out=$a; fi
    prev=$a
done
printf '%s\n' "$@" > "$out/argv.txt"
echo "training $2"
if [ -n "$FAIL" ]; then echo "out of memory" >&2; exit 3; fi
printf 'virtual_time_s,version,accuracy,loss\n1,1,0.5,1.0\n' > "$out/metrics.csv"
: > "$out/events.jsonl"
echo '{"best_accuracy":0.5,"final_accuracy":0.5,"final_loss":1.0,"wall_time_s":1.0}' > "$out/summary.json"
"#;

    struct Fixture {
        tmp: tempfile::TempDir,
        fl: PathBuf,
    }

    impl Fixture {
        fn new() -> Fixture {
            let tmp = tempfile::tempdir().unwrap();
            let fl = tmp.path().join("bin/fl");
            std::fs::create_dir_all(fl.parent().unwrap()).unwrap();
            std::fs::write(&fl, FAKE_FL).unwrap();
            std::fs::set_permissions(&fl, std::fs::Permissions::from_mode(0o755)).unwrap();
            Fixture { tmp, fl }
        }

        fn run(&self, name: &str, seed: u64) -> PlannedRun {
            let dir = self.tmp.path().join("runs").join(name);
            PlannedRun { key: format!("d-a0.1/{name}"), seed, ..PlannedRun::example(&dir, &format!("seed = {seed}\n")) }
        }

        fn array(&self, workers: Option<usize>) -> SlurmArray {
            SlurmArray {
                dir: self.tmp.path().join("slurm"),
                fl: self.fl.clone(),
                device: "cpu".into(),
                workers,
                job_name: "fl-p-full".into(),
                collect: "cargo xtask reproduce p --scale full --seeds 1 --report-only".into(),
            }
        }

        fn script(&self) -> PathBuf {
            self.tmp.path().join("slurm/job.sbatch")
        }

        /// Runs the job script as Slurm's task `task` would (unset: no index).
        fn task(&self, task: Option<&str>, env: &[(&str, &str)]) -> Output {
            let mut cmd = Command::new("bash");
            cmd.arg(self.script()).env_remove("SLURM_ARRAY_TASK_ID").env_remove("SLURM_CPUS_PER_TASK");
            if let Some(t) = task {
                cmd.env("SLURM_ARRAY_TASK_ID", t);
            }
            cmd.envs(env.iter().copied()).output().unwrap()
        }
    }

    /// Every file of `dir`, by name, with its bytes.
    fn contents(dir: &Path) -> BTreeMap<String, Vec<u8>> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap())
            .map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap()))
            .collect()
    }

    #[test]
    fn words_are_quoted_only_where_the_shell_would_read_them_otherwise() {
        assert_eq!(quote("--device"), "--device");
        assert_eq!(quote("/a/b-c/fl"), "/a/b-c/fl");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote("$HOME"), "'$HOME'");
        assert_eq!(quote(""), "''");
    }

    fn stderr(out: &Output) -> String {
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    #[test]
    fn the_script_is_valid_bash_with_an_array_over_the_pending_runs() {
        let f = Fixture::new();
        let runs = [f.run("a", 1), f.run("b", 1), f.run("c", 2)];
        assert_eq!(f.array(Some(2)).write(&runs).unwrap(), 3);
        let check = Command::new("bash").arg("-n").arg(f.script()).output().unwrap();
        assert!(check.status.success(), "bash -n: {}", stderr(&check));
        let script = std::fs::read_to_string(f.script()).unwrap();
        assert!(script.contains("\n#SBATCH --array=0-2\n"), "{script}");
        assert!(script.contains("\n#SBATCH --job-name=fl-p-full\n"), "{script}");
        let logs = f.tmp.path().join("slurm/logs");
        assert!(script.contains(&format!("\n#SBATCH --output=\"{}/%A_%a.out\"\n", logs.display())), "{script}");
        assert!(logs.is_dir(), "Slurm does not create the directory of --output");
        assert!(!script.contains('@'), "a mark left unfilled: {script}");
        let command = "\"$fl\" run \"$run_dir/experiment.toml\" --out \"$run_dir\" --device cpu --workers \"$workers\" --quiet --resume";
        assert!(script.contains(command), "{script}");
    }

    #[test]
    fn the_manifest_lists_exactly_the_pending_runs() {
        let f = Fixture::new();
        let runs = [f.run("a", 1), f.run("b", 1), f.run("c", 2)];
        std::fs::create_dir_all(&runs[1].dir).unwrap();
        std::fs::write(runs[1].dir.join(EXPERIMENT_FILE), &runs[1].experiment).unwrap();
        std::fs::write(runs[1].dir.join(SUMMARY_FILE), "{}").unwrap();
        assert_eq!(f.array(None).write(&runs).unwrap(), 2, "b is done");

        let slurm = f.tmp.path().join("slurm");
        let manifest = std::fs::read_to_string(slurm.join("manifest.tsv")).unwrap();
        let expected = format!(
            "index\tkey\tseed\trun_dir\texperiment\n0\td-a0.1/a\t1\t{}\t{}\n1\td-a0.1/c\t2\t{}\t{}\n",
            runs[0].dir.display(),
            slurm.join("experiments/0.toml").display(),
            runs[2].dir.display(),
            slurm.join("experiments/1.toml").display(),
        );
        assert_eq!(manifest, expected);
        assert_eq!(std::fs::read_to_string(slurm.join("experiments/1.toml")).unwrap(), "seed = 2\n");
        assert!(std::fs::read_to_string(f.script()).unwrap().contains("\n#SBATCH --array=0-1\n"));
    }

    #[test]
    fn a_task_leaves_the_run_directory_the_local_runner_leaves() {
        let f = Fixture::new();
        let runs = [f.run("a", 1), f.run("b", 2)];
        let runner = Runner {
            fl: f.fl.clone(),
            device: "cpu".into(),
            jobs: 1,
            pack: 1,
            workers: 2,
            records: Records { root: f.tmp.path().join("records") },
        };
        assert!(runner.run_all(&runs[1..]).is_empty(), "the stand-in finishes");
        let local = contents(&runs[1].dir);
        let argv = String::from_utf8_lossy(&local["argv.txt"]).into_owned();
        let dir = runs[1].dir.display();
        assert_eq!(
            argv,
            format!("run\n{dir}/experiment.toml\n--out\n{dir}\n--device\ncpu\n--workers\n2\n--quiet\n--resume\n")
        );
        assert_eq!(local[EXPERIMENT_FILE], b"seed = 2\n");
        assert_eq!(String::from_utf8_lossy(&local[LOG_FILE]), format!("training {dir}/experiment.toml\n"));

        std::fs::remove_dir_all(&runs[1].dir).unwrap();
        f.array(Some(2)).write(&runs).unwrap();
        let out = f.task(Some("1"), &[]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(contents(&runs[1].dir), local, "the same files, byte for byte");
        assert!(!runs[0].dir.exists(), "task 1 runs line 1 only");
        assert!(String::from_utf8_lossy(&out.stdout).contains("task 1: d-a0.1/b finished"));

        std::fs::remove_file(runs[1].dir.join("argv.txt")).unwrap();
        let again = f.task(Some("1"), &[]);
        assert!(again.status.success(), "{}", stderr(&again));
        assert!(String::from_utf8_lossy(&again.stdout).contains("already done"));
        assert!(!runs[1].dir.join("argv.txt").exists(), "a done run is not run again");
    }

    #[test]
    fn without_workers_a_task_trains_on_the_cpus_slurm_gives_it() {
        let f = Fixture::new();
        let runs = [f.run("a", 1)];
        f.array(None).write(&runs).unwrap();
        let out = f.task(Some("0"), &[("SLURM_CPUS_PER_TASK", "3")]);
        assert!(out.status.success(), "{}", stderr(&out));
        let argv = std::fs::read_to_string(runs[0].dir.join("argv.txt")).unwrap();
        assert!(argv.contains("--workers\n3\n"), "{argv}");
        std::fs::remove_dir_all(&runs[0].dir).unwrap();
        let out = f.task(Some("0"), &[]);
        let argv = std::fs::read_to_string(runs[0].dir.join("argv.txt")).unwrap();
        assert!(out.status.success() && argv.contains("--workers\n1\n"), "{argv}");
    }

    #[test]
    fn a_missing_or_out_of_range_index_fails_naming_it() {
        let f = Fixture::new();
        let runs = [f.run("a", 1), f.run("b", 1)];
        f.array(Some(1)).write(&runs).unwrap();
        let out = f.task(None, &[]);
        assert_eq!(out.status.code(), Some(2));
        assert!(stderr(&out).contains("SLURM_ARRAY_TASK_ID is not set"), "{}", stderr(&out));
        for bad in ["2", "-1", "x", "01"] {
            let out = f.task(Some(bad), &[]);
            assert_eq!(out.status.code(), Some(2), "{bad}");
            let err = stderr(&out);
            assert!(err.contains(&format!("SLURM_ARRAY_TASK_ID={bad} is out of range")), "{err}");
            assert!(err.contains("the indices 0 to 1"), "{err}");
        }
        assert!(!runs[0].dir.exists() && !runs[1].dir.exists(), "nothing ran");
    }

    #[test]
    fn a_failing_run_fails_its_task_with_the_end_of_its_log_and_no_stale_summary() {
        let f = Fixture::new();
        let run = f.run("a", 1);
        std::fs::create_dir_all(&run.dir).unwrap();
        std::fs::write(run.dir.join(EXPERIMENT_FILE), "seed = 9\n").unwrap();
        std::fs::write(run.dir.join(SUMMARY_FILE), "{}").unwrap();
        f.array(Some(1)).write(std::slice::from_ref(&run)).unwrap();
        let out = f.task(Some("0"), &[("FAIL", "1")]);
        assert_eq!(out.status.code(), Some(3));
        let err = stderr(&out);
        assert!(err.contains("d-a0.1/a failed (exit status 3)") && err.contains("out of memory"), "{err}");
        assert!(!run.dir.join(SUMMARY_FILE).exists(), "the summary of the earlier experiment is removed");
        assert_eq!(std::fs::read_to_string(run.dir.join(EXPERIMENT_FILE)).unwrap(), "seed = 1\n");
    }

    #[test]
    fn with_nothing_pending_no_array_is_written_and_a_stale_one_is_removed() {
        let f = Fixture::new();
        let runs = [f.run("a", 1), f.run("b", 1)];
        assert_eq!(f.array(Some(1)).write(&[]).unwrap(), 0);
        assert!(!f.tmp.path().join("slurm").exists(), "nothing written");
        assert_eq!(f.array(Some(1)).write(&runs).unwrap(), 2);
        for r in &runs {
            std::fs::create_dir_all(&r.dir).unwrap();
            std::fs::write(r.dir.join(EXPERIMENT_FILE), &r.experiment).unwrap();
            std::fs::write(r.dir.join(SUMMARY_FILE), "{}").unwrap();
        }
        let slurm = f.tmp.path().join("slurm");
        std::fs::write(slurm.join("experiments/notes.toml"), "").unwrap();
        assert_eq!(f.array(Some(1)).write(&runs).unwrap(), 0);
        assert!(!f.script().exists() && !slurm.join("manifest.tsv").exists());
        let left: Vec<String> = contents(&slurm.join("experiments")).into_keys().collect();
        assert_eq!(left, ["notes.toml"], "only the array's own experiment files are removed");
    }
}
