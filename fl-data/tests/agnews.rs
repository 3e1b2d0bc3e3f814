//! AG News in its official CSV form, on small files written by the tests: RFC 4180 quoting,
//! label mapping, errors naming file and line, the registered `agnews` component (token ids,
//! vocabulary scopes and caps, sample limits, parameters) and `fl data info`.

mod common;

use common::*;
use fl_core::tch::{Kind, Tensor};
use fl_data::agnews::{self, read_agnews_csv};

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

fn ints(t: &Tensor) -> Vec<i64> {
    Vec::<i64>::try_from(&t.flatten(0, -1)).unwrap()
}

#[test]
fn quoted_fields_with_escaped_quotes_and_commas_read_back() {
    let dir = tmp();
    let path = dir.path().join("train.csv");
    // The official file's first record (its `\` is a literal backslash), then one with doubled
    // quotes and commas in both fields, then one written with CRLF and a line break inside a field.
    let mut text = agnews_csv(&[
        (
            "3",
            "Wall St. Bears Claw Back Into the Black (Reuters)",
            "Reuters - Short-sellers, Wall Street's dwindling\\band of ultra-cynics, are seeing green again.",
        ),
        ("1", "\"Quoted\", title", "say \"\"hi\"\", twice"),
    ]);
    text.push_str("\"2\",\"Two\r\nlines\",\"end\"\r\n");
    write(&path, text.as_bytes());
    let a = read_agnews_csv(&path).unwrap();
    assert_eq!(a.labels, [2, 0, 1]);
    assert_eq!(
        a.texts[0],
        "Wall St. Bears Claw Back Into the Black (Reuters) \
         Reuters - Short-sellers, Wall Street's dwindling\\band of ultra-cynics, are seeing green again."
    );
    assert_eq!(a.texts[1], "\"Quoted\", title say \"\"hi\"\", twice");
    assert_eq!(a.texts[2], "Two\r\nlines end");
}

#[test]
fn classes_one_to_four_become_labels_zero_to_three() {
    let dir = tmp();
    let path = dir.path().join("test.csv");
    let records: Vec<(&str, &str, &str)> = ["4", "1", "3", "2", "2"].iter().map(|c| (*c, "t", "d")).collect();
    write(&path, agnews_csv(&records).as_bytes());
    let a = read_agnews_csv(&path).unwrap();
    assert_eq!(a.labels, [3, 0, 2, 1, 1]);
    assert_eq!(a.class_counts(), [1, 2, 1, 1]);
}

#[test]
fn malformed_rows_name_the_file_the_line_and_what_was_expected() {
    let dir = tmp();
    let path = dir.path().join("train.csv");
    let good = agnews_record("1", "a", "b");
    let cases = [
        (
            format!("{good}{good}\"2\",\"only two\"\n"),
            "3 fields (\"class\",\"title\",\"description\") on line 3, found 2 fields",
        ),
        (format!("{good}\"5\",\"a\",\"b\"\n"), "a class in 1..4 on line 2, found `5`"),
        (format!("{good}\"World\",\"a\",\"b\"\n"), "a class in 1..4 on line 2, found `World`"),
        (format!("{good}\"1\",\"a\"b,\"c\"\n"), "on line 2"),
        (format!("{good}{good}\"1\",\"a\",\"never closed\n"), "closing `\"` for field 3 of the record on line 3"),
    ];
    for (text, want) in cases {
        write(&path, text.as_bytes());
        let err = read_agnews_csv(&path).unwrap_err().to_string();
        assert!(err.starts_with(&format!("{}: expected ", path.display())), "{err}");
        assert!(err.contains(want), "want {want:?} in: {err}");
    }
    write(&path, b"\"1\",\"a\",\"b\"\n\"2\",\"\xff\",\"c\"\n");
    let err = read_agnews_csv(&path).unwrap_err().to_string();
    assert!(err.contains("UTF-8") && err.contains("line 2"), "{err}");
}

#[test]
fn component_builds_token_ids_from_the_archive_layout() {
    let data_dir = tmp();
    // The archive's `ag_news_csv/` subdirectory is accepted under the dataset directory.
    write_tiny_agnews(&data_dir.path().join("agnews").join("ag_news_csv"));
    let data = build_dataset("agnews", "seq_len = 4", data_dir.path(), 0).unwrap();
    // Vocabulary over train + test (counts: cat 4, zebra 3, dog 2, sat 2, the 2, "," 1, a 1,
    // ok 1): <unk> 0, cat 1, zebra 2, dog 3, sat 4, the 5, "," 6, a 7, ok 8.
    assert_eq!(data.spec.vocab_size, Some(9));
    assert_eq!((data.spec.input_shape.as_slice(), data.spec.classes), (&[4i64][..], 4));
    assert_eq!(data.train.x.size(), [3, 4]);
    assert_eq!((data.train.x.kind(), data.train.y.kind()), (Kind::Int64, Kind::Int64));
    // [cat cat sat], [dog the cat], [a dog sat , ok] (truncated to 4), padded with 0.
    assert_eq!(ints(&data.train.x), [1, 1, 4, 0, 3, 5, 1, 0, 7, 3, 4, 6]);
    assert_eq!(ints(&data.test.x), [2, 1, 0, 0, 5, 2, 2, 0]);
    assert_eq!((ints(&data.train.y), ints(&data.test.y)), (vec![0, 1, 2], vec![3, 1]));
    assert!(data.natural_partition.is_none());
    // The default length is 200.
    let data = build_dataset("agnews", "", data_dir.path(), 0).unwrap();
    assert_eq!((data.train.x.size(), data.spec.input_shape), (vec![3, 200], vec![200]));
}

#[test]
fn train_only_vocabulary_maps_unseen_test_tokens_to_zero() {
    let data_dir = tmp();
    write_tiny_agnews(&data_dir.path().join("agnews"));
    let data = build_dataset("agnews", "vocab = \"train\"\nseq_len = 4", data_dir.path(), 0).unwrap();
    // Train counts: cat 3, dog 2, sat 2, then "," a ok the: <unk> 0, cat 1, dog 2, sat 3, "," 4,
    // a 5, ok 6, the 7. "zebra" appears only in test.
    assert_eq!(data.spec.vocab_size, Some(8));
    assert_eq!(ints(&data.test.x), [0, 1, 0, 0, 7, 0, 0, 0]);
    assert_eq!(ints(&data.train.x.get(2)), [5, 2, 3, 4]);
}

#[test]
fn sample_limits_keep_the_first_articles_and_the_full_vocabulary() {
    let data_dir = tmp();
    write_tiny_agnews(&data_dir.path().join("agnews"));
    let table = "train_samples = 2\ntest_samples = 1\nseq_len = 4";
    let data = build_dataset("agnews", table, data_dir.path(), 0).unwrap();
    assert_eq!(data.spec.vocab_size, Some(9), "the vocabulary still counts every article");
    assert_eq!(ints(&data.train.x), [1, 1, 4, 0, 3, 5, 1, 0]);
    assert_eq!(ints(&data.test.x), [2, 1, 0, 0]);
    assert_eq!((ints(&data.train.y), ints(&data.test.y)), (vec![0, 1], vec![3]));
    // A cap of 4 ids keeps <unk>, cat, zebra, dog; the rest encode to 0.
    let data = build_dataset("agnews", "max_vocab = 4\nseq_len = 4", data_dir.path(), 0).unwrap();
    assert_eq!(data.spec.vocab_size, Some(4));
    assert_eq!(ints(&data.train.x), [1, 1, 0, 0, 3, 0, 1, 0, 0, 3, 0, 0]);
}

#[test]
fn bad_parameters_are_errors_naming_the_key() {
    let data_dir = tmp();
    write_tiny_agnews(&data_dir.path().join("agnews"));
    let err = |table: &str| build_dataset("agnews", table, data_dir.path(), 0).unwrap_err().to_string();
    let e = err("train_samples = 4");
    assert!(e.contains("dataset.train_samples") && e.contains("has 3"), "{e}");
    let e = err("seq_length = 10");
    assert!(e.contains("seq_length"), "{e}");
    let e = err("vocab = \"all\"");
    assert!(e.contains("dataset.vocab"), "{e}");
    let e = err("seq_len = 0");
    assert!(e.contains("dataset.seq_len"), "{e}");
    let e = err("max_vocab = 0");
    assert!(e.contains("dataset.max_vocab"), "{e}");
}

#[test]
fn missing_agnews_says_where_it_looked_and_how_to_fetch() {
    let data_dir = tmp();
    let err = build_dataset("agnews", "", data_dir.path(), 0).unwrap_err().to_string();
    let dir = data_dir.path().join("agnews");
    assert!(err.contains(&dir.display().to_string()), "{err}");
    assert!(err.contains(&dir.join("ag_news_csv").display().to_string()), "{err}");
    assert!(err.contains("train.csv, test.csv"), "{err}");
    assert!(err.contains("fl data fetch agnews") && err.contains(agnews::AGNEWS_URL), "{err}");
}

#[test]
fn info_reports_counts_per_class_and_missing_files() {
    let data_dir = tmp();
    let missing = fl_data::info("agnews", data_dir.path()).unwrap();
    assert!(matches!(missing.state, fl_data::DataState::Missing(_)));
    assert_eq!(missing.looked_in.len(), 2);
    assert_eq!(missing.classes, 4);
    write_tiny_agnews(&data_dir.path().join("agnews"));
    let info = fl_data::info("agnews", data_dir.path()).unwrap();
    assert_eq!(
        info.state,
        fl_data::DataState::Present { train: 3, test: 2, train_per_class: vec![1, 1, 1, 0], verified_files: None }
    );
    let text = info.to_string();
    assert!(text.contains("status:   present") && text.contains("train:    3 samples"), "{text}");
}
