//! Experiment files: strict TOML, every component chosen by name.
//!
//! ```toml
//! seed = 1
//! clients = 10
//! method = "fedavg"            # a registered preset (optional)
//! [dataset]   name = "mnist"
//! [partition] name = "dirichlet"  alpha = 0.5
//! [model]     name = "mlp"        hidden = [200]
//! [scheduler] rounds = 20          # no name: overrides the method's scheduler parameters
//! ```
//!
//! Sections resolve as built-in defaults < the method's preset < the file. A section that
//! names a different component than the preset replaces the preset's section; one that names
//! the same component (or none) overrides its parameters key by key. Unknown keys, wrong types
//! and unknown names are errors naming the file, the key path and the nearest valid names.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use tch::Device;

use crate::data::FederatedData;
use crate::engine::pack::RunPack;
use crate::engine::{EvalConfig, RunConfig, Setup, Simulation};
use crate::error::{Error, Result};
use crate::profile::DevicesConfig;
use crate::registry::{Builder, ComponentKind, DataContext, Params, Registry, nearest};
use crate::rng::{self, tag};

const TOP_LEVEL_KEYS: [&str; 15] = [
    "name",
    "seed",
    "method",
    "clients",
    "dataset",
    "partition",
    "model",
    "trainer",
    "mask",
    "scheduler",
    "aggregator",
    "staleness",
    "devices",
    "eval",
    "run",
];

/// Component used for a kind when neither the method nor the file names one.
fn fallback(kind: ComponentKind) -> Option<&'static str> {
    match kind {
        ComponentKind::Partitioner => Some("iid"),
        ComponentKind::Trainer => Some("sgd"),
        ComponentKind::MaskPolicy => Some("full"),
        ComponentKind::Staleness => Some("constant"),
        ComponentKind::Dataset | ComponentKind::Model | ComponentKind::Scheduler | ComponentKind::Aggregator => None,
    }
}

/// A resolved component choice.
#[derive(Debug, Clone)]
pub struct ComponentChoice {
    /// The registered component's name.
    pub name: String,
    /// Its parameters: the method's preset overridden by the file, without `name`.
    pub params: Params,
}

/// A parsed, resolved and validated experiment.
#[derive(Debug, Clone)]
pub struct Experiment {
    /// The file it was parsed from, as error messages name it.
    pub file: String,
    /// The experiment's name: the `name` key, else the file's stem.
    pub name: String,
    /// The run seed every random stream derives from (`seed`, default 0).
    pub seed: u64,
    /// The registered method (preset) it starts from, if any.
    pub method: Option<String>,
    /// Number of clients in the federation.
    pub clients: usize,
    /// One component per kind, every kind present.
    pub components: BTreeMap<ComponentKind, ComponentChoice>,
    /// The `[devices]` section.
    pub devices: DevicesConfig,
    /// The `[eval]` section.
    pub eval: EvalConfig,
    /// The `[run]` section.
    pub run: RunConfig,
}

/// Host-side choices that do not change results (on CPU): where and how fast to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The compute device (CPU or a CUDA device).
    pub device: Device,
    /// Worker threads training client jobs.
    pub workers: usize,
    /// Where datasets are stored.
    pub data_dir: PathBuf,
}

impl Experiment {
    /// Reads and parses the experiment file at `path` (see [`Experiment::parse`]).
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses experiment TOML; `file` names it in error messages.
    pub fn parse(text: &str, file: &str) -> Result<Self> {
        let doc: toml::Table = text.parse().map_err(|e: toml::de::Error| Error::Config {
            file: file.into(),
            key: "(syntax)".into(),
            message: e.to_string(),
        })?;
        let cfg = |key: &str, message: String| Error::Config { file: file.into(), key: key.into(), message };
        if let Some(key) = first_nan(&doc, "") {
            return Err(cfg(&key, "NaN is not a value; give a number".into()));
        }
        for key in doc.keys() {
            if !TOP_LEVEL_KEYS.contains(&key.as_str()) {
                let valid = nearest(key, TOP_LEVEL_KEYS.into_iter());
                return Err(cfg(key, format!("unknown key; valid keys, nearest first: {}", valid.join(", "))));
            }
        }
        let registry = Registry::get()?;
        let method = match doc.get("method") {
            None => None,
            Some(toml::Value::String(m)) => Some(m.clone()),
            Some(other) => return Err(cfg("method", format!("expected a string, got {}", other.type_str()))),
        };
        let preset: toml::Table = match &method {
            Some(m) => registry
                .method(m, file)?
                .preset
                .parse()
                .map_err(|e: toml::de::Error| cfg("method", format!("preset `{m}` is not valid TOML: {e}")))?,
            None => toml::Table::new(),
        };
        let mut components = BTreeMap::new();
        for kind in ComponentKind::ALL {
            let section = kind.section();
            let from_preset = table_at(&preset, section, &format!("method `{}`", method.as_deref().unwrap_or("")))?;
            let from_file = table_at(&doc, section, file)?;
            let merged = merge_section(from_preset, from_file);
            let name = match merged.get("name") {
                Some(toml::Value::String(n)) => n.clone(),
                Some(other) => {
                    return Err(cfg(
                        &format!("{section}.name"),
                        format!("expected a string, got {}", other.type_str()),
                    ));
                }
                None => match fallback(kind) {
                    Some(n) => n.to_string(),
                    None => {
                        return Err(cfg(
                            &format!("{section}.name"),
                            format!("missing: name a {kind} (or choose a `method` that does)"),
                        ));
                    }
                },
            };
            let component = registry.component(kind, &name, file, &format!("{section}.name"))?;
            let mut params = merged;
            params.remove("name");
            let params = Params::new(file, section, params);
            validate_component(&component.build, &params)?;
            components.insert(kind, ComponentChoice { name, params });
        }
        let typed = |section: &str| {
            Params::new(file, section, table_at(&doc, section, file).ok().flatten().unwrap_or_default())
        };
        let devices: DevicesConfig = typed("devices").parse_valid(DevicesConfig::validate)?;
        let eval: EvalConfig = typed("eval").parse_valid(EvalConfig::validate)?;
        let run: RunConfig = typed("run").parse_valid(RunConfig::validate)?;
        if let (Some(every), Some(end)) = (eval.every_virtual_s, run.max_virtual_time_s) {
            let evaluations = end / every;
            if evaluations > MAX_EVALUATIONS {
                return Err(cfg(
                    "eval.every_virtual_s",
                    format!(
                        "{every} s evaluates {evaluations:.0} times over run.max_virtual_time_s = {end}; \
                         at most {MAX_EVALUATIONS} evaluations"
                    ),
                ));
            }
        }
        let seed = match doc.get("seed") {
            None => 0,
            Some(toml::Value::Integer(s)) if *s >= 0 => *s as u64,
            Some(other) => return Err(cfg("seed", format!("expected a non-negative integer, got {other}"))),
        };
        let clients = match doc.get("clients") {
            Some(toml::Value::Integer(c)) if *c > 0 => *c as usize,
            Some(other) => return Err(cfg("clients", format!("expected a positive integer, got {other}"))),
            None => return Err(cfg("clients", "missing: the number of clients".into())),
        };
        let name = match doc.get("name") {
            Some(toml::Value::String(n)) => n.clone(),
            Some(other) => return Err(cfg("name", format!("expected a string, got {}", other.type_str()))),
            None => {
                Path::new(file).file_stem().map_or_else(|| "experiment".into(), |s| s.to_string_lossy().into_owned())
            }
        };
        Ok(Experiment { file: file.into(), name, seed, method, clients, components, devices, eval, run })
    }

    /// The component chosen for `kind`.
    pub fn component(&self, kind: ComponentKind) -> &ComponentChoice {
        &self.components[&kind]
    }

    /// The experiment with every default filled in, as TOML (written beside each run).
    pub fn resolved_toml(&self) -> Result<String> {
        let registry = Registry::get()?;
        let mut doc = toml::Table::new();
        doc.insert("name".into(), self.name.clone().into());
        doc.insert("seed".into(), toml::Value::Integer(self.seed as i64));
        if let Some(m) = &self.method {
            doc.insert("method".into(), m.clone().into());
        }
        doc.insert("clients".into(), toml::Value::Integer(self.clients as i64));
        for (kind, choice) in &self.components {
            let component = registry.component(*kind, &choice.name, &self.file, kind.section())?;
            let mut table = toml::Table::new();
            table.insert("name".into(), choice.name.clone().into());
            table.extend((component.defaults)());
            table.extend(choice.params.table.clone());
            doc.insert(kind.section().into(), table.into());
        }
        doc.insert("devices".into(), to_table(&self.devices).into());
        doc.insert("eval".into(), to_table(&self.eval).into());
        doc.insert("run".into(), to_table(&self.run).into());
        toml::to_string_pretty(&doc).map_err(Error::SerializeConfig)
    }

    /// Loads the data, partitions it, builds every component and returns the simulation.
    pub fn build(&self, opts: &RunOptions) -> Result<Simulation> {
        Simulation::new(self.setup(opts)?)
    }

    /// [`Experiment::build`] as a run of `pack`: its data and model are shared with the pack's
    /// runs of equal sections, and its cohorts train together with theirs (see [`RunPack`]).
    pub fn build_in(&self, opts: &RunOptions, pack: &RunPack) -> Result<Simulation> {
        let setup = self.setup_with(opts, Some(pack))?;
        let key = [ComponentKind::Trainer, ComponentKind::Model, ComponentKind::Dataset]
            .map(|k| self.section_key(k))
            .join("\n");
        let member = pack.join(format!("{key}\nseed {}", self.seed))?;
        Simulation::with_pack(setup, Some(member))
    }

    /// A section's component and parameters as one string: equal strings build equal components.
    fn section_key(&self, kind: ComponentKind) -> String {
        let c = self.component(kind);
        format!("[{}] {} {}", kind.section(), c.name, c.params.table)
    }

    /// Everything [`Experiment::build`] builds, before the simulation is made of it (tests
    /// replace a component, e.g. the trainer by a reference one).
    pub fn setup(&self, opts: &RunOptions) -> Result<Setup> {
        self.setup_with(opts, None)
    }

    fn setup_with(&self, opts: &RunOptions, pack: Option<&RunPack>) -> Result<Setup> {
        let registry = Registry::get()?;
        let get = |kind: ComponentKind| {
            let c = self.component(kind);
            registry.component(kind, &c.name, &self.file, kind.section()).map(|comp| (comp.build, &c.params))
        };
        // Calls the constructor registered for a kind (the registry keys builders by kind).
        macro_rules! build {
            ($kind:ident $(, $arg:expr)*) => {
                match get(ComponentKind::$kind)? {
                    (Builder::$kind(f), p) => f(p $(, $arg)*)?,
                    _ => unreachable!("registry keys builders by kind"),
                }
            };
        }
        let data_ctx = DataContext { data_dir: opts.data_dir.clone(), device: opts.device, seed: self.seed };
        let load = || Ok(build!(Dataset, &data_ctx));
        let FederatedData { train, test, spec, natural_partition } = match pack {
            Some(pack) => {
                pack.dataset(format!("{}\nseed {}", self.section_key(ComponentKind::Dataset), self.seed), load)?
            }
            None => load()?,
        };
        if test.is_empty() {
            return Err(Error::Config {
                file: self.file.clone(),
                key: "dataset".into(),
                message: format!(
                    "dataset `{}` has an empty test split: the global model could not be evaluated",
                    self.component(ComponentKind::Dataset).name
                ),
            });
        }
        let partition = match natural_partition {
            Some(p) => {
                if p.len() != self.clients {
                    return Err(Error::Config {
                        file: self.file.clone(),
                        key: "clients".into(),
                        message: format!(
                            "dataset `{}` is split among {} clients",
                            self.component(ComponentKind::Dataset).name,
                            p.len()
                        ),
                    });
                }
                p
            }
            None => build!(Partitioner).partition(
                &train.labels(),
                spec.classes,
                self.clients,
                &mut rng::stream(self.seed, &[tag::PARTITION]),
            )?,
        };
        let setup = Setup {
            model: match pack {
                Some(pack) => pack.model(
                    format!(
                        "{}\n{}\nseed {}",
                        self.section_key(ComponentKind::Model),
                        self.section_key(ComponentKind::Dataset),
                        self.seed
                    ),
                    || Ok(build!(Model, &spec)),
                )?,
                None => build!(Model, &spec),
            },
            trainer: build!(Trainer),
            scheduler: build!(Scheduler),
            aggregator: build!(Aggregator),
            mask_policy: build!(MaskPolicy),
            staleness: build!(Staleness),
            train,
            test,
            partition,
            devices: self.devices.clone(),
            eval: self.eval.clone(),
            run: self.run.clone(),
            seed: self.seed,
            device: opts.device,
            workers: opts.workers,
        };
        Ok(setup)
    }
}

/// Builds the cheap components once at parse time so that bad parameters fail before any
/// data is loaded. Datasets and models are checked by parsing when they are built.
fn validate_component(build: &Builder, params: &Params) -> Result<()> {
    match build {
        Builder::Partitioner(f) => f(params).map(drop),
        Builder::Trainer(f) => f(params).map(drop),
        Builder::MaskPolicy(f) => f(params).map(drop),
        Builder::Scheduler(f) => f(params).map(drop),
        Builder::Aggregator(f) => f(params).map(drop),
        Builder::Staleness(f) => f(params).map(drop),
        Builder::Dataset(_) | Builder::Model(_) => Ok(()),
    }
}

fn table_at(doc: &toml::Table, key: &str, file: &str) -> Result<Option<toml::Table>> {
    match doc.get(key) {
        None => Ok(None),
        Some(toml::Value::Table(t)) => Ok(Some(t.clone())),
        Some(other) => Err(Error::Config {
            file: file.into(),
            key: key.into(),
            message: format!("expected a table (`[{key}]`), got {}", other.type_str()),
        }),
    }
}

/// The file's section over the preset's: replaces it when it names another component.
fn merge_section(preset: Option<toml::Table>, file: Option<toml::Table>) -> toml::Table {
    match (preset, file) {
        (None, None) => toml::Table::new(),
        (Some(p), None) => p,
        (None, Some(f)) => f,
        (Some(mut p), Some(f)) => {
            let renamed = matches!((p.get("name"), f.get("name")), (Some(a), Some(b)) if a != b);
            if renamed {
                f
            } else {
                p.extend(f);
                p
            }
        }
    }
}

fn to_table<T: Serialize>(value: &T) -> toml::Table {
    toml::Table::try_from(value).expect("config structs serialise to tables")
}

/// Most evaluations a run's cadence may ask for (each writes a row and runs the test set).
const MAX_EVALUATIONS: f64 = 1e6;

/// The path of the first NaN in `table` (TOML accepts `nan`; no key of an experiment means it).
fn first_nan(table: &toml::Table, prefix: &str) -> Option<String> {
    fn walk(value: &toml::Value, path: String) -> Option<String> {
        match value {
            toml::Value::Float(f) if f.is_nan() => Some(path),
            toml::Value::Table(t) => t.iter().find_map(|(k, v)| walk(v, join(&path, k))),
            toml::Value::Array(a) => a.iter().enumerate().find_map(|(i, v)| walk(v, format!("{path}[{i}]"))),
            _ => None,
        }
    }
    fn join(path: &str, key: &str) -> String {
        if path.is_empty() { key.to_string() } else { format!("{path}.{key}") }
    }
    table.iter().find_map(|(k, v)| walk(v, join(prefix, k)))
}
