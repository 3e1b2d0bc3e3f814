//! The method presets of every plugin: each is valid TOML whose sections are component kinds,
//! each naming a component registered for that kind, with parameters the component accepts
//! (built here for every kind whose constructor reads only its parameters), and at least a
//! scheduler and an aggregator, so that a method runs without more sections. Every preset file
//! under `fl-algos/*/presets/` belongs to the method of its name.

use std::collections::BTreeMap;

// Referenced so that every plugin's registrations are linked into this test binary.
use fl_algos as _;
use fl_core::registry::{Builder, ComponentKind, Params, Registry};
use fl_core::toml;

/// What is wrong with method `name`'s preset, if anything.
fn check(registry: &Registry, name: &str, preset: &str) -> Vec<String> {
    let file = format!("method `{name}`");
    let preset: toml::Table = match preset.parse() {
        Ok(t) => t,
        Err(e) => return vec![format!("{file}: not valid TOML: {e}")],
    };
    let mut problems = Vec::new();
    for (section, value) in &preset {
        let Some(kind) = ComponentKind::ALL.into_iter().find(|k| k.section() == section) else {
            problems.push(format!("{file}: `{section}` is not a component section"));
            continue;
        };
        let Some(table) = value.as_table() else {
            problems.push(format!("{file}: `{section}` is not a table"));
            continue;
        };
        let Some(component) = table.get("name").and_then(toml::Value::as_str) else {
            // A `[model]` without a name holds keys every model reads (MOON's projection head)
            // and applies to the file's model.
            if kind == ComponentKind::Model && !table.contains_key("name") {
                let params = Params::new(file.as_str(), section.as_str(), table.clone());
                match fl_core::projection_head::split_params(&params) {
                    Ok((rest, _)) if rest.table.is_empty() => {}
                    Ok((rest, _)) => problems.push(format!(
                        "{file}: `model` without a name sets {:?}",
                        rest.table.keys().collect::<Vec<_>>()
                    )),
                    Err(e) => problems.push(e.to_string()),
                }
                continue;
            }
            problems.push(format!("{file}: `{section}.name` is missing or not a string"));
            continue;
        };
        let component = match registry.component(kind, component, &file, &format!("{section}.name")) {
            Ok(c) => c,
            Err(e) => {
                problems.push(e.to_string());
                continue;
            }
        };
        let mut params = table.clone();
        params.remove("name");
        let params = Params::new(file.as_str(), section.as_str(), params);
        let built = match component.build {
            Builder::Partitioner(build) => build(&params).map(drop),
            Builder::Trainer(build) => build(&params).map(drop),
            Builder::MaskPolicy(build) => build(&params).map(drop),
            Builder::Scheduler(build) => build(&params).map(drop),
            Builder::Aggregator(build) => build(&params).map(drop),
            Builder::Staleness(build) => build(&params).map(drop),
            // These need the data or the model's input; their names are checked above.
            Builder::Dataset(_) | Builder::Model(_) => Ok(()),
        };
        if let Err(e) = built {
            problems.push(e.to_string());
        }
    }
    // A method runs on its own: it names at least its schedule and its aggregation.
    for kind in [ComponentKind::Scheduler, ComponentKind::Aggregator] {
        if !preset.contains_key(kind.section()) {
            problems.push(format!("{file}: no `[{}]`: a method names its {}", kind.section(), kind.section()));
        }
    }
    problems
}

#[test]
fn every_method_preset_names_registered_components_with_valid_parameters() {
    let registry = Registry::get().unwrap();
    let problems: Vec<String> = registry.methods().flat_map(|m| check(registry, m.name, m.preset)).collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_plugin_registers_its_preset_files() {
    let registry = Registry::get().unwrap();
    let methods: BTreeMap<&str, &str> = registry.methods().map(|m| (m.name, m.preset)).collect();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = 0;
    for plugin in ["asyncnc", "baselines", "cos2p", "fedasmu", "fedraa", "kdd23"] {
        for entry in std::fs::read_dir(root.join(plugin).join("presets")).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_stem().unwrap().to_str().unwrap();
            assert_eq!(path.extension().and_then(|e| e.to_str()), Some("toml"), "{}", path.display());
            let text = std::fs::read_to_string(&path).unwrap();
            assert_eq!(
                methods.get(name).copied(),
                Some(text.as_str()),
                "{}: no method `{name}` with this preset",
                path.display()
            );
            files += 1;
        }
    }
    assert_eq!(files, methods.len(), "a registered method without a preset file: {:?}", methods.keys());
}

#[test]
fn a_bad_preset_is_reported() {
    let registry = Registry::get().unwrap();
    let preset = "[scheduler]\nname = \"sync-rounds\"\nrounds = 0\n[aggregator]\nname = \"nope\"\n[extra]\n";
    let problems = check(registry, "bad", preset);
    assert_eq!(problems.len(), 3, "{problems:?}");
    assert!(problems[0].starts_with("method `bad`: key `aggregator.name`: unknown aggregator `nope`"), "{problems:?}");
    assert_eq!(problems[1], "method `bad`: `extra` is not a component section");
    assert_eq!(problems[2], "method `bad`: key `scheduler.rounds`: expected at least 1");
    // FedAvg+Q-ViT's first preset named no aggregator, and its runs failed.
    let incomplete = check(registry, "partial", "[scheduler]\nname = \"sync-rounds\"\n");
    assert_eq!(incomplete, ["method `partial`: no `[aggregator]`: a method names its aggregator"]);
}
