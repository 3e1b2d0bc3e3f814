//! `experiments/<paper>/grid.toml`: what a reproduction runs at each scale, what it checks and
//! which figures it draws; and its expansion into concrete runs (an experiment TOML each).
//!
//! Each dataset has *settings*, named groups of keys laid over its base experiment (a Dirichlet
//! α, a device profile and fragment count, …); every row runs at every setting. `alphas` is a
//! shorthand for settings `a<α>` that set `partition.alpha`.

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
    /// Keys laid over the runs of some rows at some datasets and settings, after the
    /// setting's and the row's own (a method's hyper-parameters that the paper gives per
    /// column, which the other rows' components do not have).
    #[serde(default)]
    pub sets: Vec<VariantSet>,
    #[serde(default)]
    pub extra: Vec<Extra>,
    pub scales: BTreeMap<String, Scale>,
    #[serde(default)]
    pub checks: Vec<Check>,
    #[serde(default)]
    pub orderings: Vec<Ordering>,
    #[serde(default)]
    pub figures: Vec<Figure>,
    #[serde(default)]
    pub sweeps: Vec<Sweep>,
    #[serde(default)]
    pub traces: Vec<TraceFigure>,
    #[serde(default)]
    pub trends: Vec<Trend>,
    #[serde(default)]
    pub variants: BTreeMap<String, Variant>,
}

/// An alternative to the paper's choices (`--variant NAME[,NAME…]`): keys laid over some rows,
/// after the scale's and the previous variant's. The report goes to
/// `variants/<scale>-<NAME>[+NAME…]/`; a run the variants leave unchanged is the scale's own
/// run (see `records`). A variant states the hypothesis it tests before it is run; the index
/// `reports/<paper>/variants.md` lists each with its verdict and the cells its reports moved.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Variant {
    /// What it changes, in one line, for the index.
    pub summary: String,
    /// What it changes, in full, for the report's heading.
    pub what: String,
    /// The claim it tests, written before its first run.
    pub hypothesis: String,
    /// What its runs showed (absent while open).
    pub verdict: Option<String>,
    pub sets: Vec<VariantSet>,
}

/// Keys a variant (or the grid's `sets`) lays over the runs of `rows` (row or extra ids;
/// default all) but `except_rows` on `datasets` and at `settings` (setting ids such as `a0.1`;
/// default all) at `scales` (default all).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VariantSet {
    pub rows: Option<Vec<String>>,
    #[serde(default)]
    pub except_rows: Vec<String>,
    pub datasets: Option<Vec<String>>,
    pub settings: Option<Vec<String>>,
    pub scales: Option<Vec<String>>,
    pub set: Table,
}

impl VariantSet {
    fn applies(&self, scale: &str, dataset: &str, setting: &str, id: &str) -> bool {
        self.scales.as_ref().is_none_or(|s| s.iter().any(|s| s == scale))
            && self.rows.as_ref().is_none_or(|r| r.iter().any(|r| r == id))
            && !self.except_rows.iter().any(|r| r == id)
            && self.datasets.as_ref().is_none_or(|d| d.iter().any(|d| d == dataset))
            && self.settings.as_ref().is_none_or(|s| s.iter().any(|s| s == setting))
    }
}

/// A figure of per-device diagnostics against virtual time (`alpha.<device>`, …): for each
/// panel's runs and each prefix, the devices' mean with the band of their 10th to 90th
/// percentiles, at every evaluation.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceFigure {
    pub file: String,
    pub title: String,
    /// The prefixes of the diagnostics (`alpha` for `alpha.0`, `alpha.1`, …), one panel each.
    pub diagnostics: Vec<String>,
    pub panels: Vec<PanelSpec>,
}

/// A figure of one row across settings: `metrics` against the setting coordinate `x`, one
/// line per value of the coordinate `series`, one panel per dataset and metric.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sweep {
    pub file: String,
    pub title: String,
    /// The row plotted.
    pub run: String,
    pub x: String,
    pub series: String,
    /// Some of [`SWEEP_METRICS`]: one panel each.
    pub metrics: Vec<String>,
}

/// What a sweep can plot of each run: its key, its name in a panel's title, its y axis.
pub const SWEEP_METRICS: [(&str, &str, &str); 3] = [
    ("time_to_target", "time to target", "virtual seconds"),
    ("best_accuracy", "best test accuracy", "accuracy (%)"),
    ("resource_utilization", "resource utilisation", "RU (%)"),
];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatasetEntry {
    /// The dataset's name in words, as the paper writes it (`CIFAR-10`); default: its key.
    pub title: Option<String>,
    /// What this dataset's runs stand in for the paper's with, when the paper's data or model
    /// cannot be had here (`Fashion-MNIST, 8-block ViT`): its figures' panels then say
    /// "substitution: …" where they would name the dataset.
    #[serde(default)]
    pub substitution: Option<String>,
    /// The base experiment, relative to the grid file.
    pub base: String,
    #[serde(default)]
    pub alphas: Vec<f64>,
    #[serde(default)]
    pub settings: Vec<Setting>,
}

/// A named group of keys laid over a dataset's base experiment.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Setting {
    pub id: String,
    #[serde(default)]
    pub set: Table,
    /// Named numbers locating the setting on the axes of sweep figures (`beta`, `M`).
    #[serde(default)]
    pub coords: BTreeMap<String, f64>,
    /// Its name in figures' titles, where the paper names it (`E1`) rather than by the
    /// coordinates it also has for sweeps (default: its coordinates, else its id).
    pub words: Option<String>,
}

impl Setting {
    /// The setting `a<α>`, which sets `partition.alpha`.
    pub fn alpha(alpha: f64) -> Setting {
        let mut set = Table::new();
        set.insert("partition.alpha".into(), Value::Float(alpha));
        Setting { id: format!("a{alpha}"), set, coords: BTreeMap::from([("alpha".to_string(), alpha)]), words: None }
    }
}

/// A setting named by its Dirichlet α or by its id.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum SettingRef {
    Alpha(f64),
    Id(String),
}

impl SettingRef {
    pub fn id(&self) -> String {
        match self {
            SettingRef::Alpha(a) => format!("a{a}"),
            SettingRef::Id(id) => id.clone(),
        }
    }
}

impl DatasetEntry {
    /// The dataset as a figure panel names it: `substitution: …` for a substitution, else its
    /// title, else `key`.
    pub fn panel_name(&self, key: &str) -> String {
        match (&self.substitution, &self.title) {
            (Some(what), _) => format!("substitution: {what}"),
            (None, Some(title)) => title.clone(),
            (None, None) => key.to_string(),
        }
    }

    /// Every setting of the dataset: its α shorthands, then its named settings.
    pub fn all_settings(&self) -> Vec<Setting> {
        self.alphas.iter().map(|&a| Setting::alpha(a)).chain(self.settings.iter().cloned()).collect()
    }

    /// A setting in words for a figure's title: `Dirichlet α = 0.15` for an α shorthand (listed
    /// or not: a figure may name an α this dataset does not run), its own `words` or else its
    /// coordinates (`β = 0.5, M = 4`) for a named setting, else its id.
    pub fn setting_words(&self, id: &str) -> String {
        let named = self.settings.iter().find(|s| s.id == id);
        let listed = self.alphas.iter().any(|&a| format!("a{a}") == id);
        let alpha = id.strip_prefix('a').and_then(|a| a.parse::<f64>().ok());
        if let Some(a) = alpha.filter(|_| listed || named.is_none()) {
            return format!("Dirichlet α = {a}");
        }
        match named {
            Some(Setting { words: Some(words), .. }) => words.clone(),
            Some(s) if !s.coords.is_empty() => {
                let symbol = |k: &str| match k {
                    "alpha" => "α".to_string(),
                    "beta" => "β".to_string(),
                    other => other.to_string(),
                };
                // β and M first, as the paper names its grid; then the rest.
                let mut keys: Vec<&String> = s.coords.keys().collect();
                keys.sort_by_key(|k| match k.as_str() {
                    "beta" => 0,
                    "M" => 1,
                    _ => 2,
                });
                keys.iter().map(|k| format!("{} = {}", symbol(k), s.coords[*k])).collect::<Vec<_>>().join(", ")
            }
            _ => id.to_string(),
        }
    }
}

/// A configuration run at every (dataset, setting) of the tables.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Row {
    pub id: String,
    /// Its name in figures' legends (default: its row's "Method Level" in the paper's tables).
    pub label: Option<String>,
    pub method: String,
    #[serde(default)]
    pub set: Table,
    /// NaN losses are expected (OAP), not an error.
    #[serde(default)]
    pub may_diverge: bool,
    /// The ids of the settings it runs at (default: every setting).
    pub settings: Option<Vec<String>>,
    /// The datasets it runs on (default: every dataset).
    pub datasets: Option<Vec<String>>,
}

/// A configuration run only for a figure, at the setting (or α) given per dataset.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Extra {
    pub id: String,
    /// Its name in figures' legends, as the paper's figure names it (default: its id).
    pub label: Option<String>,
    pub method: String,
    pub datasets: BTreeMap<String, SettingRef>,
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
    /// The α values of the tables at this scale (default: the dataset's settings).
    pub alphas: Option<Vec<f64>>,
    /// The ids of the dataset's settings run at this scale (default: all).
    pub settings: Option<Vec<String>>,
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
    /// `final_accuracy`, `best_accuracy` or `resource_utilization` (0–1), bounded by `above`
    /// and `below`.
    pub metric: String,
    pub above: Option<f64>,
    pub below: Option<f64>,
    #[serde(default)]
    pub equals: BTreeMap<String, f64>,
    #[serde(default)]
    pub at_most: BTreeMap<String, f64>,
}

/// An expected ordering of rows, checked at every setting: each value of a chain is more than
/// `factor` times the next (strictly: a tie does not hold), or, with a `tolerance` ε, at least
/// `factor` times the next minus ε (the report states ε).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ordering {
    /// Its section in the paper's findings.md, when something is known of it.
    pub id: Option<String>,
    pub what: String,
    pub chains: Vec<Vec<String>>,
    #[serde(default)]
    pub metric: OrderMetric,
    /// For `job_time` and `peak_memory`: groups of clients (ids, e.g. one device type each),
    /// each group a cell of its own.
    #[serde(default)]
    pub clients: Vec<Vec<usize>>,
    /// The datasets it is checked on (default: every dataset of the grid), for a claim the paper
    /// makes of some datasets only.
    pub datasets: Option<Vec<String>>,
    /// ε, in the metric's unit (accuracy 0–1, seconds), by which a "≥" may fall short; 0: strict.
    #[serde(default)]
    pub tolerance: f64,
    #[serde(default = "unit_factor")]
    pub factor: f64,
    /// In how many of the (chain, setting) cells the ordering must hold to pass.
    #[serde(default)]
    pub holds_in: Quorum,
    /// Why it fails where it does, when that has been measured: appended to its detail when it
    /// fails, never when it holds.
    #[serde(default)]
    pub known: Option<String>,
}

impl Ordering {
    /// Whether `a` comes before `b` in the chain: more than `factor` × `b`, or within ε of it.
    pub fn holds(&self, a: f64, b: f64) -> bool {
        if self.tolerance > 0.0 { a + self.tolerance >= self.factor * b } else { a > self.factor * b }
    }
}

/// An expected shape of one row's metric along a grid coordinate (the paper's sweep figures):
/// for each dataset and each value of `series`, the points in `x` order (seed 1, as the sweep
/// figure shows them) must have `shape`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Trend {
    /// Its section in the paper's findings.md, when something is known of it.
    pub id: Option<String>,
    pub what: String,
    pub run: String,
    pub x: String,
    pub series: String,
    pub metric: OrderMetric,
    pub shape: Shape,
    /// The datasets it is checked on (default: every dataset of the grid).
    pub datasets: Option<Vec<String>>,
    /// ε, in the unit shown (accuracy points, virtual seconds), by which a step may go the
    /// wrong way; 0: strict.
    #[serde(default)]
    pub tolerance: f64,
    #[serde(default)]
    pub holds_in: Quorum,
    #[serde(default)]
    pub known: Option<String>,
}

/// The shape a [`Trend`] expects of a curve y(x).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Shape {
    /// Every step up: y[i+1] > y[i] (or ≥ y[i] − ε).
    Rising,
    /// Every step down: y[i+1] < y[i] (or ≤ y[i] + ε).
    Falling,
    /// No gain from the first x to the last: y[last] ≤ y[first] + ε.
    NoGain,
    /// Stable, then a sharp drop: the last step is a drop, larger than every earlier step's.
    DropAtEnd,
}

impl Shape {
    /// Whether `ys` (in x order) has the shape, with tolerance `eps`; none when the curve has
    /// too few points to tell.
    pub fn holds(self, ys: &[f64], eps: f64) -> Option<bool> {
        let steps: Vec<f64> = ys.windows(2).map(|w| w[1] - w[0]).collect();
        let within = |d: f64| if eps > 0.0 { d >= -eps } else { d > 0.0 };
        match self {
            Shape::Rising if !steps.is_empty() => Some(steps.iter().all(|&d| within(d))),
            Shape::Falling if !steps.is_empty() => Some(steps.iter().all(|&d| within(-d))),
            Shape::NoGain if ys.len() >= 2 => Some(ys[ys.len() - 1] <= ys[0] + eps),
            Shape::DropAtEnd if steps.len() >= 2 => {
                let (last, earlier) = steps.split_last().expect("two steps");
                Some(*last < 0.0 && earlier.iter().all(|&d| -d < -last))
            }
            _ => None,
        }
    }
}

/// How many cells an ordering must hold in: `every` one, or `most` (more than half), for a
/// paper whose claim is a tendency with exceptions of its own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Quorum {
    #[default]
    Every,
    Most,
}

impl Quorum {
    pub fn met(self, holds: usize, total: usize) -> bool {
        match self {
            Quorum::Every => holds == total,
            Quorum::Most => 2 * holds > total,
        }
    }
}

fn unit_factor() -> f64 {
    1.0
}

/// What an ordering compares.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OrderMetric {
    #[default]
    BestAccuracy,
    /// Virtual seconds to the target accuracy (a chain with a run that never reached it is
    /// not counted).
    TimeToTarget,
    /// Resource utilisation over the run (Co-S²P's Eq. 17), 0–1.
    ResourceUtilization,
    /// The mean job time of the ordering's `clients`, virtual seconds.
    JobTime,
    /// The largest job memory estimate of the ordering's `clients`, MB.
    PeakMemory,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Figure {
    pub file: String,
    pub title: String,
    /// `accuracy` and/or `loss`: one panel row each.
    pub metrics: Vec<String>,
    /// The horizontal axis: `round` (model version) or `time` (virtual seconds).
    #[serde(default = "x_axis_rounds")]
    pub x: String,
    pub panels: Vec<PanelSpec>,
}

fn x_axis_rounds() -> String {
    "round".into()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PanelSpec {
    pub dataset: String,
    /// The setting, by α or id.
    #[serde(alias = "alpha")]
    pub setting: SettingRef,
    pub runs: Vec<String>,
}

/// The experiment file a run directory holds, which `fl` runs.
pub const EXPERIMENT_FILE: &str = "experiment.toml";
/// What `fl` writes last in a run directory: its presence says the run finished.
pub const SUMMARY_FILE: &str = "summary.json";

/// One run of the grid, ready to execute.
#[derive(Debug, Clone)]
pub struct PlannedRun {
    /// `<dataset>-a<α>/<id>`, the name checks and reports use.
    pub key: String,
    pub dataset: String,
    /// The setting's id.
    pub setting: String,
    /// The row or extra id.
    pub id: String,
    pub seed: u64,
    pub may_diverge: bool,
    /// The variants that lay keys over this run (their names, in `--variant` order).
    pub varied_by: Vec<String>,
    /// The experiment TOML.
    pub experiment: String,
    pub dir: PathBuf,
}

impl PlannedRun {
    /// Whether the run finished earlier with the same experiment: a `summary.json` beside an
    /// identical `experiment.toml`.
    pub fn is_done(&self) -> bool {
        self.dir.join(SUMMARY_FILE).is_file()
            && std::fs::read_to_string(self.dir.join(EXPERIMENT_FILE)).is_ok_and(|t| t == self.experiment)
    }
}

#[cfg(test)]
impl PlannedRun {
    /// Run `d-a0.1/x`, seed 1, of `experiment`, in `dir`: the fixture of the runner's tests.
    pub fn example(dir: &Path, experiment: &str) -> PlannedRun {
        PlannedRun {
            key: "d-a0.1/x".into(),
            dataset: "d".into(),
            setting: "a0.1".into(),
            id: "x".into(),
            seed: 1,
            may_diverge: false,
            varied_by: Vec::new(),
            experiment: experiment.into(),
            dir: dir.to_path_buf(),
        }
    }
}

/// `<dataset>-<setting>`: the group directory and key prefix of a (dataset, setting).
pub fn group(dataset: &str, setting: &str) -> String {
    format!("{dataset}-{setting}")
}

impl Grid {
    /// A dataset as a figure panel names it ([`DatasetEntry::panel_name`]); its key if the grid
    /// has no such dataset.
    pub fn panel_name(&self, dataset: &str) -> String {
        self.datasets.get(dataset).map_or_else(|| dataset.to_string(), |e| e.panel_name(dataset))
    }

    /// A setting of `dataset` in words ([`DatasetEntry::setting_words`]); its id if the grid has
    /// no such dataset.
    pub fn setting_words(&self, dataset: &str, id: &str) -> String {
        self.datasets.get(dataset).map_or_else(|| id.to_string(), |e| e.setting_words(id))
    }

    pub fn load(path: &Path) -> Result<Grid> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let grid: Grid = toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        for (name, scale) in &grid.scales {
            if let Some(unknown) = scale.datasets.keys().find(|d| !grid.datasets.contains_key(*d)) {
                bail!("{}: scales.{name}.datasets.{unknown}: not a dataset of the grid", path.display());
            }
            for (d, sd) in &scale.datasets {
                for id in sd.settings.iter().flatten() {
                    grid.resolve(d, &SettingRef::Id(id.clone()))
                        .with_context(|| format!("{}: scales.{name}.datasets.{d}.settings", path.display()))?;
                }
            }
        }
        for row in &grid.rows {
            if let Some(bad) = row.datasets.iter().flatten().find(|d| !grid.datasets.contains_key(*d)) {
                bail!("{}: rows `{}`: datasets: `{bad}` is not a dataset of the grid", path.display(), row.id);
            }
        }
        for extra in &grid.extra {
            for (d, r) in &extra.datasets {
                grid.resolve(d, r).with_context(|| format!("{}: extra {}: datasets.{d}", path.display(), extra.id))?;
            }
        }
        let ids: Vec<&String> = grid.rows.iter().map(|r| &r.id).chain(grid.extra.iter().map(|e| &e.id)).collect();
        let unknown = |key: String, named: Vec<&String>| match named.into_iter().find(|r| !ids.contains(r)) {
            Some(bad) => Err(anyhow::anyhow!("{}: {key}: `{bad}` is not a row or extra id", path.display())),
            None => Ok(()),
        };
        for (i, ordering) in grid.orderings.iter().enumerate() {
            unknown(format!("orderings[{i}].chains"), ordering.chains.iter().flatten().collect())?;
        }
        for (i, trend) in grid.trends.iter().enumerate() {
            unknown(format!("trends[{i}].run"), vec![&trend.run])?;
        }
        for (i, figure) in grid.figures.iter().enumerate() {
            for (j, panel) in figure.panels.iter().enumerate() {
                unknown(format!("figures[{i}].panels[{j}].runs"), panel.runs.iter().collect())?;
            }
        }
        for (i, figure) in grid.traces.iter().enumerate() {
            for (j, panel) in figure.panels.iter().enumerate() {
                unknown(format!("traces[{i}].panels[{j}].runs"), panel.runs.iter().collect())?;
            }
        }
        for (i, sweep) in grid.sweeps.iter().enumerate() {
            unknown(format!("sweeps[{i}].run"), vec![&sweep.run])?;
            if let Some(bad) = sweep.metrics.iter().find(|m| !SWEEP_METRICS.iter().any(|(key, ..)| key == m)) {
                let keys: Vec<&str> = SWEEP_METRICS.iter().map(|(key, ..)| *key).collect();
                bail!("{}: sweeps[{i}].metrics: `{bad}` is not one of {keys:?}", path.display());
            }
        }
        let grid_sets = grid.sets.iter().enumerate().map(|(i, vs)| (format!("sets[{i}]"), vs));
        let variant_sets = grid.variants.iter().flat_map(|(name, variant)| {
            variant.sets.iter().enumerate().map(move |(i, vs)| (format!("variants.{name}.sets[{i}]"), vs))
        });
        for (at, vs) in grid_sets.chain(variant_sets) {
            unknown(format!("{at}.rows"), vs.rows.iter().flatten().collect())?;
            unknown(format!("{at}.except_rows"), vs.except_rows.iter().collect())?;
            if let Some(bad) = vs.datasets.iter().flatten().find(|d| !grid.datasets.contains_key(*d)) {
                bail!("{}: {at}.datasets: `{bad}` is not a dataset of the grid", path.display());
            }
            if let Some(bad) = vs.scales.iter().flatten().find(|s| !grid.scales.contains_key(*s)) {
                bail!("{}: {at}.scales: `{bad}` is not a scale of the grid", path.display());
            }
            let in_scope = |d: &&String| vs.datasets.as_ref().is_none_or(|ds| ds.contains(d));
            let mut known: Vec<String> = Vec::new();
            for (d, entry) in grid.datasets.iter().filter(|(d, _)| in_scope(d)) {
                known.extend(entry.all_settings().into_iter().map(|s| s.id));
                for r in grid.extra.iter().filter_map(|e| e.datasets.get(d)) {
                    known.push(grid.resolve(d, r)?.id);
                }
            }
            known.dedup();
            if let Some(bad) = vs.settings.iter().flatten().find(|s| !known.contains(s)) {
                bail!(
                    "{}: {at}.settings: `{bad}` is not a setting of its datasets ({})",
                    path.display(),
                    known.join(", ")
                );
            }
        }
        Ok(grid)
    }

    pub fn variant(&self, name: &str) -> Result<&Variant> {
        self.variants.get(name).with_context(|| {
            let names: Vec<&str> = self.variants.keys().map(String::as_str).collect();
            format!(
                "unknown variant `{name}`; this grid has: {}",
                if names.is_empty() { "none".into() } else { names.join(", ") }
            )
        })
    }

    pub fn scale(&self, name: &str) -> Result<&Scale> {
        self.scales.get(name).with_context(|| {
            format!(
                "unknown scale `{name}`; this grid has: {}",
                self.scales.keys().cloned().collect::<Vec<_>>().join(", ")
            )
        })
    }

    /// The table settings of `dataset` at `scale`.
    pub fn settings(&self, dataset: &str, scale: &Scale) -> Vec<Setting> {
        let all = self.datasets[dataset].all_settings();
        match scale.datasets.get(dataset) {
            Some(ScaleDataset { alphas: Some(alphas), .. }) => alphas.iter().map(|&a| Setting::alpha(a)).collect(),
            Some(ScaleDataset { settings: Some(ids), .. }) => all.into_iter().filter(|s| ids.contains(&s.id)).collect(),
            _ => all,
        }
    }

    /// The setting `r` names for `dataset`: an α, or one of the dataset's settings.
    pub fn resolve(&self, dataset: &str, r: &SettingRef) -> Result<Setting> {
        let entry = self.datasets.get(dataset).with_context(|| format!("`{dataset}` is not a dataset of the grid"))?;
        match r {
            SettingRef::Alpha(a) => Ok(Setting::alpha(*a)),
            SettingRef::Id(id) => entry.all_settings().into_iter().find(|s| &s.id == id).with_context(|| {
                let ids: Vec<String> = entry.all_settings().into_iter().map(|s| s.id).collect();
                format!("`{id}` is not a setting of {dataset}; it has: {}", ids.join(", "))
            }),
        }
    }

    /// The directory name of a scale with variants: `<scale>[-<variant>+…]`.
    pub fn label(scale: &str, variants: &[String]) -> String {
        if variants.is_empty() { scale.to_string() } else { format!("{scale}-{}", variants.join("+")) }
    }

    /// Every run of `scale` with `variants` over `datasets` and `seeds`, in a stable order;
    /// `grid_dir` holds the base files, `out` receives the run directories.
    pub fn plan(
        &self,
        scale_name: &str,
        variants: &[String],
        datasets: &[String],
        seeds: &[u64],
        grid_dir: &Path,
        out: &Path,
    ) -> Result<Vec<PlannedRun>> {
        let scale = self.scale(scale_name)?;
        let mut variant_sets = Vec::new();
        for name in variants {
            variant_sets.extend(&self.variant(name)?.sets);
        }
        let label = Grid::label(scale_name, variants);
        let mut runs = Vec::new();
        for dataset in datasets {
            let entry = &self.datasets[dataset];
            let base_path = grid_dir.join(&entry.base);
            let base_text =
                std::fs::read_to_string(&base_path).with_context(|| format!("reading {}", base_path.display()))?;
            let base: Table = toml::from_str(&base_text).with_context(|| format!("parsing {}", base_path.display()))?;
            let mut jobs: Vec<(Setting, &str, &str, &Table, bool)> = Vec::new();
            for setting in self.settings(dataset, scale) {
                let here = |r: &&Row| {
                    r.settings.as_ref().is_none_or(|s| s.contains(&setting.id))
                        && r.datasets.as_ref().is_none_or(|d| d.contains(dataset))
                };
                for row in self.rows.iter().filter(here) {
                    jobs.push((setting.clone(), &row.id, &row.method, &row.set, row.may_diverge));
                }
            }
            let extras_here = scale.extra_datasets.as_ref().is_none_or(|d| d.contains(dataset));
            for extra in self.extra.iter().filter(|_| extras_here) {
                if let Some(r) = extra.datasets.get(dataset) {
                    jobs.push((self.resolve(dataset, r)?, &extra.id, &extra.method, &extra.set, false));
                }
            }
            let scale_set = scale.datasets.get(dataset).map(|d| &d.set);
            for (setting, id, method, set, may_diverge) in jobs {
                for &seed in seeds {
                    let group = group(dataset, &setting.id);
                    let mut exp = base.clone();
                    exp.insert("name".into(), Value::String(format!("{}-{group}-{id}-s{seed}", self.paper)));
                    exp.insert("seed".into(), Value::Integer(seed as i64));
                    exp.insert("method".into(), Value::String(method.into()));
                    let applies = |v: &VariantSet| v.applies(scale_name, dataset, &setting.id, id);
                    let varied_by: Vec<String> =
                        variants.iter().filter(|n| self.variants[*n].sets.iter().any(applies)).cloned().collect();
                    let variant_layers = variant_sets.iter().filter(|v| applies(v)).map(|v| &v.set);
                    let grid_layers =
                        self.sets.iter().filter(|v| v.applies(scale_name, dataset, &setting.id, id)).map(|v| &v.set);
                    let layers = [Some(&setting.set), Some(set)].into_iter().flatten().chain(grid_layers);
                    let scale_layers = [Some(&scale.set), scale_set].into_iter().flatten();
                    for layer in layers.chain(scale_layers).chain(variant_layers) {
                        for (key, value) in layer {
                            set_path(&mut exp, key, value.clone())
                                .with_context(|| format!("applying `{key}` to {}", base_path.display()))?;
                        }
                    }
                    runs.push(PlannedRun {
                        key: format!("{group}/{id}"),
                        dataset: dataset.clone(),
                        setting: setting.id.clone(),
                        id: id.to_string(),
                        seed,
                        may_diverge,
                        varied_by,
                        experiment: toml::to_string(&exp)?,
                        dir: out.join(&label).join(&group).join(format!("{id}-s{seed}")),
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
    #[test]
    fn shapes_read_a_curve_as_the_paper_describes_it() {
        use super::Shape::*;
        assert_eq!(Rising.holds(&[1.0, 2.0, 3.0], 0.0), Some(true));
        assert_eq!(Rising.holds(&[1.0, 1.0, 3.0], 0.0), Some(false), "a tie is not a rise");
        assert_eq!(Rising.holds(&[1.0, 0.5, 3.0], 0.5), Some(true), "a dip within ε");
        assert_eq!(Rising.holds(&[1.0], 0.0), None, "one point shows no trend");
        assert_eq!(Falling.holds(&[3.0, 2.0, 2.5], 0.0), Some(false));
        assert_eq!(NoGain.holds(&[97.2, 96.7, 95.7], 0.0), Some(true));
        assert_eq!(NoGain.holds(&[95.0, 96.0], 0.5), Some(false));
        assert_eq!(DropAtEnd.holds(&[96.1, 96.1, 96.0, 95.7, 95.1], 0.0), Some(true));
        assert_eq!(DropAtEnd.holds(&[97.2, 97.2, 97.1, 96.6, 96.2], 0.0), Some(false), "the drop before is larger");
        assert_eq!(DropAtEnd.holds(&[95.0, 96.0], 0.0), None);
        assert_eq!(DropAtEnd.holds(&[95.0, 96.0, 97.0], 0.0), Some(false), "no drop at all");
    }

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
        [variants.fast]
        summary = "s"
        hypothesis = "h"
        what = "a faster extra"
        sets = [{ rows = ["fig"], set = { "trainer.lr" = 0.5, "scheduler.rounds" = 5 } }]
        [variants.short]
        summary = "s"
        hypothesis = "h"
        what = "fewer rounds"
        sets = [{ datasets = ["d"], set = { "scheduler.rounds" = 3 } }]
        [variants.at-half]
        summary = "s"
        hypothesis = "h"
        what = "one setting's own key"
        sets = [{ settings = ["a0.5"], set = { "partition.counts" = [[[0, 1]]] } }]
    "#;

    fn plan_variant(scale: &str, variants: &[String]) -> Vec<PlannedRun> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("base.toml"), "name = \"x\"\n[scheduler]\nrounds = 200\n").unwrap();
        let grid: Grid = toml::from_str(GRID).unwrap();
        grid.plan(scale, variants, &["d".into()], &[1, 2], dir.path(), Path::new("/out")).unwrap()
    }

    fn plan(scale: &str) -> Vec<PlannedRun> {
        plan_variant(scale, &[])
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
    fn a_panel_names_a_substituted_dataset_by_its_substitution() {
        let entry = |extra: &str| -> DatasetEntry { toml::from_str(&format!("base = \"b.toml\"\n{extra}")).unwrap() };
        assert_eq!(entry("").panel_name("fmnist"), "fmnist");
        assert_eq!(entry("title = \"Fashion-MNIST\"").panel_name("fmnist"), "Fashion-MNIST");
        let substituted = entry("title = \"Fashion-MNIST\"\nsubstitution = \"Fashion-MNIST, small ViT\"");
        assert_eq!(substituted.panel_name("fmnist"), "substitution: Fashion-MNIST, small ViT");
    }

    #[test]
    fn a_setting_in_words_reads_alphas_listed_or_not_its_words_coordinates_or_the_id() {
        let entry: DatasetEntry = toml::from_str(
            "base = \"b.toml\"\nalphas = [0.1]\nsettings = [{ id = \"alexnet\", set = {} }, \
             { id = \"b0.5\", set = {}, coords = { beta = 0.5, M = 4.0 } }, \
             { id = \"e1\", set = {}, coords = { mu = 0.5 }, words = \"E1\" }]",
        )
        .unwrap();
        assert_eq!(entry.setting_words("e1"), "E1", "its words before its coordinates");
        assert_eq!(entry.setting_words("a0.1"), "Dirichlet α = 0.1");
        assert_eq!(entry.setting_words("a0.5"), "Dirichlet α = 0.5", "an α the dataset does not run");
        assert_eq!(entry.setting_words("alexnet"), "alexnet");
        assert_eq!(entry.setting_words("b0.5"), "β = 0.5, M = 4");
        assert_eq!(entry.setting_words("other"), "other");
    }

    #[test]
    fn a_scale_narrows_alphas_overrides_keys_and_drops_extras() {
        let runs = plan("small");
        assert_eq!(runs.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(), ["d-a0.5/a-l", "d-a0.5/a-l"]);
        let exp: Table = toml::from_str(&runs[0].experiment).unwrap();
        assert_eq!(exp["scheduler"]["rounds"].as_integer(), Some(10));
    }

    #[test]
    fn a_variant_sets_its_keys_last_on_its_rows_only_in_its_own_directory() {
        let base = plan("full");
        let runs = plan_variant("full", &["fast".into()]);
        assert_eq!(runs.len(), base.len());
        for (r, b) in runs.iter().zip(&base) {
            assert_eq!(r.dir, Path::new("/out/full-fast").join(b.dir.strip_prefix("/out/full").unwrap()));
            let exp: Table = toml::from_str(&r.experiment).unwrap();
            assert_eq!(r.varied_by, if r.id == "fig" { vec!["fast".to_string()] } else { Vec::new() });
            if r.id == "fig" {
                assert_eq!(exp["trainer"]["lr"].as_float(), Some(0.5));
                assert_eq!(exp["scheduler"]["rounds"].as_integer(), Some(5));
            } else {
                assert_eq!(r.experiment, b.experiment, "{} is not the variant's: unchanged", r.key);
            }
        }
        let both = plan_variant("full", &["fast".into(), "short".into()]);
        let fig: Table = toml::from_str(&both.iter().find(|r| r.id == "fig").unwrap().experiment).unwrap();
        assert_eq!(fig["scheduler"]["rounds"].as_integer(), Some(3), "the later variant's keys win");
        assert_eq!(fig["trainer"]["lr"].as_float(), Some(0.5));
        let varied = |id: &str| both.iter().find(|r| r.id == id).unwrap().varied_by.clone();
        assert_eq!((varied("fig"), varied("a-l")), (vec!["fast".to_string(), "short".into()], vec!["short".into()]));
        assert!(both[0].dir.starts_with("/out/full-fast+short"));
        let grid: Grid = toml::from_str(GRID).unwrap();
        assert!(grid.variant("slow").unwrap_err().to_string().contains("this grid has: at-half, fast, short"));
    }

    #[test]
    fn a_grid_set_lays_its_keys_on_its_rows_at_its_settings_before_the_scale() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("base.toml"), "name = \"x\"\n[scheduler]\nrounds = 200\n").unwrap();
        let text = format!(
            "{GRID}\n[[sets]]\nrows = [\"a-l\"]\nsettings = [\"a0.1\"]\nset = {{ \"trainer.lr\" = 0.2, \"scheduler.rounds\" = 50 }}\n"
        );
        let path = dir.path().join("grid.toml");
        std::fs::write(&path, &text).unwrap();
        let grid = Grid::load(&path).unwrap();
        for (scale, rounds) in [("full", 50), ("small", 10)] {
            let runs = grid.plan(scale, &[], &["d".into()], &[1], dir.path(), Path::new("/out")).unwrap();
            for r in &runs {
                let exp: Table = toml::from_str(&r.experiment).unwrap();
                let here = r.id == "a-l" && r.setting == "a0.1";
                assert_eq!(exp.get("trainer").is_some(), here, "{scale} {}", r.key);
                if here {
                    assert_eq!(exp["scheduler"]["rounds"].as_integer(), Some(rounds), "the scale's keys come after");
                }
            }
        }
        std::fs::write(&path, text.replace(r#"rows = ["a-l"]"#, r#"rows = ["b"]"#)).unwrap();
        let err = Grid::load(&path).unwrap_err().to_string();
        assert!(err.contains("grid.toml: sets[0].rows: `b` is not a row or extra id"), "{err}");
    }

    #[test]
    fn a_grid_set_naming_scales_applies_at_those_scales_only() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("base.toml"), "name = \"x\"\n").unwrap();
        let text = format!("{GRID}\n[[sets]]\nscales = [\"small\"]\nset = {{ \"trainer.lr\" = 0.2 }}\n");
        let path = dir.path().join("grid.toml");
        std::fs::write(&path, &text).unwrap();
        let grid = Grid::load(&path).unwrap();
        for (scale, lr) in [("full", None), ("small", Some(0.2))] {
            let runs = grid.plan(scale, &[], &["d".into()], &[1], dir.path(), Path::new("/out")).unwrap();
            for r in &runs {
                let exp: Table = toml::from_str(&r.experiment).unwrap();
                assert_eq!(exp.get("trainer").and_then(|t| t["lr"].as_float()), lr, "{scale} {}", r.key);
            }
        }
        std::fs::write(&path, text.replace(r#"scales = ["small"]"#, r#"scales = ["tiny"]"#)).unwrap();
        let err = Grid::load(&path).unwrap_err().to_string();
        assert!(err.contains("grid.toml: sets[0].scales: `tiny` is not a scale of the grid"), "{err}");
    }

    #[test]
    fn a_variant_set_naming_settings_applies_at_those_settings_only() {
        let runs = plan_variant("full", &["at-half".into()]);
        for r in &runs {
            let exp: Table = toml::from_str(&r.experiment).unwrap();
            assert_eq!(exp["partition"].get("counts").is_some(), r.setting == "a0.5", "{}", r.key);
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grid.toml");
        std::fs::write(&path, GRID.replace(r#"settings = ["a0.5"]"#, r#"settings = ["a0.7"]"#)).unwrap();
        let err = Grid::load(&path).unwrap_err().to_string();
        assert!(
            err.contains("grid.toml: variants.at-half.sets[0].settings: `a0.7` is not a setting of its datasets (a0.1, a0.5, a0.3)"),
            "{err}"
        );
    }

    #[test]
    fn a_variant_set_skips_its_except_rows() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("base.toml"), "name = \"x\"\n[scheduler]\nrounds = 200\n").unwrap();
        let grid: Grid = toml::from_str(&GRID.replace(r#"rows = ["fig"]"#, r#"except_rows = ["a-l"]"#)).unwrap();
        let runs = grid.plan("full", &["fast".into()], &["d".into()], &[1], dir.path(), Path::new("/out")).unwrap();
        for r in &runs {
            let exp: Table = toml::from_str(&r.experiment).unwrap();
            let lr = exp.get("trainer").and_then(|t| t.get("lr")).and_then(|v| v.as_float());
            assert_eq!(lr, (r.id == "fig").then_some(0.5), "{}", r.key);
        }
    }

    #[test]
    fn a_variant_naming_an_unknown_row_is_an_error_naming_the_file_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grid.toml");
        std::fs::write(&path, GRID.replace(r#"rows = ["fig"]"#, r#"rows = ["gif"]"#)).unwrap();
        let err = Grid::load(&path).unwrap_err().to_string();
        assert!(err.contains("grid.toml: variants.fast.sets[0].rows: `gif` is not a row or extra id"), "{err}");
        std::fs::write(&path, GRID.replace(r#"rows = ["fig"]"#, r#"except_rows = ["gif"]"#)).unwrap();
        let err = Grid::load(&path).unwrap_err().to_string();
        assert!(err.contains("grid.toml: variants.fast.sets[0].except_rows: `gif` is not a row or extra id"), "{err}");
    }

    #[test]
    fn an_ordering_or_figure_naming_an_unknown_row_is_an_error_naming_the_file_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grid.toml");
        let with = |tail: &str| {
            std::fs::write(&path, format!("{GRID}\n{tail}")).unwrap();
            Grid::load(&path).map(|_| ()).map_err(|e| e.to_string())
        };
        assert_eq!(with("[[orderings]]\nwhat = \"o\"\nchains = [[\"a-l\", \"fig\"]]"), Ok(()));
        let err = with("[[orderings]]\nwhat = \"o\"\nchains = [[\"a-l\", \"a-s\"]]").unwrap_err();
        assert!(err.contains("grid.toml: orderings[0].chains: `a-s` is not a row or extra id"), "{err}");
        let figure = "[[figures]]\nfile = \"f.png\"\ntitle = \"F\"\nmetrics = [\"accuracy\"]\n\
                      panels = [{ dataset = \"d\", alpha = 0.1, runs = [\"a-l\", \"gif\"] }]";
        let err = with(figure).unwrap_err();
        assert!(err.contains("grid.toml: figures[0].panels[0].runs: `gif` is not a row or extra id"), "{err}");
        let sweep = |run: &str, metric: &str| {
            format!(
                "[[sweeps]]\nfile = \"s.png\"\ntitle = \"S\"\nrun = \"{run}\"\nx = \"M\"\nseries = \"beta\"\nmetrics = [\"{metric}\"]"
            )
        };
        assert_eq!(with(&sweep("a-l", "resource_utilization")), Ok(()));
        let err = with(&sweep("gif", "best_accuracy")).unwrap_err();
        assert!(err.contains("grid.toml: sweeps[0].run: `gif` is not a row or extra id"), "{err}");
        let err = with(&sweep("a-l", "accuracy")).unwrap_err();
        assert!(err.contains("grid.toml: sweeps[0].metrics: `accuracy` is not one of [\"time_to_target\""), "{err}");
    }

    #[test]
    fn named_settings_lay_their_keys_and_rows_can_skip_settings_and_datasets() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("base.toml"), "name = \"x\"\n[mask]\nparts = 4\n").unwrap();
        let grid: Grid = toml::from_str(
            r#"
            paper = "p"
            title = "t"
            [datasets.d]
            base = "base.toml"
            settings = [{ id = "main" }, { id = "m2", set = { "mask.parts" = 2 } }]
            [datasets.e]
            base = "base.toml"
            settings = [{ id = "main" }]
            [[rows]]
            id = "ours"
            method = "a"
            [[rows]]
            id = "baseline"
            method = "b"
            settings = ["main"]
            [[rows]]
            id = "e-only"
            method = "c"
            datasets = ["e"]
            [scales.full]
            [scales.small]
            [scales.small.datasets.d]
            settings = ["m2"]
            "#,
        )
        .unwrap();
        let plan = |scale: &str| grid.plan(scale, &[], &["d".into()], &[1], dir.path(), Path::new("/out")).unwrap();
        let keys: Vec<String> = plan("full").iter().map(|r| r.key.clone()).collect();
        assert_eq!(keys, ["d-main/ours", "d-main/baseline", "d-m2/ours"]);
        let on_e = grid.plan("full", &[], &["e".into()], &[1], dir.path(), Path::new("/out")).unwrap();
        let keys: Vec<&str> = on_e.iter().map(|r| r.key.as_str()).collect();
        assert_eq!(keys, ["e-main/ours", "e-main/baseline", "e-main/e-only"], "a row can keep to some datasets");
        let small = plan("small");
        assert_eq!(small.len(), 1);
        let exp: Table = toml::from_str(&small[0].experiment).unwrap();
        assert_eq!(exp["mask"]["parts"].as_integer(), Some(2));
        assert!(grid.resolve("d", &SettingRef::Id("m3".into())).unwrap_err().to_string().contains("it has: main, m2"));
    }

    #[test]
    fn setting_a_key_under_a_value_is_an_error() {
        let mut t: Table = toml::from_str("method = \"x\"").unwrap();
        let err = set_path(&mut t, "method.level", Value::Integer(1)).unwrap_err().to_string();
        assert!(err.contains("`method` is a string"), "{err}");
    }
}
