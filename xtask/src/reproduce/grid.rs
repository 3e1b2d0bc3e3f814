//! `experiments/<paper>/grid.toml`: what a reproduction runs at each scale, what it checks and
//! which figures it draws; and its expansion into concrete runs (an experiment TOML each).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use toml::{Table, Value};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grid {
    pub paper: String,
    pub title: String,
    pub datasets: BTreeMap<String, DatasetEntry>,
    pub rows: Vec<Row>,
    #[serde(default)]
    pub extra: Vec<Extra>,
    pub scales: BTreeMap<String, Scale>,
    #[serde(default)]
    pub checks: Vec<Check>,
    #[serde(default)]
    pub orderings: Vec<Ordering>,
    #[serde(default)]
    pub figures: Vec<Figure>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatasetEntry {
    /// The base experiment, relative to the grid file.
    pub base: String,
    pub alphas: Vec<f64>,
}

/// A configuration run at every (dataset, α) of the tables.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Row {
    pub id: String,
    pub method: String,
    #[serde(default)]
    pub set: Table,
    /// NaN losses are expected (OAP), not an error.
    #[serde(default)]
    pub may_diverge: bool,
}

/// A configuration run only for a figure, at the α given per dataset.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Extra {
    pub id: String,
    pub method: String,
    pub datasets: BTreeMap<String, f64>,
    #[serde(default)]
    pub set: Table,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scale {
    #[serde(default)]
    pub set: Table,
    #[serde(default)]
    pub datasets: BTreeMap<String, ScaleDataset>,
    /// The datasets whose figure-only runs this scale runs (default: all).
    pub extra_datasets: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScaleDataset {
    /// The α values of the tables at this scale (default: the dataset's).
    pub alphas: Option<Vec<f64>>,
    #[serde(default)]
    pub set: Table,
}

/// A pass/fail check on a finished run: `metric` is a summary field (`final_accuracy`,
/// `best_accuracy`) compared with `above`, or `diagnostics`, whose last logged values are
/// compared with `equals` and `at_most`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Check {
    pub what: String,
    /// The scales it applies to (default: all).
    pub scales: Option<Vec<String>>,
    /// `<dataset>-a<α>/<row or extra id>`.
    pub run: String,
    pub metric: String,
    pub above: Option<f64>,
    #[serde(default)]
    pub equals: BTreeMap<String, f64>,
    #[serde(default)]
    pub at_most: BTreeMap<String, f64>,
}

/// An expected ordering of rows' best accuracy, checked in every table column.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ordering {
    pub what: String,
    pub chains: Vec<Vec<String>>,
    /// Accuracy (0–1) by which a "≥" may fall short.
    #[serde(default)]
    pub tolerance: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Figure {
    pub file: String,
    pub title: String,
    /// `accuracy` and/or `loss`: one panel row each.
    pub metrics: Vec<String>,
    pub panels: Vec<PanelSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PanelSpec {
    pub dataset: String,
    pub alpha: f64,
    pub runs: Vec<String>,
}

/// One run of the grid, ready to execute.
#[derive(Debug, Clone)]
pub struct PlannedRun {
    /// `<dataset>-a<α>/<id>`, the name checks and reports use.
    pub key: String,
    pub dataset: String,
    pub alpha: f64,
    /// The row or extra id.
    pub id: String,
    pub seed: u64,
    pub may_diverge: bool,
    /// The experiment TOML.
    pub experiment: String,
    pub dir: PathBuf,
}

/// `<dataset>-a<α>`: the group directory and key prefix of a (dataset, α) setting.
pub fn setting(dataset: &str, alpha: f64) -> String {
    format!("{dataset}-a{alpha}")
}

impl Grid {
    pub fn load(path: &Path) -> Result<Grid> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let grid: Grid = toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        for (name, scale) in &grid.scales {
            if let Some(unknown) = scale.datasets.keys().find(|d| !grid.datasets.contains_key(*d)) {
                bail!("{}: scales.{name}.datasets.{unknown}: not a dataset of the grid", path.display());
            }
        }
        Ok(grid)
    }

    pub fn scale(&self, name: &str) -> Result<&Scale> {
        self.scales.get(name).with_context(|| {
            format!(
                "unknown scale `{name}`; this grid has: {}",
                self.scales.keys().cloned().collect::<Vec<_>>().join(", ")
            )
        })
    }

    /// The table α values of `dataset` at `scale`.
    pub fn alphas(&self, dataset: &str, scale: &Scale) -> Vec<f64> {
        let own = scale.datasets.get(dataset).and_then(|d| d.alphas.clone());
        own.unwrap_or_else(|| self.datasets[dataset].alphas.clone())
    }

    /// Every run of `scale` over `datasets` and `seeds`, in a stable order; `grid_dir` holds
    /// the base files, `out` receives the run directories.
    pub fn plan(
        &self,
        scale_name: &str,
        datasets: &[String],
        seeds: &[u64],
        grid_dir: &Path,
        out: &Path,
    ) -> Result<Vec<PlannedRun>> {
        let scale = self.scale(scale_name)?;
        let mut runs = Vec::new();
        for dataset in datasets {
            let entry = &self.datasets[dataset];
            let base_path = grid_dir.join(&entry.base);
            let base_text =
                std::fs::read_to_string(&base_path).with_context(|| format!("reading {}", base_path.display()))?;
            let base: Table = toml::from_str(&base_text).with_context(|| format!("parsing {}", base_path.display()))?;
            let mut jobs: Vec<(f64, &str, &str, &Table, bool)> = Vec::new();
            for alpha in self.alphas(dataset, scale) {
                for row in &self.rows {
                    jobs.push((alpha, &row.id, &row.method, &row.set, row.may_diverge));
                }
            }
            let extras_here = scale.extra_datasets.as_ref().is_none_or(|d| d.contains(dataset));
            for extra in self.extra.iter().filter(|_| extras_here) {
                if let Some(&alpha) = extra.datasets.get(dataset) {
                    jobs.push((alpha, &extra.id, &extra.method, &extra.set, false));
                }
            }
            let scale_set = scale.datasets.get(dataset).map(|d| &d.set);
            for (alpha, id, method, set, may_diverge) in jobs {
                for &seed in seeds {
                    let group = setting(dataset, alpha);
                    let mut exp = base.clone();
                    exp.insert("name".into(), Value::String(format!("{}-{group}-{id}-s{seed}", self.paper)));
                    exp.insert("seed".into(), Value::Integer(seed as i64));
                    exp.insert("method".into(), Value::String(method.into()));
                    set_path(&mut exp, "partition.alpha", Value::Float(alpha))?;
                    for layer in [Some(set), Some(&scale.set), scale_set].into_iter().flatten() {
                        for (key, value) in layer {
                            set_path(&mut exp, key, value.clone())
                                .with_context(|| format!("applying `{key}` to {}", base_path.display()))?;
                        }
                    }
                    runs.push(PlannedRun {
                        key: format!("{group}/{id}"),
                        dataset: dataset.clone(),
                        alpha,
                        id: id.to_string(),
                        seed,
                        may_diverge,
                        experiment: toml::to_string(&exp)?,
                        dir: out.join(scale_name).join(&group).join(format!("{id}-s{seed}")),
                    });
                }
            }
        }
        Ok(runs)
    }
}

/// Sets `a.b.c = value` in `table`, creating the intermediate tables.
fn set_path(table: &mut Table, dotted: &str, value: Value) -> Result<()> {
    let mut keys: Vec<&str> = dotted.split('.').collect();
    let last = keys.pop().expect("split yields at least one key");
    let mut at = table;
    for key in keys {
        let next = at.entry(key).or_insert_with(|| Value::Table(Table::new()));
        at = match next {
            Value::Table(t) => t,
            other => bail!("`{dotted}`: `{key}` is a {}, not a table", other.type_str()),
        };
    }
    at.insert(last.into(), value);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRID: &str = r#"
        paper = "p"
        title = "t"
        [datasets.d]
        base = "base.toml"
        alphas = [0.1, 0.5]
        [[rows]]
        id = "a-l"
        method = "a"
        set = { "mask.level" = "l" }
        [[extra]]
        id = "fig"
        method = "b"
        datasets = { d = 0.3 }
        [scales.full]
        [scales.small]
        set = { "scheduler.rounds" = 10 }
        extra_datasets = []
        [scales.small.datasets.d]
        alphas = [0.5]
    "#;

    fn plan(scale: &str) -> Vec<PlannedRun> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("base.toml"), "name = \"x\"\n[scheduler]\nrounds = 200\n").unwrap();
        let grid: Grid = toml::from_str(GRID).unwrap();
        grid.plan(scale, &["d".into()], &[1, 2], dir.path(), Path::new("/out")).unwrap()
    }

    #[test]
    fn full_scale_runs_every_row_at_every_alpha_and_the_extras() {
        let runs = plan("full");
        let keys: Vec<(String, u64)> = runs.iter().map(|r| (r.key.clone(), r.seed)).collect();
        let expected = [("d-a0.1/a-l", 1), ("d-a0.1/a-l", 2), ("d-a0.5/a-l", 1), ("d-a0.5/a-l", 2), ("d-a0.3/fig", 1)];
        assert_eq!(keys[..5], expected.map(|(k, s)| (k.to_string(), s)));
        assert_eq!(runs.len(), 6);
        let exp: Table = toml::from_str(&runs[0].experiment).unwrap();
        assert_eq!(exp["method"].as_str(), Some("a"));
        assert_eq!(exp["partition"]["alpha"].as_float(), Some(0.1));
        assert_eq!(exp["mask"]["level"].as_str(), Some("l"));
        assert_eq!(exp["scheduler"]["rounds"].as_integer(), Some(200));
        assert_eq!(exp["seed"].as_integer(), Some(1));
        assert_eq!(runs[1].dir, Path::new("/out/full/d-a0.1/a-l-s2"));
    }

    #[test]
    fn a_scale_narrows_alphas_overrides_keys_and_drops_extras() {
        let runs = plan("small");
        assert_eq!(runs.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(), ["d-a0.5/a-l", "d-a0.5/a-l"]);
        let exp: Table = toml::from_str(&runs[0].experiment).unwrap();
        assert_eq!(exp["scheduler"]["rounds"].as_integer(), Some(10));
    }

    #[test]
    fn setting_a_key_under_a_value_is_an_error() {
        let mut t: Table = toml::from_str("method = \"x\"").unwrap();
        let err = set_path(&mut t, "method.level", Value::Integer(1)).unwrap_err().to_string();
        assert!(err.contains("`method` is a string"), "{err}");
    }
}
