//! `experiments/<paper>/expected.toml`: the paper's tables (rows, columns, published values and
//! tolerances) that a report puts ours beside.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use serde::Deserialize;

use crate::reproduce::grid::SettingRef;

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
    pub curves: Vec<crate::reproduce::server_loss::ReferenceCurve>,
    /// Published participation counts.
    #[serde(default)]
    pub participation: Vec<crate::reproduce::server_loss::ReferenceParticipation>,
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
    /// What the runs substitute for the paper's setting ("Fashion-MNIST, ViT-…"), said in the
    /// title; the paper's numbers then stand beside ours as context, and no cell is judged
    /// against them.
    #[serde(default)]
    pub substitution: Option<String>,
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
    /// The clients (ids) a `job_time` or `peak_memory` column reads, e.g. one device type's.
    #[serde(default)]
    pub clients: Vec<usize>,
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
    /// "Convergence accuracy": the mean of the last 3 evaluations, %.
    ConvergedAccuracy,
    /// Top-5 accuracy at the final evaluation, %.
    Top5,
    /// Macro-F1 at the final evaluation, %.
    MacroF1,
    /// The clients' personalised models on their own splits at the final evaluation
    /// (`[eval] client_test_share`): top-1, top-5 and macro-F1, %.
    ClientTop1,
    ClientTop5,
    ClientMacroF1,
    /// Resource utilisation over the run (Co-S²P's Eq. 17), %.
    ResourceUtilization,
    /// The column's clients' mean job time (training and transfers), virtual seconds.
    JobTime,
    /// The column's clients' largest job memory estimate, MB.
    PeakMemory,
}

impl ColumnMetric {
    /// Virtual seconds (to the target, or a budget).
    pub fn is_time(self) -> bool {
        matches!(self, ColumnMetric::TimeToTarget | ColumnMetric::Budget)
    }

    /// An accuracy judged against the paper's within the table's tolerance.
    pub fn is_accuracy(self) -> bool {
        matches!(
            self,
            ColumnMetric::Accuracy
                | ColumnMetric::AccuracyAtBudget
                | ColumnMetric::ConvergedAccuracy
                | ColumnMetric::Top5
                | ColumnMetric::MacroF1
                | ColumnMetric::ClientTop1
                | ColumnMetric::ClientTop5
                | ColumnMetric::ClientMacroF1
        )
    }

    /// A percentage read off the run's final evaluation or its summary: top-5, macro-F1, the
    /// clients' scores, RU.
    pub fn is_final_score(self) -> bool {
        matches!(
            self,
            ColumnMetric::Top5
                | ColumnMetric::MacroF1
                | ColumnMetric::ClientTop1
                | ColumnMetric::ClientTop5
                | ColumnMetric::ClientMacroF1
                | ColumnMetric::ResourceUtilization
        )
    }
}

impl Column {
    pub(super) fn header(&self) -> String {
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
    /// `Method Level`, as the paper's table names the row.
    pub fn name(&self) -> String {
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
    pub(super) fn value(self) -> Option<f64> {
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

/// `experiments/<paper>/findings.md`: the research narrative, one `## <id>` section per table
/// row (its run id) or ordering (its id) that something is known of.
#[derive(Debug, Clone, Default)]
pub struct Findings {
    /// The file as a report links it (relative to the report's directory).
    pub link: String,
    ids: std::collections::BTreeSet<String>,
}

impl Findings {
    /// Reads the section ids of `path`, linked from reports as `link`; none if it does not exist.
    pub fn load(path: &Path, link: String) -> Result<Option<Findings>> {
        if !path.is_file() {
            return Ok(None);
        }
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Ok(Some(Findings::parse(&text, link)))
    }

    /// The findings of `markdown`: the ids of its `## <id>` headings.
    pub fn parse(markdown: &str, link: String) -> Findings {
        let ids = markdown.lines().filter_map(|l| l.strip_prefix("## ")).map(|id| id.trim().to_string()).collect();
        Findings { link, ids }
    }

    /// Whether there is a section on `id`.
    pub fn has(&self, id: &str) -> bool {
        self.ids.contains(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reproduce::grid::Grid;

    /// Sentences of a note: a full stop, question or exclamation mark followed by a space and
    /// a capital, plus the last one (abbreviations such as "Fig. 3" or "L-Arb. 94" do not end one).
    fn sentences(text: &str) -> usize {
        let chars: Vec<char> = text.chars().collect();
        1 + chars.windows(3).filter(|w| matches!(w[0], '.' | '?' | '!') && w[1] == ' ' && w[2].is_uppercase()).count()
    }

    #[test]
    fn sentences_are_counted_at_a_stop_before_a_capital() {
        assert_eq!(sentences("One. Two, as in Fig. 3: 4.5 points. Three."), 3);
        assert_eq!(sentences("one only (see L-Arb. 94)"), 1);
    }

    /// Every paper's notes stay short (at most three sentences) and each has its full account in
    /// the paper's findings.md, so that the reports stay readable and nothing measured is lost.
    #[test]
    fn every_note_is_at_most_three_sentences_with_a_section_in_the_findings() {
        let experiments = crate::util::workspace_root().join("experiments");
        let mut papers = 0;
        for entry in std::fs::read_dir(&experiments).unwrap().flatten() {
            let dir = entry.path();
            if !dir.join("grid.toml").is_file() {
                continue;
            }
            papers += 1;
            let expected = Expected::load(&dir.join("expected.toml")).unwrap();
            let grid = Grid::load(&dir.join("grid.toml")).unwrap();
            let findings = Findings::load(&dir.join("findings.md"), String::new()).unwrap().unwrap_or_default();
            let rows = expected.tables.iter().flat_map(|t| &t.rows);
            let notes = rows.filter_map(|r| Some((r.run.clone().unwrap_or_default(), r.known.as_deref()?))).chain(
                grid.orderings
                    .iter()
                    .filter_map(|o| Some((o.id.clone().unwrap_or_default(), o.known.as_deref()?)))
                    .chain(
                        grid.trends
                            .iter()
                            .filter_map(|t| Some((t.id.clone().unwrap_or_default(), t.known.as_deref()?))),
                    ),
            );
            for (id, note) in notes {
                let at = format!("{}: `{id}`", dir.display());
                assert!(sentences(note) <= 3, "{at}: {} sentences: {note}", sentences(note));
                assert!(findings.has(&id), "{at}: no `## {id}` section in findings.md");
            }
        }
        assert!(papers >= 3, "found {papers} papers under {}", experiments.display());
    }
}
