//! `reports/<paper>/summary.md`, the entry to a paper's reports: each scale's report (and its
//! seed sets) with its score per table, the variants' index and the findings, so that the tree
//! under `reports/<paper>/` is browsable from one page.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};

use super::grid::Grid;

/// Writes `reports_dir/summary.md` for `grid` from the reports found under `reports_dir`.
pub fn write(grid: &Grid, reports_dir: &Path) -> Result<()> {
    let path = reports_dir.join("summary.md");
    std::fs::write(&path, render(grid, reports_dir)).with_context(|| format!("writing {}", path.display()))
}

fn render(grid: &Grid, reports_dir: &Path) -> String {
    let mut md = format!("# {}\n\n", grid.title);
    let _ = writeln!(
        md,
        "The reproduction's reports, one per scale (`cargo xtask reproduce {} --scale S`); each lists the paper's \
         tables with ours beside them, the checks and orderings, and the figures. What is known of every cell that \
         differs from the paper is in [findings.md](../../experiments/{}/findings.md).\n",
        grid.paper, grid.paper
    );
    md.push_str("## Reports\n\n");
    let mut any = false;
    // The CI scale's reports are not committed: a link to them would be dead in the repository.
    for scale in grid.scales.keys().filter(|s| *s != super::CI_SCALE) {
        let dir = reports_dir.join(scale);
        if !dir.join("results.json").is_file() {
            continue;
        }
        any = true;
        let _ = writeln!(md, "- [`{scale}`]({scale}/summary.md){}", scores(&dir.join("results.json")));
        for seeds in seed_sets(&dir) {
            let _ = writeln!(
                md,
                "  - [seeds {}]({scale}/seeds-{seeds}/summary.md){}",
                seeds.replace('-', ", "),
                scores(&dir.join(format!("seeds-{seeds}")).join("results.json"))
            );
        }
    }
    if !any {
        md.push_str("None yet.\n");
    }
    if !grid.variants.is_empty() {
        let _ = writeln!(
            md,
            "\n## Variants\n\n[variants.md](variants.md): {} alternative{} to the paper's choices, the hypothesis each \
             tested and its verdict, and the reports made with them.",
            grid.variants.len(),
            if grid.variants.len() == 1 { "" } else { "s" }
        );
    }
    md
}

/// ` — Table 2: 21 / 60 / 120; …`: the scores a report's `results.json` holds.
fn scores(results: &Path) -> String {
    let Ok(text) = std::fs::read_to_string(results) else { return String::new() };
    let Ok(json) = serde_json::from_str::<serde_json::Value>(&text) else { return String::new() };
    let listed: Vec<String> = json["scores"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(title, s)| {
            let table = title.split(':').next().unwrap_or(title);
            let in_paper = s["in_paper"].as_u64().filter(|n| *n > 0)?;
            Some(format!("{table}: {} / {} / {in_paper}", s["within"].as_u64()?, s["compared"].as_u64()?))
        })
        .collect();
    if listed.is_empty() {
        String::new()
    } else {
        format!(" — cells within tolerance / compared / in the paper: {}", listed.join("; "))
    }
}

/// The `seeds-…` sets under a scale's report, sorted.
pub fn seed_sets(dir: &Path) -> Vec<String> {
    let mut sets: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("seeds-").map(str::to_string))
        .collect();
    sets.sort();
    sets
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_paper_page_links_each_scale_with_its_scores_and_the_variants() {
        let tmp = tempfile::tempdir().unwrap();
        let grid: Grid = toml::from_str(
            r#"
            paper = "p"
            title = "P et al."
            rows = []
            datasets = {}
            scales = { full = {}, reduced = {}, smoke = {} }
            [variants.v]
            summary = "s"
            what = "w"
            hypothesis = "h"
            sets = []
            "#,
        )
        .unwrap();
        let results = r#"{"scores": {"Table 2: accuracy": {"within": 21, "compared": 60, "in_paper": 120}}}"#;
        for dir in ["full", "full/seeds-1-2-3"] {
            std::fs::create_dir_all(tmp.path().join(dir)).unwrap();
            std::fs::write(tmp.path().join(dir).join("results.json"), results).unwrap();
        }
        write(&grid, tmp.path()).unwrap();
        let md = std::fs::read_to_string(tmp.path().join("summary.md")).unwrap();
        let score = "cells within tolerance / compared / in the paper: Table 2: 21 / 60 / 120";
        assert!(md.contains(&format!("- [`full`](full/summary.md) — {score}\n")), "{md}");
        assert!(md.contains(&format!("  - [seeds 1, 2, 3](full/seeds-1-2-3/summary.md) — {score}\n")), "{md}");
        assert!(!md.contains("reduced"), "no report, no link: {md}");
        assert!(md.contains("[variants.md](variants.md): 1 alternative to"), "{md}");
        std::fs::create_dir_all(tmp.path().join("smoke")).unwrap();
        std::fs::write(tmp.path().join("smoke/results.json"), results).unwrap();
        write(&grid, tmp.path()).unwrap();
        let md = std::fs::read_to_string(tmp.path().join("summary.md")).unwrap();
        assert!(!md.contains("smoke"), "CI output is not linked: {md}");
    }
}
