//! The report of a reproduction: the paper's tables with ours beside them (`<table>.md`), the
//! checks and orderings of the grid, and everything machine-readable in `results.json`.
//!
//! An accuracy cell reads `paper / ours best / ours final / Δ` in accuracy points, Δ = best −
//! paper, the comparison the paper's tables support (KDD'23 spec A-12); ✗ marks a Δ beyond the
//! table's tolerance. Time columns (virtual seconds to the target accuracy, or the budget of a
//! multiple of it) are comparable with the paper's wall-clock seconds only in shape, so each
//! also shows its ratio to the fastest of the table's reference rows. With several seeds, ours
//! is the mean over the finished seeds, the best accuracy with its sample standard deviation
//! (`96.0 ± 1.4`), and a cell missing some of its seeds says how many it has. An ordering
//! compares a chain's rows over the seeds all of them finished, so on the same partition draws.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use serde::Deserialize;
use serde_json::json;

use super::grid::{Grid, OrderMetric, PlannedRun, Quorum, SettingRef, group};
use super::outcome::Outcome;

/// `experiments/<paper>/expected.toml`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expected {
    pub tables: Vec<PaperTable>,
    /// A section of the report particular to the paper: `"server-loss"` (see `server_loss`).
    #[serde(default)]
    pub section: Option<String>,
    /// Published per-round values of a run's server loss.
    #[serde(default)]
    pub curves: Vec<super::server_loss::ReferenceCurve>,
    /// Published participation counts.
    #[serde(default)]
    pub participation: Vec<super::server_loss::ReferenceParticipation>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PaperTable {
    pub id: String,
    pub title: String,
    pub columns: Vec<Column>,
    /// Allowed |Δ| in points, per dataset (accuracy columns).
    #[serde(default)]
    pub tolerance: BTreeMap<String, f64>,
    /// Time columns show ratios to the fastest of these rows (run ids).
    #[serde(default)]
    pub ratio_to: Vec<String>,
    /// The budget of `budget` and `accuracy_at_budget` columns, in multiples of the run's own
    /// time to target (the paper's Table 5 times are 3× its Table 2 times: Zhang et al., Fed-RAA, Tables 2 and 5).
    #[serde(default = "budget_of_three_times_to_target")]
    pub budget_factor: f64,
    /// The header of the rows' `level` column.
    #[serde(default = "variant")]
    pub level_header: String,
    pub rows: Vec<PaperRow>,
}

fn budget_of_three_times_to_target() -> f64 {
    3.0
}

fn variant() -> String {
    "Variant".into()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Column {
    pub dataset: String,
    /// The setting, by α or id.
    #[serde(alias = "alpha")]
    pub setting: SettingRef,
    #[serde(default)]
    pub metric: ColumnMetric,
    /// The header (default: the dataset and setting).
    pub label: Option<String>,
}

/// What a column reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ColumnMetric {
    /// Best and final test accuracy, %.
    #[default]
    Accuracy,
    /// Virtual seconds until the target accuracy.
    TimeToTarget,
    /// `budget_factor` × the time to target, seconds.
    Budget,
    /// Best accuracy within the budget, %.
    AccuracyAtBudget,
}

impl Column {
    fn header(&self) -> String {
        self.label.clone().unwrap_or_else(|| match &self.setting {
            SettingRef::Alpha(a) => format!("{} α={a}", self.dataset),
            SettingRef::Id(id) => format!("{} {id}", self.dataset),
        })
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PaperRow {
    pub method: String,
    /// The mask level or variant (tables without one leave it out).
    #[serde(default)]
    pub level: String,
    /// The grid row that reproduces it; none for rows the paper marks not applicable.
    pub run: Option<String>,
    pub paper: Vec<PaperCell>,
    /// Where the paper prints "-" for "doesn't work": ours counts as failing below this.
    pub fails_below: Option<f64>,
    /// What is known to make ours differ from the paper's (the spec's discrepancies, a variant
    /// that measured one); printed under the table when a cell of the row is out of tolerance.
    pub known: Option<String>,
    /// `"Method Level"` of another row of the table whose `known` also explains this one: shown
    /// as a pointer when that row is listed too, in full when it is not.
    pub known_as: Option<String>,
}

impl PaperRow {
    fn name(&self) -> String {
        format!("{} {}", self.method, self.level).trim_end().to_string()
    }
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(untagged)]
pub enum PaperCell {
    Value(f64),
    /// "-".
    Dash(Dash),
}

#[derive(Debug, Clone, Copy, Deserialize)]
pub enum Dash {
    #[serde(rename = "-")]
    Dash,
}

impl PaperCell {
    fn value(self) -> Option<f64> {
        match self {
            PaperCell::Value(v) => Some(v),
            PaperCell::Dash(_) => None,
        }
    }
}

impl Expected {
    pub fn load(path: &Path) -> Result<Expected> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let expected: Expected = toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        for t in &expected.tables {
            for r in &t.rows {
                let Some(other) = &r.known_as else { continue };
                if !t.rows.iter().any(|o| o.name() == *other && o.known.is_some()) {
                    anyhow::bail!(
                        "{}: table {} row {}: known_as = \"{other}\" is not a row of the table with a `known`",
                        path.display(),
                        t.id,
                        r.name()
                    );
                }
            }
            if let Some(r) = t.rows.iter().find(|r| r.paper.len() != t.columns.len()) {
                anyhow::bail!(
                    "{}: table {} row {}: {} values for {} columns",
                    path.display(),
                    t.id,
                    r.name(),
                    r.paper.len(),
                    t.columns.len()
                );
            }
        }
        Ok(expected)
    }
}

/// What is known about every planned run.
pub struct Results<'a> {
    pub scale: &'a str,
    pub runs: &'a [PlannedRun],
    /// Finished outcomes by run key, one per finished seed.
    pub outcomes: BTreeMap<String, Vec<Outcome>>,
    /// Datasets that are not present, with the command that fetches them.
    pub missing: BTreeMap<String, String>,
}

/// Ours for a table cell.
enum Ours<'a> {
    /// The finished seeds.
    Done(&'a [Outcome]),
    NotRunAtScale,
    MissingData,
    NotFinished,
}

fn mean(o: &[Outcome], f: impl Fn(&Outcome) -> f64) -> f64 {
    o.iter().map(f).sum::<f64>() / o.len() as f64
}

/// The sample standard deviation over seeds; None for a single seed.
fn std_dev(o: &[Outcome], f: impl Fn(&Outcome) -> f64) -> Option<f64> {
    let m = mean(o, &f);
    (o.len() > 1).then(|| (o.iter().map(|x| (f(x) - m).powi(2)).sum::<f64>() / (o.len() - 1) as f64).sqrt())
}

/// Mean time to target over seeds; None if a seed never reached it.
fn time_to_target(o: &[Outcome]) -> Option<f64> {
    let times = o.iter().map(|o| o.time_to_target_s).collect::<Option<Vec<f64>>>()?;
    Some(times.iter().sum::<f64>() / times.len() as f64)
}

impl Results<'_> {
    fn ours(&self, dataset: &str, setting: &str, row: &str) -> Ours<'_> {
        if self.missing.contains_key(dataset) {
            return Ours::MissingData;
        }
        let key = format!("{}/{row}", group(dataset, setting));
        if !self.runs.iter().any(|r| r.key == key) {
            return Ours::NotRunAtScale;
        }
        match self.outcomes.get(&key) {
            Some(o) if !o.is_empty() => Ours::Done(o),
            _ => Ours::NotFinished,
        }
    }

    /// How many seeds of a row's run at (dataset, setting) were planned.
    fn planned_seeds(&self, dataset: &str, setting: &str, row: &str) -> usize {
        let key = format!("{}/{row}", group(dataset, setting));
        self.runs.iter().filter(|r| r.key == key).count()
    }

    /// A chain's values for an ordering at a (dataset, setting), each the mean over the seeds
    /// every row of the chain finished (and, for times, reached the target on), so that rows are
    /// compared on the same partition draws; also those seeds. None if some row has none.
    fn chain_values(
        &self,
        metric: OrderMetric,
        dataset: &str,
        setting: &str,
        chain: &[String],
    ) -> Option<(Vec<f64>, Vec<u64>)> {
        let rows: Vec<&[Outcome]> = chain
            .iter()
            .map(|row| match self.ours(dataset, setting, row) {
                Ours::Done(o) => Some(o),
                _ => None,
            })
            .collect::<Option<_>>()?;
        let mut shared: Vec<u64> = rows[0].iter().map(|o| o.seed).collect();
        shared.retain(|s| rows.iter().all(|o| o.iter().any(|o| o.seed == *s)));
        shared.sort_unstable();
        if shared.is_empty() {
            return None;
        }
        let values = rows
            .iter()
            .map(|o| {
                let on_shared: Vec<Outcome> = o.iter().filter(|o| shared.contains(&o.seed)).cloned().collect();
                match metric {
                    OrderMetric::BestAccuracy => Some(mean(&on_shared, |o| o.best_accuracy)),
                    OrderMetric::TimeToTarget => time_to_target(&on_shared),
                }
            })
            .collect::<Option<_>>()?;
        Some((values, shared))
    }
}

/// A time column's value for one row: ours (mean over seeds), if it reached the target.
fn ours_time(metric: ColumnMetric, factor: f64, o: &[Outcome]) -> Option<f64> {
    let t = time_to_target(o)?;
    Some(if metric == ColumnMetric::Budget { factor * t } else { t })
}

/// One evaluated check or ordering, for the report and `results.json`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Verdict {
    pub what: String,
    pub passed: Option<bool>,
    pub detail: String,
}

/// Renders a paper table as Markdown; also returns its cells for `results.json`.
pub fn render_table(table: &PaperTable, results: &Results) -> (String, Vec<serde_json::Value>) {
    let has_time = table.columns.iter().any(|c| matches!(c.metric, ColumnMetric::TimeToTarget | ColumnMetric::Budget));
    let mut md = format!("## {}\n\n", table.title);
    if table.columns.iter().any(|c| c.metric == ColumnMetric::Accuracy) {
        md += "Accuracy cells: paper / ours (best) / ours (final) / Δ = best − paper, in points.\n";
    }
    if table.columns.iter().any(|c| c.metric == ColumnMetric::AccuracyAtBudget) {
        let _ = writeln!(
            md,
            "Accuracy-at-budget cells: paper / ours (best within {}× the run's own time to target) / Δ, in points.",
            table.budget_factor
        );
    }
    if has_time {
        let _ = writeln!(
            md,
            "Time cells: paper s (ratio to the fastest of {}) / ours virtual s (same ratio).",
            table.ratio_to.join(", ")
        );
    }
    md += "\n";
    let with_level = table.rows.iter().any(|r| !r.level.is_empty());
    let header: Vec<String> = table.columns.iter().map(Column::header).collect();
    let level_head = if with_level { format!(" {} |", table.level_header) } else { String::new() };
    let _ = writeln!(md, "| Method |{level_head} {} |", header.join(" | "));
    let _ = writeln!(md, "|---|{}{}", if with_level { "---|" } else { "" }, "---|".repeat(table.columns.len()));
    // The fastest reference row per column, paper's and ours, for the time ratios.
    let fastest: Vec<(Option<f64>, Option<f64>)> = table
        .columns
        .iter()
        .enumerate()
        .map(|(c, col)| {
            let refs = table.rows.iter().filter(|r| r.run.as_ref().is_some_and(|id| table.ratio_to.contains(id)));
            let min = |v: Vec<f64>| v.into_iter().reduce(f64::min);
            let paper = min(refs.clone().filter_map(|r| r.paper[c].value()).collect());
            let ours = min(refs
                .filter_map(|r| match results.ours(&col.dataset, &col.setting.id(), r.run.as_deref()?) {
                    Ours::Done(o) => ours_time(col.metric, table.budget_factor, o),
                    _ => None,
                })
                .collect());
            (paper, ours)
        })
        .collect();
    let mut cells = Vec::new();
    let (mut within, mut compared) = (0, 0);
    let mut explained = Vec::new();
    for row in &table.rows {
        let mut out_of_tolerance = false;
        let mut line = format!("| {} |", row.method);
        if with_level {
            let _ = write!(line, " {} |", row.level);
        }
        for ((c, col), paper) in table.columns.iter().enumerate().zip(&row.paper) {
            let is_time = matches!(col.metric, ColumnMetric::TimeToTarget | ColumnMetric::Budget);
            let paper_text = match paper.value() {
                None => "-".to_string(),
                Some(v) if is_time => format!("{v:.2} s{}", ratio(v, fastest[c].0)),
                Some(v) => format!("{v:.1}"),
            };
            let tolerance = table.tolerance.get(&col.dataset).copied().unwrap_or(f64::INFINITY);
            let ours = row.run.as_deref().map(|r| results.ours(&col.dataset, &col.setting.id(), r));
            let (mut best, mut best_std, mut last, mut value) = (None, None, None, None);
            // Counts a compared cell and returns its mark: " ✗" beyond the tolerance.
            let mut judge = |delta: f64| {
                let ok = delta.abs() <= tolerance;
                compared += 1;
                within += usize::from(ok);
                out_of_tolerance |= !ok;
                if ok { "" } else { " ✗" }
            };
            let text = match &ours {
                None => "-".to_string(),
                Some(Ours::Done(o)) => match col.metric {
                    ColumnMetric::Accuracy => {
                        let (b, l) = (mean(o, |o| o.best_accuracy), mean(o, |o| o.final_accuracy));
                        (best, last) = (Some(b), Some(l));
                        best_std = std_dev(o, |o| o.best_accuracy);
                        let spread = best_std.map_or(String::new(), |s| format!(" ± {:.1}", s * 100.0));
                        let planned =
                            results.planned_seeds(&col.dataset, &col.setting.id(), row.run.as_deref().unwrap_or(""));
                        let seeds = if o.len() < planned {
                            format!(" ({} of {planned} seeds)", o.len())
                        } else {
                            String::new()
                        };
                        match paper.value() {
                            Some(p) => {
                                let delta = b * 100.0 - p;
                                let mark = judge(delta);
                                format!(
                                    "{paper_text} / {:.1}{spread} / {:.1} / {delta:+.1}{mark}{seeds}",
                                    b * 100.0,
                                    l * 100.0
                                )
                            }
                            None => {
                                let fails = row.fails_below.map(|t| b * 100.0 < t || b.is_nan());
                                let verdict = match fails {
                                    Some(true) => " (fails, as in the paper)",
                                    Some(false) => " (works; the paper says it fails)",
                                    None => "",
                                };
                                format!("- / {:.1}{spread} / {:.1}{verdict}{seeds}", b * 100.0, l * 100.0)
                            }
                        }
                    }
                    ColumnMetric::AccuracyAtBudget => {
                        let reached = o.iter().all(|o| o.time_to_target_s.is_some());
                        let v = mean(o, |o| match o.time_to_target_s {
                            Some(t) => o.best_within(table.budget_factor * t),
                            None => o.best_accuracy,
                        });
                        value = Some(v * 100.0);
                        let note = if reached { "" } else { " (target not reached: best of the run)" };
                        match paper.value() {
                            Some(p) => {
                                let delta = v * 100.0 - p;
                                let mark = judge(delta);
                                format!("{paper_text} / {:.2} / {delta:+.2}{mark}{note}", v * 100.0)
                            }
                            None => format!("- / {:.2}{note}", v * 100.0),
                        }
                    }
                    ColumnMetric::TimeToTarget | ColumnMetric::Budget => {
                        match ours_time(col.metric, table.budget_factor, o) {
                            Some(t) => {
                                value = Some(t);
                                format!("{paper_text} / {t:.1} s{}", ratio(t, fastest[c].1))
                            }
                            None => {
                                format!("{paper_text} / target not reached in {:.0} s", mean(o, Outcome::duration_s))
                            }
                        }
                    }
                },
                Some(Ours::NotRunAtScale) => format!("{paper_text} / ·"),
                Some(Ours::MissingData) => format!("{paper_text} / no data"),
                Some(Ours::NotFinished) => format!("{paper_text} / not finished"),
            };
            cells.push(json!({
                "method": row.method, "level": row.level, "run": row.run,
                "dataset": col.dataset, "setting": col.setting.id(), "metric": format!("{:?}", col.metric),
                "paper": paper.value(), "best": best.map(|b| b * 100.0), "final": last.map(|l| l * 100.0),
                "best_std": best_std.map(|s| s * 100.0),
                "seeds": match &ours { Some(Ours::Done(o)) => o.len(), _ => 0 },
                "value": value,
                "delta": best.map(|b| b * 100.0).or(value.filter(|_| !is_time)).zip(paper.value()).map(|(b, p)| b - p),
            }));
            let _ = write!(line, " {text} |");
        }
        let _ = writeln!(md, "{line}");
        if out_of_tolerance {
            explained.push(row);
        }
    }
    let listed = |name: &str| explained.iter().any(|r| r.name() == name && r.known.is_some());
    // A text borrowed from a row that is not listed is written out once, under the first row that
    // borrows it; the others point there.
    let mut written_under: Vec<(&str, String)> = Vec::new();
    let explained: Vec<String> = explained
        .iter()
        .filter_map(|row| {
            let text = match (&row.known, &row.known_as) {
                (Some(known), _) => known.clone(),
                (None, Some(other)) if listed(other) => format!("as {}.", other.trim_end_matches('.')),
                (None, Some(other)) => match written_under.iter().find(|(o, _)| o == other) {
                    Some((_, first)) => format!("as {}.", first.trim_end_matches('.')),
                    None => {
                        let text = table.rows.iter().find(|r| r.name() == *other)?.known.clone()?;
                        written_under.push((other.as_str(), row.name()));
                        text
                    }
                },
                (None, None) => "not explained: expected.toml gives this row no `known`.".to_string(),
            };
            Some(format!("- {}: {text}", row.name()))
        })
        .collect();
    if compared > 0 {
        let _ = writeln!(
            md,
            "\n{within} of {compared} compared accuracy cells within tolerance ({}).",
            table.tolerance.iter().map(|(d, t)| format!("{d} ±{t}")).collect::<Vec<_>>().join(", ")
        );
    }
    if !explained.is_empty() {
        let _ =
            writeln!(md, "\nWhat is known of the rows with cells out of tolerance (✗):\n\n{}", explained.join("\n"));
    }
    let _ = writeln!(md, "\n`·` = not run at this scale; `no data` = dataset not present.");
    (md, cells)
}

/// ` (r×)`: `v` relative to `fastest`, when known.
fn ratio(v: f64, fastest: Option<f64>) -> String {
    fastest.filter(|f| *f > 0.0).map_or(String::new(), |f| format!(" ({:.2}×)", v / f))
}

/// The grid's pass/fail checks that apply at this scale.
pub fn evaluate_checks(grid: &Grid, results: &Results) -> Vec<Verdict> {
    let mut out = Vec::new();
    for check in grid.checks.iter().filter(|c| c.scales.as_ref().is_none_or(|s| s.iter().any(|s| s == results.scale))) {
        let Some(run) = results.runs.iter().find(|r| r.key == check.run) else { continue };
        let verdict = |passed, detail: String| Verdict { what: check.what.clone(), passed, detail };
        if let Some(fetch) = results.missing.get(&run.dataset) {
            out.push(verdict(None, format!("not checked: {} is not present ({fetch})", run.dataset)));
            continue;
        }
        // A run that failed fails the command on its own; one left out (`--runs`,
        // `--report-only`) leaves its checks undecided.
        let Some(outcomes) = results.outcomes.get(&check.run).filter(|o| !o.is_empty()) else {
            out.push(verdict(None, format!("not checked: {} has not finished", check.run)));
            continue;
        };
        let mut failures = Vec::new();
        let mut seen = Vec::new();
        for o in outcomes {
            if let Some(min) = check.above {
                let v = match check.metric.as_str() {
                    "final_accuracy" => o.final_accuracy,
                    "best_accuracy" => o.best_accuracy,
                    other => {
                        failures.push(format!("unknown metric `{other}`"));
                        continue;
                    }
                };
                seen.push(format!("{} = {v:.4}", check.metric));
                if !(v > min) {
                    failures.push(format!("{} = {v:.4} ≤ {min}", check.metric));
                }
            }
            let diag = |k: &String| o.diagnostics.get(k).copied().unwrap_or(f64::NAN);
            for (k, want) in &check.equals {
                seen.push(format!("{k} = {}", diag(k)));
                if diag(k) != *want {
                    failures.push(format!("{k} = {}, expected {want}", diag(k)));
                }
            }
            for (k, max) in &check.at_most {
                seen.push(format!("{k} = {}", diag(k)));
                if !(diag(k) <= *max) {
                    failures.push(format!("{k} = {}, expected ≤ {max}", diag(k)));
                }
            }
        }
        let passed = failures.is_empty();
        out.push(verdict(Some(passed), if passed { seen.join(", ") } else { failures.join("; ") }));
    }
    // No NaN outside the runs allowed to diverge (OAP zeroes coordinates nobody trains and may
    // diverge; every other method must stay finite).
    let diverged: Vec<&str> = results
        .runs
        .iter()
        .filter(|r| !r.may_diverge)
        .filter(|r| results.outcomes.get(&r.key).is_some_and(|o| o.iter().any(Outcome::diverged)))
        .map(|r| r.key.as_str())
        .collect();
    out.push(Verdict {
        what: "no NaN loss outside the runs allowed to diverge".into(),
        passed: Some(diverged.is_empty()),
        detail: if diverged.is_empty() { "none".into() } else { diverged.join(", ") },
    });
    out
}

/// The grid's orderings over every (dataset, setting) of the tables at this scale.
pub fn evaluate_orderings(grid: &Grid, results: &Results) -> Vec<Verdict> {
    let settings: Vec<(String, String)> = {
        let mut s: Vec<(String, String)> = Vec::new();
        for r in results.runs {
            let pair = (r.dataset.clone(), r.setting.clone());
            if !s.contains(&pair) {
                s.push(pair);
            }
        }
        s
    };
    grid.orderings
        .iter()
        .map(|ordering| {
            let (mut holds, mut total, mut broken) = (0, 0, Vec::new());
            for chain in &ordering.chains {
                for (dataset, setting) in &settings {
                    let Some((values, seeds)) = results.chain_values(ordering.metric, dataset, setting, chain) else {
                        continue;
                    };
                    total += 1;
                    let show = |r: &String, v: &f64| match ordering.metric {
                        OrderMetric::BestAccuracy => format!("{r} {:.1}", v * 100.0),
                        OrderMetric::TimeToTarget => format!("{r} {v:.1} s"),
                    };
                    if values.windows(2).all(|w| w[0] + ordering.tolerance >= ordering.factor * w[1]) {
                        holds += 1;
                    } else {
                        let shown: Vec<String> = chain.iter().zip(&values).map(|(r, v)| show(r, v)).collect();
                        let on = match seeds.len() {
                            1 => String::new(),
                            _ => format!(
                                " over seeds {}",
                                seeds.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
                            ),
                        };
                        broken.push(format!("{}{on} ({})", group(dataset, setting), shown.join(", ")));
                    }
                }
            }
            let mut detail = format!("holds in {holds} of {total}");
            if ordering.holds_in == Quorum::Most {
                detail.push_str(" (needs more than half)");
            }
            if !broken.is_empty() {
                let _ = write!(detail, "; not in: {}", broken.join("; "));
            }
            let passed = (total > 0).then_some(ordering.holds_in.met(holds, total));
            if let (Some(false), Some(known)) = (passed, &ordering.known) {
                let _ = write!(detail, ". Known: {known}");
            }
            Verdict { what: ordering.what.clone(), passed, detail }
        })
        .collect()
}

/// The Markdown list of verdicts.
pub fn render_verdicts(title: &str, verdicts: &[Verdict]) -> String {
    let mut md = format!("## {title}\n\n");
    for v in verdicts {
        let mark = match v.passed {
            Some(true) => "✓",
            Some(false) => "✗",
            None => "–",
        };
        let _ = writeln!(md, "- {mark} {}: {}", v.what, v.detail);
    }
    md
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::reproduce::outcome::Point;

    fn run(dataset: &str, alpha: f64, id: &str) -> PlannedRun {
        PlannedRun {
            key: format!("{}/{id}", group(dataset, &format!("a{alpha}"))),
            dataset: dataset.into(),
            setting: format!("a{alpha}"),
            id: id.into(),
            seed: 1,
            may_diverge: false,
            experiment: String::new(),
            dir: PathBuf::new(),
        }
    }

    fn outcome(best: f64, last: f64) -> Outcome {
        Outcome {
            seed: 1,
            best_accuracy: best,
            final_accuracy: last,
            final_loss: 0.1,
            wall_time_s: 1.0,
            time_to_target_s: None,
            curve: vec![],
            server_loss: vec![],
            participation: vec![],
            diagnostics: BTreeMap::new(),
        }
    }

    const EXPECTED: &str = r#"
        [[tables]]
        id = "t"
        title = "T"
        columns = [{ dataset = "m", alpha = 0.1 }, { dataset = "m", alpha = 0.5 }, { dataset = "c", alpha = 0.1 }]
        tolerance = { m = 3.0 }
        rows = [
            { method = "A", level = "L", run = "a", paper = [94.2, 90.0, 60.0] },
            { method = "B", level = "Arb.", paper = ["-", "-", "-"] },
            { method = "C", level = "S", run = "c", paper = [80.0, "-", 50.0], fails_below = 30.0, known = "C is slow" },
            { method = "D", level = "L", run = "a", paper = [96.0, 90.0, 60.0], known = "D is different" },
        ]
    "#;

    #[test]
    fn cells_show_paper_best_final_and_delta_or_why_not() {
        let expected: Expected = toml::from_str(EXPECTED).unwrap();
        let seed2 = |r: PlannedRun| PlannedRun { seed: 2, ..r };
        let runs = vec![
            run("m", 0.1, "a"),
            seed2(run("m", 0.1, "a")),
            run("m", 0.1, "c"),
            seed2(run("m", 0.1, "c")),
            run("m", 0.5, "c"),
            run("c", 0.1, "a"),
        ];
        let mut outcomes = BTreeMap::new();
        outcomes.insert("m-a0.1/a".to_string(), vec![outcome(0.95, 0.94), outcome(0.97, 0.96)]);
        outcomes.insert("m-a0.1/c".to_string(), vec![outcome(0.70, 0.70)]);
        outcomes.insert("m-a0.5/c".to_string(), vec![outcome(0.25, 0.2)]);
        let missing = BTreeMap::from([("c".to_string(), "fetch c".to_string())]);
        let results = Results { scale: "s", runs: &runs, outcomes, missing };
        let (md, cells) = render_table(&expected.tables[0], &results);
        // Row A: the mean over two seeds (best 96.0 ± √2, final 95.0), Δ = +1.8; α = 0.5 not run;
        // c missing.
        assert!(md.contains("| A | L | 94.2 / 96.0 ± 1.4 / 95.0 / +1.8 | 90.0 / · | 60.0 / no data |"), "{md}");
        assert!(md.contains("| B | Arb. | - | - | - |"), "{md}");
        // Row C: Δ = −10 is beyond ±3, with one of its two seeds; the paper's "-" cell fails as the
        // paper says.
        assert!(
            md.contains(
                "| C | S | 80.0 / 70.0 / 70.0 / -10.0 ✗ (1 of 2 seeds) | - / 25.0 / 20.0 (fails, as in the paper) |"
            ),
            "{md}"
        );
        assert!(md.contains("2 of 3 compared accuracy cells within tolerance"), "{md}");
        assert!(md.contains("out of tolerance (✗):\n\n- C S: C is slow\n"), "{md}");
        assert!(!md.contains("D is different"), "row D is within tolerance: {md}");
        assert_eq!(cells.len(), 12);
        assert_eq!(cells[0]["delta"].as_f64().map(|d| (d * 10.0).round() / 10.0), Some(1.8));
        let std = cells[0]["best_std"].as_f64().unwrap();
        assert!((std - 2f64.sqrt()).abs() < 1e-9, "sample std of 95 and 97: {std}");
        assert_eq!(cells[0]["seeds"], 2);
    }

    #[test]
    fn a_row_known_as_another_points_to_it_when_listed_and_quotes_it_when_not() {
        let expected = |rows: &str| -> Expected {
            toml::from_str(&format!(
                r#"
                [[tables]]
                id = "t"
                title = "T"
                columns = [{{ dataset = "m", alpha = 0.1 }}]
                tolerance = {{ m = 3.0 }}
                rows = [{rows}]
                "#
            ))
            .unwrap()
        };
        let runs = vec![run("m", 0.1, "a"), run("m", 0.1, "b"), run("m", 0.1, "c")];
        let outcomes = BTreeMap::from([
            ("m-a0.1/a".to_string(), vec![outcome(0.90, 0.90)]),
            ("m-a0.1/b".to_string(), vec![outcome(0.90, 0.90)]),
            ("m-a0.1/c".to_string(), vec![outcome(0.90, 0.90)]),
        ]);
        let results = Results { scale: "s", runs: &runs, outcomes, missing: BTreeMap::new() };
        // A is off by 10 (listed), B by 20: B points to A.
        let both = expected(
            r#"{ method = "A", level = "L.", run = "a", paper = [80.0], known = "why A" },
               { method = "B", level = "S", run = "b", paper = [70.0], known_as = "A L." }"#,
        );
        let (md, _) = render_table(&both.tables[0], &results);
        assert!(md.contains("- A L.: why A\n- B S: as A L.\n"), "{md}");
        // A within tolerance, B and C off: B quotes A's text, C points to B.
        let b_and_c = expected(
            r#"{ method = "A", level = "L", run = "a", paper = [90.0], known = "why A" },
               { method = "B", level = "S", run = "b", paper = [70.0], known_as = "A L" },
               { method = "C", level = "S", run = "c", paper = [70.0], known_as = "A L" }"#,
        );
        let (md, _) = render_table(&b_and_c.tables[0], &results);
        assert!(md.contains("out of tolerance (✗):\n\n- B S: why A\n- C S: as B S.\n"), "{md}");
        // B off with nothing said of it: listed as not explained, never left out.
        let silent = expected(r#"{ method = "B", level = "S", run = "b", paper = [70.0] }"#);
        let (md, _) = render_table(&silent.tables[0], &results);
        assert!(md.contains("- B S: not explained: expected.toml gives this row no `known`.\n"), "{md}");
    }

    #[test]
    fn known_as_naming_no_explained_row_is_an_error_naming_the_file_and_row() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("expected.toml");
        std::fs::write(
            &path,
            r#"
            [[tables]]
            id = "t"
            title = "T"
            columns = [{ dataset = "m", alpha = 0.1 }]
            rows = [{ method = "B", level = "S", run = "b", paper = [70.0], known_as = "A L" }]
            "#,
        )
        .unwrap();
        let err = format!("{:#}", Expected::load(&path).unwrap_err());
        assert!(err.contains("expected.toml: table t row B S: known_as = \"A L\""), "{err}");
    }

    /// A run that reaches 0.5 accuracy at `ttt` virtual seconds and 0.9 at `3 ttt + 1`.
    fn timed(ttt: f64) -> Outcome {
        let point = |time_s: f64, accuracy: f64| Point { version: 0.0, time_s, accuracy, loss: 1.0 };
        Outcome {
            time_to_target_s: Some(ttt),
            curve: vec![point(0.0, 0.1), point(ttt, 0.5), point(3.0 * ttt, 0.6), point(3.0 * ttt + 1.0, 0.9)],
            ..outcome(0.9, 0.9)
        }
    }

    #[test]
    fn time_cells_show_ratios_to_the_fastest_reference_and_budget_accuracy() {
        let expected: Expected = toml::from_str(
            r#"
            [[tables]]
            id = "t"
            title = "T"
            ratio_to = ["avg", "async"]
            tolerance = { m = 1.0 }
            columns = [
                { dataset = "m", setting = "main", metric = "time_to_target" },
                { dataset = "m", setting = "main", metric = "accuracy_at_budget", label = "m acc" },
                { dataset = "m", setting = "main", metric = "budget" },
            ]
            rows = [
                { method = "FedAvg", run = "avg", paper = [400.0, 96.0, 1200.0] },
                { method = "FedAsync", run = "async", paper = [200.0, 96.5, 600.0] },
                { method = "Ours", run = "ours", paper = [50.0, 60.0, 150.0] },
            ]
            "#,
        )
        .unwrap();
        let planned =
            |id: &str| PlannedRun { key: format!("m-main/{id}"), setting: "main".into(), ..run("m", 0.1, id) };
        let runs = vec![planned("avg"), planned("async"), planned("ours")];
        let outcomes = BTreeMap::from([
            ("m-main/avg".to_string(), vec![timed(100.0)]),
            ("m-main/async".to_string(), vec![timed(40.0)]),
            ("m-main/ours".to_string(), vec![Outcome { time_to_target_s: None, ..timed(10.0) }]),
        ]);
        let results = Results { scale: "s", runs: &runs, outcomes, missing: BTreeMap::new() };
        let (md, _) = render_table(&expected.tables[0], &results);
        assert!(md.contains("| Method | m main | m acc | m main |"), "{md}");
        // Fastest reference: paper 200 s, ours 40 s. Within 3× its time to target FedAvg's best is
        // 60%; 36 points under the paper.
        assert!(md.contains("| FedAvg | 400.00 s (2.00×) / 100.0 s (2.50×) | 96.0 / 60.00 / -36.00 ✗ | 1200.00 s (2.00×) / 300.0 s (2.50×) |"), "{md}");
        assert!(md.contains("| Ours | 50.00 s (0.25×) / target not reached in 31 s | 60.0 / 90.00 / +30.00 ✗ (target not reached: best of the run) |"), "{md}");
    }

    #[test]
    fn orderings_count_the_settings_where_the_chain_holds_in_every_or_most_of_them() {
        let grid: Grid = toml::from_str(
            r#"
            paper = "p"
            title = "t"
            rows = []
            scales = {}
            datasets = {}
            [[orderings]]
            what = "a ≥ b"
            chains = [["a", "b"]]
            tolerance = 0.01
            [[orderings]]
            what = "a ≥ b, mostly"
            chains = [["a", "b"]]
            holds_in = "most"
            known = "b is the code's"
            "#,
        )
        .unwrap();
        // (α, a, b) per setting.
        let verdicts = |cells: &[(f64, f64, f64)]| {
            let mut runs = Vec::new();
            let mut outcomes = BTreeMap::new();
            for &(alpha, a, b) in cells {
                for (id, v) in [("a", a), ("b", b)] {
                    let r = run("m", alpha, id);
                    outcomes.insert(r.key.clone(), vec![outcome(v, v)]);
                    runs.push(r);
                }
            }
            let results = Results { scale: "s", runs: &runs, outcomes, missing: BTreeMap::new() };
            evaluate_orderings(&grid, &results)
        };
        let v = verdicts(&[(0.1, 0.895, 0.90), (0.5, 0.80, 0.90)]);
        assert_eq!(v[0].passed, Some(false));
        assert!(v[0].detail.starts_with("holds in 1 of 2; not in: m-a0.5 (a 80.0, b 90.0)"), "{}", v[0].detail);
        assert_eq!(v[1].passed, Some(false), "half is not most: {}", v[1].detail);
        assert!(v[1].detail.ends_with("m-a0.5 (a 80.0, b 90.0). Known: b is the code's"), "{}", v[1].detail);
        let v = verdicts(&[(0.1, 0.9, 0.8), (0.2, 0.9, 0.8), (0.3, 0.7, 0.8)]);
        assert_eq!(v[1].passed, Some(true), "{}", v[1].detail);
        assert!(v[1].detail.starts_with("holds in 2 of 3 (needs more than half)"), "{}", v[1].detail);
        assert!(!v[1].detail.contains("Known"), "a passing ordering needs no explanation: {}", v[1].detail);

        // Rows are compared on the seeds both finished: a's mean over seeds 1 and 2 (0.85) would
        // beat b, but on seed 1 alone b is ahead; with seed 3 for both, over seeds 1 and 3.
        let seeded = |seed: u64, best: f64| Outcome { seed, ..outcome(best, best) };
        let compare = |a: Vec<Outcome>, b: Vec<Outcome>| {
            let runs = vec![run("m", 0.1, "a"), run("m", 0.1, "b")];
            let outcomes = BTreeMap::from([("m-a0.1/a".to_string(), a), ("m-a0.1/b".to_string(), b)]);
            let results = Results { scale: "s", runs: &runs, outcomes, missing: BTreeMap::new() };
            evaluate_orderings(&grid, &results)
        };
        let v = compare(vec![seeded(1, 0.80), seeded(2, 0.90)], vec![seeded(1, 0.82)]);
        assert!(v[0].detail.starts_with("holds in 0 of 1; not in: m-a0.1 (a 80.0, b 82.0)"), "{}", v[0].detail);
        let v =
            compare(vec![seeded(1, 0.80), seeded(2, 0.90), seeded(3, 0.70)], vec![seeded(3, 0.78), seeded(1, 0.82)]);
        assert!(v[0].detail.contains("m-a0.1 over seeds 1, 3 (a 75.0, b 80.0)"), "{}", v[0].detail);
        // No seed in common: nothing to compare.
        let v = compare(vec![seeded(2, 0.90)], vec![seeded(1, 0.82)]);
        assert_eq!((v[0].passed, v[0].detail.as_str()), (None, "holds in 0 of 0"));
    }
}
