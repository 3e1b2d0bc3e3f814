//! The grid's pass/fail checks and orderings evaluated on a report's results, and their
//! Markdown list.

use std::fmt::Write as _;

use crate::reproduce::figures::sweep_points;
use crate::reproduce::grid::{Grid, OrderMetric, Quorum, group};
use crate::reproduce::outcome::Outcome;

use super::expected::Findings;
use super::results::Results;

/// One evaluated check or ordering, for the report and `results.json`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Verdict {
    pub what: String,
    pub passed: Option<bool>,
    pub detail: String,
}

/// The grid's pass/fail checks that apply at this scale.
pub fn evaluate_checks(grid: &Grid, results: &Results) -> Vec<Verdict> {
    let mut out = Vec::new();
    for check in grid.checks.iter().filter(|c| c.scales.as_ref().is_none_or(|s| s.iter().any(|s| s == results.scale))) {
        let Some(run) = results.runs.iter().find(|r| r.key == check.run) else { continue };
        let verdict = |passed, detail: String| Verdict { what: check.what.clone(), passed, detail };
        if let Some(fetch) = results.missing.get(&run.dataset) {
            out.push(verdict(None, format!("not checked: {} is not present (`{}`)", fetch.title, fetch.fetch)));
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
            if check.above.is_some() || check.below.is_some() {
                let v = match check.metric.as_str() {
                    "final_accuracy" => o.final_accuracy,
                    "best_accuracy" => o.best_accuracy,
                    "resource_utilization" => o.resource_utilization,
                    other => {
                        failures.push(format!("unknown metric `{other}`"));
                        continue;
                    }
                };
                seen.push(format!("{} = {v:.4}", check.metric));
                if let Some(min) = check.above.filter(|min| !(v > *min)) {
                    failures.push(format!("{} = {v:.4} ≤ {min}", check.metric));
                }
                if let Some(max) = check.below.filter(|max| !(v < *max)) {
                    failures.push(format!("{} = {v:.4} ≥ {max}", check.metric));
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
pub fn evaluate_orderings(grid: &Grid, results: &Results, findings: Option<&Findings>) -> Vec<Verdict> {
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
            let on = |d: &String| ordering.datasets.as_ref().is_none_or(|ds| ds.contains(d));
            // Per-client metrics are judged for each group of clients (a device type) apart.
            let groups: Vec<&[usize]> = match ordering.clients.is_empty() {
                true => vec![&[]],
                false => ordering.clients.iter().map(Vec::as_slice).collect(),
            };
            let cells = ordering.chains.iter().flat_map(|chain| groups.iter().map(move |g| (chain, *g)));
            for (chain, clients) in cells {
                for (dataset, setting) in settings.iter().filter(|(d, _)| on(d)) {
                    let Some((values, seeds)) = results.chain_values(ordering.metric, clients, dataset, setting, chain)
                    else {
                        continue;
                    };
                    total += 1;
                    let show = |r: &String, v: &f64| match ordering.metric {
                        OrderMetric::BestAccuracy => format!("{r} {:.1}", v * 100.0),
                        OrderMetric::TimeToTarget => format!("{r} {v:.1} s"),
                        OrderMetric::ResourceUtilization => format!("{r} RU {:.1}%", v * 100.0),
                        OrderMetric::JobTime => format!("{r} {v:.2} s a job on clients {clients:?}"),
                        OrderMetric::PeakMemory => format!("{r} {v:.2} MB on clients {clients:?}"),
                    };
                    if values.windows(2).all(|w| ordering.holds(w[0], w[1])) {
                        holds += 1;
                    } else {
                        let mut shown: Vec<String> = chain.iter().zip(&values).map(|(r, v)| show(r, v)).collect();
                        if ordering.factor != 1.0 {
                            let ratios: Vec<String> =
                                values.windows(2).map(|w| format!("{:.2}×", w[0] / w[1])).collect();
                            shown.push(format!("ratio {}, needs {}×", ratios.join(", "), ordering.factor));
                        }
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
            if ordering.tolerance > 0.0 {
                let _ = match ordering.metric {
                    OrderMetric::BestAccuracy => write!(detail, " (within ε = {} points)", ordering.tolerance * 100.0),
                    OrderMetric::TimeToTarget => write!(detail, " (within ε = {} s)", ordering.tolerance),
                    OrderMetric::ResourceUtilization => {
                        write!(detail, " (within ε = {} points)", ordering.tolerance * 100.0)
                    }
                    OrderMetric::JobTime => write!(detail, " (within ε = {} s)", ordering.tolerance),
                    OrderMetric::PeakMemory => write!(detail, " (within ε = {} MB)", ordering.tolerance),
                };
            }
            let known = Known { text: ordering.known.as_deref(), id: ordering.id.as_deref(), findings };
            conclude(&ordering.what, detail, (holds, total), ordering.holds_in, &broken, known)
        })
        .collect()
}

/// The grid's trends: each curve (dataset, series value) of the row along its coordinate, in
/// the sweep figures' points (seed 1).
pub fn evaluate_trends(grid: &Grid, results: &Results, findings: Option<&Findings>) -> Vec<Verdict> {
    grid.trends
        .iter()
        .map(|trend| {
            let (mut holds, mut total, mut broken) = (0, 0, Vec::new());
            let metric = match trend.metric {
                OrderMetric::BestAccuracy => "best_accuracy",
                OrderMetric::TimeToTarget => "time_to_target",
                OrderMetric::ResourceUtilization => "resource_utilization",
                OrderMetric::JobTime => "job_time",
                OrderMetric::PeakMemory => "peak_memory",
            };
            let on = |d: &String| trend.datasets.as_ref().is_none_or(|ds| ds.contains(d));
            for (dataset, entry) in grid.datasets.iter().filter(|(d, _)| on(d)) {
                let curves = sweep_points(&trend.run, &trend.x, &trend.series, dataset, entry, metric, results);
                for (label, points) in curves {
                    let ys: Vec<f64> = points.iter().map(|p| p.1).collect();
                    let Some(ok) = trend.shape.holds(&ys, trend.tolerance) else { continue };
                    total += 1;
                    if ok {
                        holds += 1;
                    } else {
                        let shown: Vec<String> = points.iter().map(|(x, y)| format!("{x}: {y:.1}")).collect();
                        broken.push(format!("{dataset} {label} ({} = {})", trend.x, shown.join(", ")));
                    }
                }
            }
            let missing: Vec<&str> = grid
                .datasets
                .keys()
                .filter(|d| on(d))
                .filter_map(|d| results.missing.get(d).map(|m| m.title.as_str()))
                .collect();
            if total == 0 && !missing.is_empty() {
                let detail = format!("not checked: needs {}", missing.join(", "));
                return Verdict { what: trend.what.clone(), passed: None, detail };
            }
            let unit = if trend.metric == OrderMetric::TimeToTarget { "s" } else { "points" };
            let mut detail = format!("holds in {holds} of {total} curves (seed 1)");
            if trend.tolerance > 0.0 {
                let _ = write!(detail, " (within ε = {} {unit})", trend.tolerance);
            }
            let known = Known { text: trend.known.as_deref(), id: trend.id.as_deref(), findings };
            conclude(&trend.what, detail, (holds, total), trend.holds_in, &broken, known)
        })
        .collect()
}

/// What is known of an ordering or trend that fails, and where its findings section is.
struct Known<'a> {
    text: Option<&'a str>,
    id: Option<&'a str>,
    findings: Option<&'a Findings>,
}

/// The verdict of an ordering or trend that held in `holds` of `total` cells: `detail` (the
/// count and its ε) with the quorum, the cells where it broke and, when it fails, what is known
/// of it with a link to its findings section.
fn conclude(
    what: &str,
    mut detail: String,
    (holds, total): (usize, usize),
    quorum: Quorum,
    broken: &[String],
    known: Known,
) -> Verdict {
    if quorum == Quorum::Most {
        detail.push_str(" (needs more than half)");
    }
    if !broken.is_empty() {
        let _ = write!(detail, "; not in: {}", broken.join("; "));
    }
    let passed = (total > 0).then_some(quorum.met(holds, total));
    if let (Some(false), Some(text)) = (passed, known.text) {
        let _ = write!(detail, ". Known: {text}");
        if let (Some(f), Some(id)) = (known.findings, known.id) {
            if f.has(id) {
                let _ = write!(detail, " ([findings]({}#{id}))", f.link);
            }
        }
    }
    Verdict { what: what.to_string(), passed, detail }
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
    use std::collections::BTreeMap;

    use super::*;
    use crate::reproduce::report::results::fixtures::{outcome, run};

    /// A grid with no rows, scales or datasets and the `[[orderings]]` of `orderings`.
    fn orderings_grid(orderings: &str) -> Grid {
        toml::from_str(&format!("paper = \"p\"\ntitle = \"t\"\nrows = []\nscales = {{}}\ndatasets = {{}}\n{orderings}"))
            .unwrap()
    }

    #[test]
    fn orderings_count_the_settings_where_the_chain_holds_in_every_or_most_of_them() {
        let grid = orderings_grid(
            r#"
            [[orderings]]
            what = "a ≥ b"
            chains = [["a", "b"]]
            tolerance = 0.01
            [[orderings]]
            what = "a ≥ b, mostly"
            chains = [["a", "b"]]
            holds_in = "most"
            known = "b is the code's"
            [[orderings]]
            what = "a at least twice b, on m only"
            chains = [["a", "b"]]
            factor = 2.0
            datasets = ["m"]
            "#,
        );
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
            evaluate_orderings(&grid, &results, None)
        };
        let v = verdicts(&[(0.1, 0.895, 0.90), (0.5, 0.80, 0.90)]);
        assert_eq!(v[0].passed, Some(false));
        assert!(
            v[0].detail.starts_with("holds in 1 of 2 (within ε = 1 points); not in: m-a0.5 (a 80.0, b 90.0)"),
            "{}",
            v[0].detail
        );
        assert_eq!(v[1].passed, Some(false), "half is not most: {}", v[1].detail);
        assert!(v[1].detail.ends_with("m-a0.5 (a 80.0, b 90.0). Known: b is the code's"), "{}", v[1].detail);
        let v = verdicts(&[(0.1, 0.9, 0.8), (0.2, 0.9, 0.8), (0.3, 0.7, 0.8)]);
        assert_eq!(v[1].passed, Some(true), "{}", v[1].detail);
        assert!(v[1].detail.starts_with("holds in 2 of 3 (needs more than half)"), "{}", v[1].detail);
        assert!(!v[1].detail.contains("Known"), "a passing ordering needs no explanation: {}", v[1].detail);
        // Without ε an ordering is strict: a tie does not hold.
        let v = verdicts(&[(0.1, 0.9, 0.9), (0.2, 0.9, 0.8), (0.3, 0.9, 0.8)]);
        assert!(
            v[1].detail.starts_with("holds in 2 of 3 (needs more than half); not in: m-a0.1 (a 90.0, b 90.0)"),
            "{}",
            v[1].detail
        );
        // A factor shows the ratio it missed; `datasets` leaves the others out.
        let mut runs = vec![run("m", 0.1, "a"), run("m", 0.1, "b"), run("c", 0.1, "a"), run("c", 0.1, "b")];
        runs.iter_mut().for_each(|r| r.seed = 1);
        let outcomes = BTreeMap::from([
            ("m-a0.1/a".to_string(), vec![outcome(0.9, 0.9)]),
            ("m-a0.1/b".to_string(), vec![outcome(0.6, 0.6)]),
            ("c-a0.1/a".to_string(), vec![outcome(0.1, 0.1)]),
            ("c-a0.1/b".to_string(), vec![outcome(0.9, 0.9)]),
        ]);
        let results = Results { scale: "s", runs: &runs, outcomes, missing: BTreeMap::new() };
        let v = evaluate_orderings(&grid, &results, None);
        assert_eq!(v[2].detail, "holds in 0 of 1; not in: m-a0.1 (a 90.0, b 60.0, ratio 1.50×, needs 2×)");

        // Rows are compared on the seeds both finished: a's mean over seeds 1 and 2 (0.85) would
        // beat b, but on seed 1 alone b is ahead; with seed 3 for both, over seeds 1 and 3.
        let seeded = |seed: u64, best: f64| Outcome { seed, ..outcome(best, best) };
        let compare = |a: Vec<Outcome>, b: Vec<Outcome>| {
            let runs = vec![run("m", 0.1, "a"), run("m", 0.1, "b")];
            let outcomes = BTreeMap::from([("m-a0.1/a".to_string(), a), ("m-a0.1/b".to_string(), b)]);
            let results = Results { scale: "s", runs: &runs, outcomes, missing: BTreeMap::new() };
            evaluate_orderings(&grid, &results, None)
        };
        let v = compare(vec![seeded(1, 0.80), seeded(2, 0.90)], vec![seeded(1, 0.82)]);
        assert!(
            v[0].detail.starts_with("holds in 0 of 1 (within ε = 1 points); not in: m-a0.1 (a 80.0, b 82.0)"),
            "{}",
            v[0].detail
        );
        let v =
            compare(vec![seeded(1, 0.80), seeded(2, 0.90), seeded(3, 0.70)], vec![seeded(3, 0.78), seeded(1, 0.82)]);
        assert!(v[0].detail.contains("m-a0.1 over seeds 1, 3 (a 75.0, b 80.0)"), "{}", v[0].detail);
        // No seed in common: nothing to compare.
        let v = compare(vec![seeded(2, 0.90)], vec![seeded(1, 0.82)]);
        assert_eq!((v[0].passed, v[0].detail.as_str()), (None, "holds in 0 of 0 (within ε = 1 points)"));
    }

    #[test]
    fn per_client_orderings_judge_each_group_of_clients_apart() {
        let grid = orderings_grid(
            r#"
            [[orderings]]
            what = "b needs less memory than a on every device type"
            metric = "peak_memory"
            chains = [["a", "b"]]
            clients = [[0], [1, 2]]
            [[orderings]]
            what = "b's jobs are shorter than a's on every device type"
            metric = "job_time"
            chains = [["a", "b"]]
            clients = [[0], [1, 2]]
            "#,
        );
        // Client 0 is one device type, clients 1–2 another: b lighter on both, faster on the first only.
        let clients = |memory: [f64; 3], busy: [f64; 3]| Outcome {
            participation: vec![2, 2, 2],
            job_time_s: busy.iter().map(|b| b / 2.0).collect(),
            peak_memory_bytes: memory.to_vec(),
            ..outcome(0.9, 0.9)
        };
        let runs = vec![run("m", 0.1, "a"), run("m", 0.1, "b")];
        let outcomes = BTreeMap::from([
            ("m-a0.1/a".to_string(), vec![clients([4e6, 9e6, 8e6], [10.0, 6.0, 6.0])]),
            ("m-a0.1/b".to_string(), vec![clients([3e6, 7e6, 7.5e6], [8.0, 6.0, 7.0])]),
        ]);
        let results = Results { scale: "s", runs: &runs, outcomes, missing: BTreeMap::new() };
        let v = evaluate_orderings(&grid, &results, None);
        assert_eq!((v[0].passed, v[0].detail.as_str()), (Some(true), "holds in 2 of 2"));
        assert_eq!(v[1].passed, Some(false));
        assert!(
            v[1].detail.contains("not in: m-a0.1 (a 3.00 s a job on clients [1, 2], b 3.25 s a job on clients [1, 2])"),
            "{}",
            v[1].detail
        );
    }

    #[test]
    fn trends_check_each_curve_of_a_row_along_its_coordinate() {
        let grid: Grid = toml::from_str(
            r#"
            paper = "p"
            title = "t"
            rows = []
            scales = {}
            [datasets.m]
            base = "b.toml"
            settings = [
                { id = "b1-m2", coords = { beta = 0.1, M = 2 } },
                { id = "b5-m2", coords = { beta = 0.5, M = 2 } },
                { id = "b9-m2", coords = { beta = 0.9, M = 2 } },
                { id = "b1-m4", coords = { beta = 0.1, M = 4 } },
                { id = "b5-m4", coords = { beta = 0.5, M = 4 } },
                { id = "b9-m4", coords = { beta = 0.9, M = 4 } },
            ]
            [[trends]]
            what = "time rises with beta"
            run = "r"
            x = "beta"
            series = "M"
            metric = "time_to_target"
            shape = "rising"
            tolerance = 5.0
            known = "noise"
            [[trends]]
            what = "accuracy drops at the last beta"
            run = "r"
            x = "beta"
            series = "M"
            metric = "best_accuracy"
            shape = "drop_at_end"
            "#,
        )
        .unwrap();
        // (setting, time to target, best accuracy)
        let cells = [
            ("b1-m2", 110.0, 0.97),
            ("b5-m2", 104.0, 0.969),
            ("b9-m2", 230.0, 0.96),
            ("b1-m4", 125.0, 0.96),
            ("b5-m4", 119.0, 0.95),
            ("b9-m4", 325.0, 0.948),
        ];
        let mut runs = Vec::new();
        let mut outcomes = BTreeMap::new();
        for (setting, t, acc) in cells {
            let mut r = run("m", 0.1, "r");
            r.setting = setting.into();
            r.key = format!("{}/r", group("m", setting));
            outcomes.insert(r.key.clone(), vec![Outcome { time_to_target_s: Some(t), ..outcome(acc, acc) }]);
            runs.push(r);
        }
        let results = Results { scale: "s", runs: &runs, outcomes, missing: BTreeMap::new() };
        let v = evaluate_trends(&grid, &results, None);
        // M = 2 dips by 6 s (more than ε = 5), M = 4 by 6 s too: neither rises.
        assert_eq!(v[0].passed, Some(false));
        assert!(
            v[0].detail.starts_with(
                "holds in 0 of 2 curves (seed 1) (within ε = 5 s); not in: m M = 2 (beta = 0.1: 110.0, 0.5: 104.0, 0.9: 230.0)"
            ),
            "{}",
            v[0].detail
        );
        assert!(v[0].detail.ends_with(". Known: noise"), "{}", v[0].detail);
        // M = 2: drops of 0.1 then 0.9 points, the last the largest; M = 4: 1.0 then 0.2.
        assert_eq!(v[1].passed, Some(false));
        assert!(v[1].detail.starts_with("holds in 1 of 2 curves (seed 1); not in: m M = 4"), "{}", v[1].detail);
    }
}
