//! `fl list`: every registered component, grouped by kind, with its parameters and defaults.

use std::fmt::Write as _;

use anyhow::{Result, bail};
use fl_core::registry::{ComponentKind, Registry, nearest};

pub fn list(only: Option<&str>) -> Result<()> {
    let registry = Registry::get()?;
    let sections: Vec<&str> = ComponentKind::ALL.iter().map(|k| k.section()).chain(["method"]).collect();
    if let Some(k) = only {
        if !sections.contains(&k) {
            bail!("unknown kind `{k}`; kinds, nearest first: {}", nearest(k, sections.iter().copied()).join(", "));
        }
    }
    let mut out = String::new();
    for kind in ComponentKind::ALL {
        if only.is_some_and(|k| k != kind.section()) {
            continue;
        }
        writeln!(out, "{} [{}]", plural(&kind.to_string()), kind.section())?;
        for c in registry.components(kind) {
            writeln!(out, "  {:<18} {}", c.name, c.summary)?;
            if !c.paper.is_empty() {
                writeln!(out, "  {:<18} paper: {}", "", c.paper)?;
            }
            for (key, value) in (c.defaults)() {
                writeln!(out, "  {:<18}   {key} = {value}", "")?;
            }
        }
        writeln!(out)?;
    }
    if only.is_none_or(|k| k == "method") {
        writeln!(out, "methods [method = \"...\"]")?;
        for m in registry.methods() {
            writeln!(out, "  {:<18} {}", m.name, m.summary)?;
            if !m.paper.is_empty() {
                writeln!(out, "  {:<18} paper: {}", "", m.paper)?;
            }
        }
    }
    crate::output::say(&out)?;
    Ok(())
}

fn plural(kind: &str) -> String {
    match kind.strip_suffix('y') {
        Some(stem) => format!("{stem}ies"),
        None => format!("{kind}s"),
    }
}
