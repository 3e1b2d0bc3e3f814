//! AG News (Zhang, Zhao and LeCun, "Character-level Convolutional Networks for Text
//! Classification", NeurIPS 2015): the reader of its official CSV form and the dataset component
//! `agnews`, which turns the articles into fixed-length token-id sequences.
//!
//! **Files.** `train.csv` (120,000 articles) and `test.csv` (7,600), as the official archive
//! `ag_news_csv.tgz` holds them in `ag_news_csv/`; the reader looks in the dataset directory and
//! in that subdirectory. Each record is `"class","title","description"` (RFC 4180, see
//! [`crate::csv`]); classes 1..4 (World, Sports, Business, Sci/Tech) become labels 0..3.
//!
//! **Pipeline** (PFLlib's `generate_agnews.py`, which the KDD '23 fastText runs used; spec
//! §5.1): text = title + " " + description; torchtext's `basic_english` tokens; a vocabulary
//! over train + test (or train only) with `<unk>` at id 0, then tokens by descending count, ties
//! lexicographically; each article truncated or padded with 0 to `seq_len` ids (see
//! [`crate::text`]). Padding and `<unk>` share id 0.
//!
//! Parameters of `agnews` (all optional):
//! - `dir`: the directory holding the files; default `<data_dir>/agnews`.
//! - `train_samples`, `test_samples`: keep only the first n articles of a split. The vocabulary
//!   is still built from every article of its scope, so the ids (and the model's size) do not
//!   depend on the subset.
//! - `vocab`: `"train-test"` (default, 98,635 ids on the official files) or `"train"`.
//! - `max_vocab`: keep at most this many ids, `<unk>` included (the most frequent tokens);
//!   the others encode to 0.
//! - `seq_len`: ids per article, default 200.
//!
//! The data are `x` int64 `[n, seq_len]` and `y` int64 `[n]`; the spec's `vocab_size` is the
//! vocabulary's size, which a text model (`fasttext`) sizes its embedding by.

use std::path::{Path, PathBuf};

use fl_core::registry::{Builder, Component, DataContext, Params, defaults_of};
use fl_core::{DataSpec, FederatedData, InvalidKey};
use serde::{Deserialize, Serialize};

use crate::csv::read_csv;
use crate::error::{DataError, Result};
use crate::text::{EncodedSplits, LabelledTexts, VocabScope, encode_splits};

/// The dataset's name in the registry, the data directory and `fl data fetch`.
pub const AGNEWS: &str = "agnews";
pub const AGNEWS_TRAIN: &str = "train.csv";
pub const AGNEWS_TEST: &str = "test.csv";
/// The directory the official archive extracts to.
pub const AGNEWS_SUBDIR: &str = "ag_news_csv";
/// The official archive (Zhang et al.'s `ag_news_csv.tgz`, as fast.ai mirrors it).
pub const AGNEWS_URL: &str = "https://s3.amazonaws.com/fast-ai-nlp/ag_news_csv.tgz";
pub const AGNEWS_CLASSES: usize = 4;
/// Articles in the official train and test files.
pub const AGNEWS_SIZES: (usize, usize) = (120_000, 7_600);

/// Articles of one split: `texts[i]` (title + " " + description) has label `labels[i]` in 0..4.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Articles {
    pub labels: Vec<i64>,
    pub texts: Vec<String>,
}

impl Articles {
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// How many articles carry each label in `0..4`.
    pub fn class_counts(&self) -> Vec<usize> {
        let mut counts = vec![0; AGNEWS_CLASSES];
        for &l in &self.labels {
            counts[l as usize] += 1;
        }
        counts
    }

    fn as_labelled(&self) -> LabelledTexts<'_> {
        LabelledTexts { texts: &self.texts, labels: &self.labels }
    }
}

/// The official train and test splits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgNewsSplits {
    pub train: Articles,
    pub test: Articles,
}

/// Where the files may be: `dir` itself or the archive's subdirectory under it, in the order
/// tried.
pub fn candidates(dir: &Path) -> [PathBuf; 2] {
    [dir.to_path_buf(), dir.join(AGNEWS_SUBDIR)]
}

/// Reads both splits from `dir` or `dir/ag_news_csv`.
pub fn read_agnews(dir: &Path) -> Result<AgNewsSplits> {
    let files = [AGNEWS_TRAIN, AGNEWS_TEST];
    let Some(found) = candidates(dir).into_iter().find(|d| files.iter().all(|f| d.join(f).is_file())) else {
        let looked_in = candidates(dir).to_vec();
        let absent: Vec<&str> =
            files.iter().copied().filter(|f| !looked_in.iter().any(|d| d.join(f).is_file())).collect();
        let missing = if absent.is_empty() {
            format!("a directory holding both {}", files.join(" and "))
        } else {
            absent.join(", ")
        };
        return Err(DataError::Missing {
            dataset: AGNEWS.into(),
            missing,
            looked_in,
            hint: format!(
                "download the official CSV archive ({AGNEWS_URL}) and extract it into {}, \
                 or run `fl data fetch {AGNEWS}` on a machine with internet access",
                dir.display()
            ),
        });
    };
    Ok(AgNewsSplits {
        train: read_agnews_csv(&found.join(AGNEWS_TRAIN))?,
        test: read_agnews_csv(&found.join(AGNEWS_TEST))?,
    })
}

/// Reads one official CSV file: three fields per record, the class in 1..4 first.
pub fn read_agnews_csv(path: &Path) -> Result<Articles> {
    let records = read_csv(path)?;
    let mut articles = Articles { labels: Vec::with_capacity(records.len()), texts: Vec::with_capacity(records.len()) };
    for record in records {
        let line = record.line;
        let [class, title, description]: [String; 3] = record.fields.try_into().map_err(|fields: Vec<String>| {
            DataError::format(
                path,
                format!("3 fields (\"class\",\"title\",\"description\") on line {line}"),
                format!("{} field{}", fields.len(), if fields.len() == 1 { "" } else { "s" }),
            )
        })?;
        let label = match class.as_str() {
            "1" | "2" | "3" | "4" => i64::from(class.as_bytes()[0] - b'1'),
            _ => return Err(DataError::format(path, format!("a class in 1..4 on line {line}"), format!("`{class}`"))),
        };
        articles.labels.push(label);
        articles.texts.push(format!("{title} {description}"));
    }
    Ok(articles)
}

/// Parameters of `agnews`; see the module documentation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgNewsConfig {
    pub dir: Option<PathBuf>,
    pub train_samples: Option<usize>,
    pub test_samples: Option<usize>,
    pub vocab: VocabScope,
    pub max_vocab: Option<usize>,
    pub seq_len: usize,
    /// Check the files against their recorded SHA-256 sums before reading them (default true).
    pub verify: bool,
}

impl Default for AgNewsConfig {
    fn default() -> Self {
        AgNewsConfig {
            dir: None,
            train_samples: None,
            test_samples: None,
            vocab: VocabScope::TrainTest,
            max_vocab: None,
            seq_len: 200,
            verify: true,
        }
    }
}

impl AgNewsConfig {
    /// Checks the sizes; messages read `"key: what is wrong"`.
    pub fn validate(&self) -> std::result::Result<(), InvalidKey> {
        if self.seq_len == 0 {
            return Err(InvalidKey::new("seq_len", "expected at least 1"));
        }
        if self.max_vocab == Some(0) {
            return Err(InvalidKey::new("max_vocab", "expected at least 1 (the vocabulary always holds `<unk>`)"));
        }
        Ok(())
    }
}

/// Tokenises and encodes both splits as `cfg` says, then keeps the first articles as asked.
/// `dir` names the source in the error for a sample limit above a split's size.
pub fn encode_agnews(splits: &AgNewsSplits, cfg: &AgNewsConfig, dir: &Path) -> Result<EncodedSplits> {
    let mut encoded =
        encode_splits(splits.train.as_labelled(), splits.test.as_labelled(), cfg.vocab, cfg.max_vocab, cfg.seq_len);
    let limits = [
        ("train_samples", "train", cfg.train_samples, &mut encoded.train),
        ("test_samples", "test", cfg.test_samples, &mut encoded.test),
    ];
    for (key, which, keep, split) in limits {
        if let Some(n) = keep {
            if n > split.len() {
                return Err(DataError::Key(InvalidKey::new(
                    key,
                    format!(
                        "asked for the first {n} articles, but the {which} split in {} has {}",
                        dir.display(),
                        split.len()
                    ),
                )));
            }
            split.keep_first(n);
        }
    }
    Ok(encoded)
}

/// Reads AG News from `cfg.dir` (default `<ctx.data_dir>/agnews`), encodes it and puts both
/// splits on `ctx.device`.
pub fn load_agnews(cfg: &AgNewsConfig, params: &Params, ctx: &DataContext) -> fl_core::Result<FederatedData> {
    let dir = cfg.dir.clone().unwrap_or_else(|| ctx.data_dir.join(AGNEWS));
    if cfg.verify {
        crate::integrity::check(&dir)?;
    }
    let splits = read_agnews(&dir)?;
    let encoded = encode_agnews(&splits, cfg, &dir).map_err(|e| match e {
        DataError::Key(e) => params.invalid_key(e),
        other => other.into(),
    })?;
    Ok(FederatedData {
        train: encoded.train.to_dataset(ctx.device),
        test: encoded.test.to_dataset(ctx.device),
        spec: DataSpec {
            input_shape: vec![cfg.seq_len as i64],
            classes: AGNEWS_CLASSES as i64,
            vocab_size: Some(encoded.vocab.len() as i64),
        },
        natural_partition: None,
    })
}

inventory::submit! {
    Component {
        name: AGNEWS,
        summary: "AG News, 120k/7.6k articles in 4 classes as basic_english token ids (CSV files in <data_dir>/agnews; \
                  params dir, train_samples, test_samples, vocab, max_vocab, seq_len)",
        paper: "Zhang, Zhao and LeCun, Character-level Convolutional Networks for Text Classification, NeurIPS 2015",
        defaults: defaults_of::<AgNewsConfig>,
        build: Builder::Dataset(|p, ctx| {
            let cfg: AgNewsConfig = p.parse_valid(AgNewsConfig::validate)?;
            load_agnews(&cfg, p, ctx)
        }),
        origin: module_path!(),
    }
}
