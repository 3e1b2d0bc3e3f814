//! Executes planned runs with the `fl` binary, `jobs` processes at a time, each running one run
//! (`fl run`) or a pack of up to `pack` consecutive runs (`fl pack`, their cohorts trained
//! together). A run whose directory holds a
//! `summary.json` beside an identical `experiment.toml` is done and is not run again, so an
//! interrupted reproduction resumes where it stopped.
//!
//! A run's steps (`prepare`, then the command line of `fl_run_args`) are defined here once: the
//! Slurm job array of `slurm` renders the same command line and repeats the same steps in bash.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use anyhow::{Context, Result};

use super::grid::PlannedRun;
use super::records::Records;

pub struct Runner {
    pub fl: PathBuf,
    pub device: String,
    pub jobs: usize,
    /// Most runs per `fl` process.
    pub pack: usize,
    /// Client jobs trained concurrently inside each run.
    pub workers: usize,
    /// Where a run that finishes is recorded at once.
    pub records: Records,
}

pub use super::grid::{EXPERIMENT_FILE, SUMMARY_FILE};
/// `fl`'s output and errors, in the run directory.
pub const LOG_FILE: &str = "log.txt";

/// Whether `run` finished earlier with the same experiment ([`PlannedRun::is_done`]).
pub fn is_done(run: &PlannedRun) -> bool {
    run.is_done()
}

/// The runs of `runs` that are not done, in order: those the runner runs.
pub fn pending(runs: &[PlannedRun]) -> Vec<&PlannedRun> {
    runs.iter().filter(|r| !is_done(r)).collect()
}

/// A word of a run's `fl` command line: fixed, or a value of the run that the runner fills in
/// and the Slurm job script reads from its manifest and environment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arg<'a> {
    Word(&'a str),
    /// `<run dir>/experiment.toml`.
    ExperimentFile,
    RunDir,
    /// The client jobs trained at once inside the run.
    Workers,
}

/// The arguments of `fl` that run a prepared run directory:
/// `run <run dir>/experiment.toml --out <run dir> --device D --workers N --quiet --resume`:
/// the runner runs only what is not done, and a run an earlier attempt left unfinished goes on
/// from its last checkpoint ([`prepare`] starts it over if its experiment changed since).
pub fn fl_run_args(device: &str) -> Vec<Arg<'_>> {
    use Arg::{ExperimentFile, RunDir, Word, Workers};
    vec![
        Word("run"),
        ExperimentFile,
        Word("--out"),
        RunDir,
        Word("--device"),
        Word(device),
        Word("--workers"),
        Workers,
        Word("--quiet"),
        Word("--resume"),
    ]
}

/// Makes `run`'s directory ready for `fl`: creates it, removes a summary left by an earlier
/// experiment (so that an interrupted run never looks finished) and writes the experiment
/// file, whose path it returns. Where the experiment differs from the one an interrupted
/// attempt ran, that attempt's config goes too, so `fl run --resume` starts over.
pub fn prepare(run: &PlannedRun) -> Result<PathBuf> {
    std::fs::create_dir_all(&run.dir).with_context(|| format!("creating {}", run.dir.display()))?;
    let _ = std::fs::remove_file(run.dir.join(SUMMARY_FILE));
    let file = run.dir.join(EXPERIMENT_FILE);
    if std::fs::read_to_string(&file).is_ok_and(|earlier| earlier != run.experiment) {
        let _ = std::fs::remove_file(run.dir.join("config.toml"));
    }
    std::fs::write(&file, &run.experiment).with_context(|| format!("writing {}", file.display()))?;
    Ok(file)
}

impl Runner {
    /// Runs every run of `runs` that is not done; returns the keys (and directories) of those
    /// that failed. Progress goes to stdout as runs finish.
    pub fn run_all(&self, runs: &[PlannedRun]) -> Vec<(String, PathBuf)> {
        let todo = pending(runs);
        let total = todo.len();
        let per_process = if self.pack > 1 { format!(", packs of up to {}", self.pack) } else { String::new() };
        println!(
            "{} runs planned, {} already done, {} to run ({} process(es) at a time{per_process})",
            runs.len(),
            runs.len() - total,
            total,
            self.jobs
        );
        let queue: Mutex<VecDeque<&[&PlannedRun]>> = Mutex::new(todo.chunks(self.pack.max(1)).collect());
        let finished = Mutex::new((0usize, Vec::new()));
        std::thread::scope(|s| {
            for _ in 0..self.jobs.max(1) {
                s.spawn(|| {
                    loop {
                        let Some(chunk) = queue.lock().expect("queue lock").pop_front() else { break };
                        let results: Vec<(&PlannedRun, Result<String>)> = match chunk {
                            [run] => vec![(*run, self.run_one(run))],
                            _ => self.run_pack(chunk),
                        };
                        let mut done = finished.lock().expect("progress lock");
                        for (run, result) in results {
                            done.0 += 1;
                            let tag = format!("[{}/{total}] {} (seed {})", done.0, run.key, run.seed);
                            match result {
                                Ok(line) => println!("{tag}: {line}"),
                                Err(e) => {
                                    println!("{tag}: FAILED: {e:#}");
                                    done.1.push((run.key.clone(), run.dir.clone()));
                                }
                            }
                        }
                    }
                });
            }
        });
        finished.into_inner().expect("progress lock").1
    }

    fn run_one(&self, run: &PlannedRun) -> Result<String> {
        // Finished since the plan was made (another reproduction on the same runs): keep it.
        if is_done(run) {
            return self.collect(run);
        }
        let file = prepare(run)?;
        let workers = self.workers.to_string();
        let args = fl_run_args(&self.device).into_iter().map(|a| match a {
            Arg::Word(w) => OsString::from(w),
            Arg::ExperimentFile => file.clone().into(),
            Arg::RunDir => run.dir.clone().into(),
            Arg::Workers => OsString::from(&workers),
        });
        let log_path = run.dir.join(LOG_FILE);
        // Appended to: a resumed run's log keeps the attempts before it.
        let log = File::options()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("opening {}", log_path.display()))?;
        let status = Command::new(&self.fl)
            .args(args)
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .status()
            .with_context(|| format!("starting {}", self.fl.display()))?;
        if !status.success() {
            let tail = last_lines(&log_path, 5);
            anyhow::bail!("{status}; log {}:\n{tail}", log_path.display());
        }
        self.collect(run)
    }

    /// Runs `runs` as one `fl pack` process; each run's result comes from its own directory
    /// (`fl pack` writes every run's `log.txt`), so one failed run fails alone.
    fn run_pack<'r>(&self, runs: &[&'r PlannedRun]) -> Vec<(&'r PlannedRun, Result<String>)> {
        // Runs finished since the plan was made (another reproduction on the same runs) are kept.
        let (done, runs): (Vec<&PlannedRun>, Vec<&PlannedRun>) = runs.iter().partition(|r| is_done(r));
        let mut results: Vec<(&PlannedRun, Result<String>)> = done.into_iter().map(|r| (r, self.collect(r))).collect();
        if runs.is_empty() {
            return results;
        }
        let prepared: Vec<(&PlannedRun, Result<PathBuf>)> = runs.iter().map(|r| (*r, prepare(r))).collect();
        let dirs: Vec<&Path> = prepared.iter().filter(|(_, p)| p.is_ok()).map(|(r, _)| r.dir.as_path()).collect();
        let status = Command::new(&self.fl)
            .arg("pack")
            .args(&dirs)
            .args(["--device", &self.device, "--workers", &self.workers.to_string(), "--force"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output();
        let trouble = match &status {
            Ok(out) if out.status.success() => String::new(),
            Ok(out) => format!("{}; {}", out.status, String::from_utf8_lossy(&out.stderr).trim()),
            Err(e) => format!("starting {}: {e}", self.fl.display()),
        };
        results.extend(prepared.into_iter().map(|(run, file)| {
            let result = file.and_then(|_| {
                if run.dir.join(SUMMARY_FILE).is_file() {
                    self.collect(run)
                } else {
                    let log = run.dir.join(LOG_FILE);
                    anyhow::bail!("the pack {trouble}; log {}:\n{}", log.display(), last_lines(&log, 5))
                }
            });
            (run, result)
        }));
        results
    }

    /// Records a finished run and says its result.
    fn collect(&self, run: &PlannedRun) -> Result<String> {
        let outcome = super::outcome::Outcome::read(&run.dir, run.seed)?;
        self.records.save(run)?;
        Ok(format!(
            "best {:.4}, final {:.4}, {:.0} s",
            outcome.best_accuracy, outcome.final_accuracy, outcome.wall_time_s
        ))
    }
}

fn last_lines(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_done_only_with_a_summary_beside_the_same_experiment() {
        let dir = tempfile::tempdir().unwrap();
        let run = PlannedRun::example(dir.path(), "seed = 1\n");
        assert!(!is_done(&run), "nothing written");
        std::fs::write(dir.path().join("experiment.toml"), "seed = 1\n").unwrap();
        assert!(!is_done(&run), "started, not finished");
        std::fs::write(dir.path().join("summary.json"), "{}").unwrap();
        assert!(is_done(&run));
        let changed = PlannedRun { experiment: "seed = 2\n".into(), ..run };
        assert!(!is_done(&changed), "the grid changed: run again");
    }

    /// A stand-in for `fl pack DIR… --device D --workers N` (packs of 2 below: runs 1–2 and
    /// 3–4): finishes every run but those
    /// with seed 3, writing each run's `log.txt` as `fl pack` does, and fails if one failed.
    const FAKE_FL_PACK: &str = r#"#!/bin/sh
[ "$1" = pack ] || exit 9
shift
failed=0
for d in "$@"; do
    case $d in --*) break ;; esac
    if grep -q 'seed = 3' "$d/experiment.toml"; then
        echo "error: $d/experiment.toml: trainer.lr: must be positive" > "$d/log.txt"
        failed=1
        continue
    fi
    printf 'virtual_time_s,version,accuracy,loss\n1,1,0.5,1.0\n' > "$d/metrics.csv"
    : > "$d/events.jsonl"
    echo '{"best_accuracy":0.5,"final_accuracy":0.5,"final_loss":1.0,"wall_time_s":1.0}' > "$d/summary.json"
    echo "final accuracy 0.5" > "$d/log.txt"
done
exit $failed
"#;

    #[test]
    fn a_pack_records_its_finished_runs_and_fails_only_the_run_that_failed() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let fl = tmp.path().join("fl");
        std::fs::write(&fl, FAKE_FL_PACK).unwrap();
        std::fs::set_permissions(&fl, std::fs::Permissions::from_mode(0o755)).unwrap();
        let runs: Vec<PlannedRun> = (1..=4)
            .map(|seed| PlannedRun {
                key: format!("d-a0.1/r{seed}"),
                seed,
                ..PlannedRun::example(&tmp.path().join(format!("runs/r{seed}")), &format!("seed = {seed}\n"))
            })
            .collect();
        let records = tmp.path().join("records");
        let runner =
            Runner { fl, device: "cpu".into(), jobs: 1, pack: 2, workers: 1, records: Records { root: records } };
        let failed = runner.run_all(&runs);
        assert_eq!(failed, vec![("d-a0.1/r3".to_string(), runs[2].dir.clone())]);
        for (i, run) in runs.iter().enumerate() {
            assert_eq!(is_done(run), i != 2, "run {}", i + 1);
            assert_eq!(runner.records.find(run).is_some(), i != 2, "record of run {}", i + 1);
        }
        assert!(std::fs::read_to_string(runs[2].dir.join(LOG_FILE)).unwrap().contains("lr"));
    }

    #[test]
    fn a_run_finished_since_the_plan_is_kept_not_prepared_again() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let fl = tmp.path().join("fl");
        std::fs::write(&fl, "#!/bin/sh\nexit 9\n").unwrap();
        std::fs::set_permissions(&fl, std::fs::Permissions::from_mode(0o755)).unwrap();
        let run = PlannedRun::example(&tmp.path().join("run"), "seed = 1\n");
        std::fs::create_dir_all(&run.dir).unwrap();
        std::fs::write(run.dir.join("experiment.toml"), "seed = 1\n").unwrap();
        std::fs::write(run.dir.join("metrics.csv"), "virtual_time_s,version,accuracy,loss\n1,1,0.5,1.0\n").unwrap();
        std::fs::write(run.dir.join("events.jsonl"), "").unwrap();
        let summary = r#"{"best_accuracy":0.5,"final_accuracy":0.5,"final_loss":1.0,"wall_time_s":1}"#;
        std::fs::write(run.dir.join("summary.json"), summary).unwrap();
        for pack in [1, 2] {
            let runner = Runner {
                fl: fl.clone(),
                device: "cpu".into(),
                jobs: 1,
                pack,
                workers: 1,
                records: Records { root: tmp.path().join("records") },
            };
            let result = if pack == 1 { runner.run_one(&run) } else { runner.run_pack(&[&run]).remove(0).1 };
            assert!(result.is_ok(), "pack {pack}: {result:?}");
            assert_eq!(std::fs::read_to_string(run.dir.join("summary.json")).unwrap(), summary, "pack {pack}");
        }
    }
}
