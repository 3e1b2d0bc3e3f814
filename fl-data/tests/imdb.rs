//! IMDb in the layout of `aclImdb_v1.tar.gz`, on a handful of review files written by the
//! test: file order, labels, `<br />` removal, the training-split vocabulary (order, cap,
//! `<pad>` and `<unk>`), cutting and padding, the cache, the registered `imdb` component,
//! `fl data info`, and errors that name the file and the expectation.
//!
//! The expected ids are worked out by hand. Training tokens (`basic_english`, `<br />` → space):
//! - neg/0_3.txt  "Bad bad movie.<br /><br />Awful!" → bad bad movie . awful !
//! - neg/10_2.txt "The plot was bad."                → the plot was bad .
//! - neg/1_1.txt  "Awful, the worst."                → awful , the worst .
//! - pos/2_9.txt  "A great movie!<br />Great."       → a great movie ! great .
//! - pos/3_10.txt "The best."                        → the best .
//!
//! (neg files in byte order: `0_3` < `10_2` < `1_1`.) Counts: `.` 5; bad 3, the 3; `!` 2,
//! awful 2, great 2, movie 2; `,` 1, a 1, best 1, plot 1, was 1, worst 1. By descending count,
//! ties in code-point order, after `<pad>` 0 and `<unk>` 1: `.` 2, bad 3, the 4, `!` 5, awful 6,
//! great 7, movie 8, `,` 9, a 10, best 11, plot 12, was 13, worst 14.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use fl_data::CacheUse;
use fl_data::imdb::{self, load_imdb_ids};

const TRAIN: [(&str, &str); 5] = [
    ("neg/1_1.txt", "Awful, the worst."),
    ("neg/0_3.txt", "Bad bad movie.<br /><br />Awful!"),
    ("neg/10_2.txt", "The plot was bad."),
    ("pos/3_10.txt", "The best."),
    ("pos/2_9.txt", "A great movie!<br />Great."),
];
/// Test reviews: `terrible` was never seen in training; the positive one is 10 tokens long.
const TEST: [(&str, &str); 3] = [
    ("neg/0_2.txt", "Terrible movie"),
    ("pos/1_7.txt", "A best."),
    ("pos/0_8.txt", "Great great great great great great great great great great"),
];
const VOCAB: [&str; 15] =
    ["<pad>", "<unk>", ".", "bad", "the", "!", "awful", "great", "movie", ",", "a", "best", "plot", "was", "worst"];

/// Writes the reviews under `root` (the `aclImdb` directory), with the archive's other files.
fn write_acl(root: &Path) {
    for (split, reviews) in [("train", &TRAIN[..]), ("test", &TEST[..])] {
        for (file, text) in reviews {
            write(&root.join(split).join(file), text.as_bytes());
        }
        write(&root.join(split).join("labeledBow.feat"), b"0:1 1:2\n");
        write(&root.join(split).join("urls_pos.txt"), b"http://example.invalid/\n");
    }
    write(&root.join("train/unsup/0_0.txt"), b"Unlabelled, never read.");
    write(&root.join("imdb.vocab"), b"the\nand\n");
}

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// A dataset directory `<tmp>/imdb` holding the archive's `aclImdb/`.
fn dataset() -> (tempfile::TempDir, PathBuf) {
    let t = tmp();
    let dir = t.path().join("imdb");
    write_acl(&dir.join("aclImdb"));
    (t, dir)
}

fn row(ids: &fl_data::TokenIds, i: usize) -> Vec<i64> {
    ids.row(i).to_vec()
}

#[test]
fn reviews_read_neg_then_pos_in_file_name_order() {
    let (_t, dir) = dataset();
    let splits = fl_data::read_imdb(&dir).unwrap();
    assert_eq!(splits.train.labels, [0, 0, 0, 1, 1]);
    assert_eq!(splits.train.texts[..3], [TRAIN[1].1, TRAIN[2].1, TRAIN[0].1]);
    assert_eq!(splits.train.texts[3..], [TRAIN[4].1, TRAIN[3].1]);
    assert_eq!(splits.test.labels, [0, 1, 1]);
    assert_eq!(splits.test.texts, [TEST[0].1, TEST[2].1, TEST[1].1]);
}

#[test]
fn ids_follow_the_training_vocabulary_with_padding_0_and_unknown_1() {
    let (_t, dir) = dataset();
    let e = load_imdb_ids(&dir, 25_000, 8).unwrap();
    assert_eq!(e.vocab, VOCAB);
    assert!(!e.vocab.iter().any(|t| t.contains("br")), "`<br />` is removed: {:?}", e.vocab);
    assert_eq!(e.train.labels, [0, 0, 0, 1, 1]);
    assert_eq!(row(&e.train, 0), [3, 3, 8, 2, 6, 5, 0, 0]);
    assert_eq!(row(&e.train, 1), [4, 12, 13, 3, 2, 0, 0, 0]);
    assert_eq!(row(&e.train, 2), [6, 9, 4, 14, 2, 0, 0, 0]);
    assert_eq!(row(&e.train, 3), [10, 7, 8, 5, 7, 2, 0, 0]);
    assert_eq!(row(&e.train, 4), [4, 11, 2, 0, 0, 0, 0, 0]);
    assert_eq!(e.test.labels, [0, 1, 1]);
    assert_eq!(
        row(&e.test, 0),
        [1, 8, 0, 0, 0, 0, 0, 0],
        "`terrible` is unknown: the vocabulary is the training split's"
    );
    assert_eq!(row(&e.test, 1), [7; 8], "10 tokens cut to 8");
    assert_eq!(row(&e.test, 2), [10, 11, 2, 0, 0, 0, 0, 0]);

    // A cap of 6 ids keeps <pad>, <unk> and the four most frequent tokens.
    let capped = load_imdb_ids(&dir, 6, 8).unwrap();
    assert_eq!(capped.vocab, VOCAB[..6]);
    assert_eq!(row(&capped.train, 0), [3, 3, 1, 2, 1, 5, 0, 0]);
    assert_eq!(row(&capped.test, 2), [1, 1, 2, 0, 0, 0, 0, 0]);
}

#[test]
fn the_second_load_reads_the_cache_and_a_damaged_cache_is_rebuilt() {
    let (_t, dir) = dataset();
    let root = dir.join("aclImdb");
    let first = load_imdb_ids(&dir, 100, 8).unwrap();
    assert_eq!((&first.train_cache, &first.test_cache), (&CacheUse::Built, &CacheUse::Built));
    let (train_cache, test_cache) = (root.join("cache-train-v100-len8.bin"), root.join("cache-test-v100-len8.bin"));
    assert!(train_cache.is_file() && test_cache.is_file());

    let second = load_imdb_ids(&dir, 100, 8).unwrap();
    assert_eq!((&second.train_cache, &second.test_cache), (&CacheUse::Read, &CacheUse::Read));
    assert_eq!((&second.vocab, &second.train, &second.test), (&first.vocab, &first.train, &first.test));

    // Other parameters: caches of their own.
    let other = load_imdb_ids(&dir, 100, 4).unwrap();
    assert_eq!(other.train_cache, CacheUse::Built);
    assert_eq!(row(&other.train, 0), [3, 3, 8, 2]);
    assert_eq!(load_imdb_ids(&dir, 100, 8).unwrap().train_cache, CacheUse::Read);

    // A flipped id byte in the test cache: both are rebuilt (the test ids depend on the
    // training vocabulary).
    let mut bytes = std::fs::read(&test_cache).unwrap();
    let at = bytes.len() - 5;
    bytes[at] ^= 1;
    std::fs::write(&test_cache, &bytes).unwrap();
    let rebuilt = load_imdb_ids(&dir, 100, 8).unwrap();
    assert!(matches!(&rebuilt.test_cache, CacheUse::Rebuilt(why) if why.contains("SHA-256")), "{rebuilt:?}");
    assert!(matches!(&rebuilt.train_cache, CacheUse::Rebuilt(why) if why.contains("other split")));
    assert_eq!((&rebuilt.vocab, &rebuilt.train, &rebuilt.test), (&first.vocab, &first.train, &first.test));
    assert_eq!(load_imdb_ids(&dir, 100, 8).unwrap().test_cache, CacheUse::Read);

    // A review added: stale.
    write(&root.join("train/pos/4_8.txt"), b"Zebras!");
    let grown = load_imdb_ids(&dir, 100, 8).unwrap();
    assert!(matches!(&grown.train_cache, CacheUse::Rebuilt(why) if why.contains("source files changed")));
    assert_eq!(grown.train.len(), 6);
}

#[test]
fn the_registered_component_gives_token_ids_and_the_vocabulary_size() {
    let (t, _dir) = dataset();
    let data = build_dataset("imdb", "seq_len = 8", t.path(), 0).unwrap();
    assert_eq!(data.train.x.size(), [5, 8]);
    assert_eq!(data.test.x.size(), [3, 8]);
    assert_eq!(data.train.x.kind(), fl_core::tch::Kind::Int64);
    assert_eq!((data.spec.classes, data.spec.vocab_size, &data.spec.input_shape[..]), (2, Some(15), &[8][..]));
    assert_eq!(Vec::<i64>::try_from(&data.train.y).unwrap(), [0, 0, 0, 1, 1]);
    let defaults = build_dataset("imdb", "max_vocab = 5\ntest_samples = 2", t.path(), 0).unwrap();
    assert_eq!(defaults.train.x.size(), [5, 256], "seq_len defaults to 256");
    assert_eq!((defaults.test.x.size()[0], defaults.spec.vocab_size), (2, Some(5)));
    let err = build_dataset("imdb", "train_samples = 9", t.path(), 0).unwrap_err().to_string();
    assert!(err.contains("train_samples") && err.contains("has 5"), "{err}");
    let err = build_dataset("imdb", "max_vocab = 1", t.path(), 0).unwrap_err().to_string();
    assert!(err.contains("max_vocab") && err.contains("<pad>"), "{err}");
}

#[test]
fn info_counts_the_reviews_and_a_missing_dataset_says_what_to_download() {
    let t = tmp();
    let info = fl_data::info("imdb", t.path()).unwrap();
    let fl_data::DataState::Missing(msg) = &info.state else { panic!("{info}") };
    let dir = t.path().join("imdb");
    assert!(msg.contains("aclImdb_v1.tar.gz") && msg.contains(&dir.display().to_string()), "{msg}");
    assert!(msg.contains("train/neg/"), "{msg}");
    assert_eq!(info.looked_in, [dir.clone(), dir.join("aclImdb")]);
    assert!(fl_data::fetch("imdb", t.path()).unwrap_err().to_string().contains("aclImdb_v1.tar.gz"));

    // Extracted straight into the data directory.
    write_acl(&t.path().join("aclImdb"));
    assert_eq!(imdb::default_dir(t.path()), t.path().join("aclImdb"));
    let info = fl_data::info("imdb", t.path()).unwrap();
    assert_eq!(
        info.state,
        fl_data::DataState::Present { train: 5, test: 3, train_per_class: vec![3, 2], verified_files: None }
    );
    assert_eq!(info.classes, 2);
    assert!(fl_data::fetch("imdb", t.path()).unwrap().already_present);
}

#[test]
fn malformed_files_are_errors_naming_the_file_and_the_expectation() {
    let (_t, dir) = dataset();
    let root = dir.join("aclImdb");
    std::fs::write(root.join("test/pos/1_7.txt"), b"caf\xe9").unwrap();
    let err = load_imdb_ids(&dir, 100, 8).unwrap_err().to_string();
    assert!(err.contains("1_7.txt") && err.contains("expected a review in UTF-8 text"), "{err}");

    std::fs::remove_dir_all(root.join("test/pos")).unwrap();
    let err = load_imdb_ids(&dir, 100, 8).unwrap_err().to_string();
    assert!(err.contains("test/pos/ not found") && err.contains("aclImdb_v1.tar.gz"), "{err}");
}
