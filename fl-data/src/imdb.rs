//! IMDb movie reviews (Maas et al., "Learning Word Vectors for Sentiment Analysis", ACL 2011):
//! the reader of the official `aclImdb_v1.tar.gz` layout and the dataset component `imdb`,
//! binary sentiment as fixed-length token-id sequences (FedASMU's TextCNN task, spec §4.2).
//!
//! **Files.** `aclImdb/{train,test}/{neg,pos}/<id>_<rating>.txt`, one review a file, 12,500 per
//! directory; `neg` is label 0, `pos` label 1. A split is its `neg` files then its `pos` files,
//! each in sorted file-name order (byte order, as Python's `sorted(os.listdir(…))`: `10_2.txt`
//! before `1_3.txt`). `train/unsup/`, the `.feat` files, `imdb.vocab` and the URL lists are not
//! read. The reader looks in the dataset directory and in its `aclImdb/` subdirectory.
//!
//! **Pipeline.** Each review's text is tokenised like AG News with [`crate::text`]'s
//! `basic_english`, which replaces the reviews' `<br />` line breaks by spaces; the vocabulary
//! is built from the training split only: `<pad>` (id 0), `<unk>` (id 1), then the tokens by
//! descending count, ties lexicographically, at most `max_vocab` ids in all; each review is cut
//! or padded with 0 to `seq_len` ids.
//!
//! **Cache.** Reading 50,000 files is slow on a cold disk, so the encoded splits go into
//! `cache-train-v<max_vocab>-len<seq_len>.bin` (with the vocabulary) and
//! `cache-test-v<max_vocab>-len<seq_len>.bin` beside the data ([`crate::cache`]); later loads
//! with the same parameters read those. The two are rebuilt together, since the test ids
//! depend on the training vocabulary.
//!
//! Parameters of `imdb` (all optional):
//! - `dir`: the directory holding the files; default `<data_dir>/imdb` (or `<data_dir>/aclImdb`
//!   when only that exists).
//! - `train_samples`, `test_samples`: keep only the first n reviews of a split (all `neg`
//!   reviews come first: shuffle through the partitioner). The vocabulary is still built from
//!   the whole training split.
//! - `max_vocab`: ids in the vocabulary, `<pad>` and `<unk>` included; default 25,000.
//! - `seq_len`: ids per review, default 256.
//! - `verify`: check the files against their recorded SHA-256 sums first (default true).

use std::path::{Path, PathBuf};

use fl_core::registry::{Builder, Component, DataContext, Params, defaults_of};
use fl_core::{DataSpec, FederatedData, InvalidKey};
use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

use crate::cache::{self, CacheUse, Cached, Fingerprint, Lookup, Progress, Values};
use crate::error::{DataError, Result};
use crate::text::{LabelledTexts, Specials, TokenIds, VocabScope, encode_splits_with};

/// The dataset's name in the registry, the data directory and `fl data info`.
pub const IMDB: &str = "imdb";
/// The directory the official archive extracts to.
pub const IMDB_SUBDIR: &str = "aclImdb";
pub const IMDB_ARCHIVE: &str = "aclImdb_v1.tar.gz";
/// The official archive (the Stanford AI Lab's).
pub const IMDB_URL: &str = "https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz";
pub const IMDB_CLASSES: usize = 2;
/// Reviews in the official train and test splits.
pub const IMDB_SIZES: (usize, usize) = (25_000, 25_000);
/// The label directories in label order.
pub const LABEL_DIRS: [&str; 2] = ["neg", "pos"];
/// The split directories.
pub const SPLITS: [&str; 2] = ["train", "test"];

/// Where the files may be: `dir` itself or the archive's directory under it, in the order tried.
pub fn candidates(dir: &Path) -> [PathBuf; 2] {
    [dir.to_path_buf(), dir.join(IMDB_SUBDIR)]
}

/// The default directory: `<data_dir>/imdb`, or `<data_dir>/aclImdb` when only that exists
/// (the archive extracted straight into the data directory).
pub fn default_dir(data_dir: &Path) -> PathBuf {
    let named = data_dir.join(IMDB);
    let extracted = data_dir.join(IMDB_SUBDIR);
    if !named.exists() && extracted.join("train").is_dir() { extracted } else { named }
}

/// The four review directories, relative to the dataset's root.
fn review_dirs() -> Vec<String> {
    SPLITS.iter().flat_map(|s| LABEL_DIRS.iter().map(move |l| format!("{s}/{l}"))).collect()
}

/// The directory (`dir` or `dir/aclImdb`) holding `train/{neg,pos}` and `test/{neg,pos}`.
pub fn locate(dir: &Path) -> Result<PathBuf> {
    let needed = review_dirs();
    if let Some(found) = candidates(dir).into_iter().find(|d| needed.iter().all(|n| d.join(n).is_dir())) {
        return Ok(found);
    }
    let looked_in = candidates(dir).to_vec();
    let absent: Vec<String> =
        needed.iter().filter(|n| !looked_in.iter().any(|d| d.join(n).is_dir())).map(|n| format!("{n}/")).collect();
    let missing =
        if absent.is_empty() { format!("a directory holding all of {}", needed.join(", ")) } else { absent.join(", ") };
    Err(DataError::Missing {
        dataset: IMDB.into(),
        missing,
        looked_in,
        hint: format!(
            "download {IMDB_ARCHIVE} ({IMDB_URL}) and extract it in {} (it creates {IMDB_SUBDIR}/ there){}",
            dir.display(),
            dir.parent()
                .filter(|_| dir.file_name().is_some_and(|n| n == IMDB))
                .map(|p| format!(" or in {}", p.display()))
                .unwrap_or_default()
        ),
    })
}

/// Reviews of one split: `texts[i]` has label `labels[i]` (0 negative, 1 positive).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reviews {
    pub labels: Vec<i64>,
    pub texts: Vec<String>,
}

impl Reviews {
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    fn as_labelled(&self) -> LabelledTexts<'_> {
        LabelledTexts { texts: &self.texts, labels: &self.labels }
    }
}

/// The official train and test splits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImdbSplits {
    pub train: Reviews,
    pub test: Reviews,
}

/// The review files of `root/<split>/{neg,pos}` with their labels, in reading order.
pub fn list_split(root: &Path, split: &str) -> Result<Vec<(PathBuf, i64)>> {
    let mut out = Vec::new();
    for (label, l) in LABEL_DIRS.iter().enumerate() {
        let dir = root.join(split).join(l);
        let mut files = Vec::new();
        for entry in std::fs::read_dir(&dir).map_err(|e| DataError::io(&dir, e))? {
            let path = entry.map_err(|e| DataError::io(&dir, e))?.path();
            if path.extension().is_some_and(|e| e == "txt") && path.is_file() {
                files.push(path);
            }
        }
        files.sort();
        out.extend(files.into_iter().map(|p| (p, label as i64)));
    }
    Ok(out)
}

/// Reads the listed review files (UTF-8 text each).
pub fn read_reviews(files: &[(PathBuf, i64)], what: &str) -> Result<Reviews> {
    let mut progress = Progress::start(format!("reading {what}"), files.len());
    let mut reviews = Reviews { labels: Vec::with_capacity(files.len()), texts: Vec::with_capacity(files.len()) };
    for (path, label) in files {
        let bytes = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
        let text = String::from_utf8(bytes).map_err(|e| {
            DataError::format(
                path,
                "a review in UTF-8 text",
                format!("invalid UTF-8 at byte {}", e.utf8_error().valid_up_to()),
            )
        })?;
        reviews.labels.push(*label);
        reviews.texts.push(text);
        progress.tick();
    }
    Ok(reviews)
}

/// Reads both splits' texts from `dir` or `dir/aclImdb` (no cache: the cache holds token ids).
pub fn read_imdb(dir: &Path) -> Result<ImdbSplits> {
    let root = locate(dir)?;
    Ok(ImdbSplits {
        train: read_reviews(&list_split(&root, "train")?, "imdb train")?,
        test: read_reviews(&list_split(&root, "test")?, "imdb test")?,
    })
}

/// Parameters of `imdb`; see the module documentation.
#[derive(Debug, Clone, PartialEq, SmartDefault, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ImdbConfig {
    pub dir: Option<PathBuf>,
    pub train_samples: Option<usize>,
    pub test_samples: Option<usize>,
    #[default(25_000)]
    pub max_vocab: usize,
    #[default(256)]
    pub seq_len: usize,
    #[default(true)]
    pub verify: bool,
}

impl ImdbConfig {
    /// Checks the sizes; messages read `"key: what is wrong"`.
    pub fn validate(&self) -> std::result::Result<(), InvalidKey> {
        if self.seq_len == 0 {
            return Err(InvalidKey::new("seq_len", "expected at least 1"));
        }
        if self.max_vocab < 2 {
            return Err(InvalidKey::new(
                "max_vocab",
                "expected at least 2 (the vocabulary always holds `<pad>` and `<unk>`)",
            ));
        }
        Ok(())
    }
}

/// Both splits as token ids, the vocabulary's tokens in id order, and how each split was
/// obtained.
#[derive(Debug, Clone)]
pub struct ImdbEncoded {
    pub vocab: Vec<String>,
    pub train: TokenIds,
    pub test: TokenIds,
    pub train_cache: CacheUse,
    pub test_cache: CacheUse,
}

fn to_cached(ids: &TokenIds, extra: Vec<u8>) -> Cached {
    Cached {
        labels: ids.labels.iter().map(|&l| l as u8).collect(),
        sample_shape: vec![ids.seq_len],
        values: Values::U32(ids.ids.iter().map(|&i| i as u32).collect()),
        extra,
    }
}

/// The split in a cache hit, if its shape and values are the ones expected.
fn from_cached(c: Cached, seq_len: usize) -> std::result::Result<(TokenIds, Vec<u8>), Lookup> {
    if c.sample_shape != [seq_len] {
        return Err(Lookup::Damaged(format!("samples of shape {:?}, not [{seq_len}]", c.sample_shape)));
    }
    let Values::U32(ids) = c.values else { return Err(Lookup::Damaged("pixel bytes instead of token ids".into())) };
    let labels = c.labels.iter().map(|&l| i64::from(l)).collect();
    Ok((TokenIds { ids: ids.into_iter().map(i64::from).collect(), labels, seq_len }, c.extra))
}

/// Reads IMDb from `dir` (or `dir/aclImdb`) as token ids with `max_vocab` ids and `seq_len` ids
/// per review: from the caches when they are current, else from the review files (and cached).
pub fn load_imdb_ids(dir: &Path, max_vocab: usize, seq_len: usize) -> Result<ImdbEncoded> {
    let root = locate(dir)?;
    let train_files = list_split(&root, "train")?;
    let test_files = list_split(&root, "test")?;
    let mut fp = Fingerprint::default();
    for (path, _) in train_files.iter().chain(&test_files) {
        fp.file(&root, path)?;
    }
    let source = fp.finish();
    let params = format!("max_vocab {max_vocab}, seq_len {seq_len}");
    let name = |split: &str| format!("cache-{split}-v{max_vocab}-len{seq_len}.bin");
    let (train_path, test_path) = (root.join(name("train")), root.join(name("test")));
    let (train_what, test_what) = (format!("{IMDB} train, {params}"), format!("{IMDB} test, {params}"));
    let hit = |found: Lookup| match found {
        Lookup::Hit(c) => from_cached(c, seq_len),
        other => Err(other),
    };
    let train_found = hit(cache::lookup(&train_path, &train_what, &source)?);
    let test_found = hit(cache::lookup(&test_path, &test_what, &source)?);
    let (train_miss, test_miss) = match (train_found, test_found) {
        (Ok((train, extra)), Ok((test, _))) => {
            let vocab = String::from_utf8_lossy(&extra).split('\n').map(str::to_owned).collect();
            return Ok(ImdbEncoded { vocab, train, test, train_cache: CacheUse::Read, test_cache: CacheUse::Read });
        }
        (train, test) => (train.err(), test.err()),
    };
    let rebuild_use = |miss: &Option<Lookup>, path: &Path| match miss {
        Some(found) => {
            cache::note_rebuild(path, found);
            found.rebuild_use()
        }
        None => CacheUse::Rebuilt("rebuilt with the other split's cache".into()),
    };
    let train_cache = rebuild_use(&train_miss, &train_path);
    let test_cache = rebuild_use(&test_miss, &test_path);
    let splits =
        ImdbSplits { train: read_reviews(&train_files, "imdb train")?, test: read_reviews(&test_files, "imdb test")? };
    let encoded = encode_splits_with(
        splits.train.as_labelled(),
        splits.test.as_labelled(),
        VocabScope::Train,
        Some(max_vocab),
        seq_len,
        Specials::PadUnk,
    );
    let vocab = encoded.vocab.tokens().to_vec();
    cache::store(&train_path, &train_what, &source, &to_cached(&encoded.train, vocab.join("\n").into_bytes()));
    cache::store(&test_path, &test_what, &source, &to_cached(&encoded.test, Vec::new()));
    Ok(ImdbEncoded { vocab, train: encoded.train, test: encoded.test, train_cache, test_cache })
}

/// Reads IMDb from `cfg.dir` (default `<ctx.data_dir>/imdb`), keeps the first reviews as
/// asked and puts both splits on `ctx.device`.
pub fn load_imdb(cfg: &ImdbConfig, params: &Params, ctx: &DataContext) -> fl_core::Result<FederatedData> {
    let dir = cfg.dir.clone().unwrap_or_else(|| default_dir(&ctx.data_dir));
    if cfg.verify {
        crate::integrity::check(&dir)?;
    }
    let mut encoded = load_imdb_ids(&dir, cfg.max_vocab, cfg.seq_len)?;
    let limits = [
        ("train_samples", "train", cfg.train_samples, &mut encoded.train),
        ("test_samples", "test", cfg.test_samples, &mut encoded.test),
    ];
    for (key, which, keep, split) in limits {
        if let Some(n) = keep {
            if n > split.len() {
                return Err(params.invalid_key(InvalidKey::new(
                    key,
                    format!(
                        "asked for the first {n} reviews, but the {which} split in {} has {}",
                        dir.display(),
                        split.len()
                    ),
                )));
            }
            split.keep_first(n);
        }
    }
    Ok(FederatedData {
        train: encoded.train.to_dataset(ctx.device),
        test: encoded.test.to_dataset(ctx.device),
        spec: DataSpec {
            input_shape: vec![cfg.seq_len as i64],
            classes: IMDB_CLASSES as i64,
            vocab_size: Some(encoded.vocab.len() as i64),
        },
        natural_partition: None,
    })
}

inventory::submit! {
    Component {
        name: IMDB,
        summary: "IMDb reviews, 25k/25k, binary sentiment as basic_english token ids (aclImdb in <data_dir>/imdb, \
                  cached after the first read; params dir, train_samples, test_samples, max_vocab, seq_len)",
        paper: "Maas et al., Learning Word Vectors for Sentiment Analysis, ACL 2011",
        defaults: defaults_of::<ImdbConfig>,
        build: Builder::Dataset(|p, ctx| {
            let cfg: ImdbConfig = p.parse_valid(ImdbConfig::validate)?;
            load_imdb(&cfg, p, ctx)
        }),
        origin: module_path!(),
    }
}
