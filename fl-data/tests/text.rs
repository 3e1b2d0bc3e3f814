//! The text pipeline against hand-worked examples: torchtext's `basic_english` tokenizer (each
//! golden applies its replacement list by hand, written out in the comments), vocabulary order
//! with ties and caps, padding and truncation, and both vocabulary scopes.

use fl_data::text::{EncodedSplits, LabelledTexts, VocabScope, encode_splits, pad_or_truncate};
use fl_data::{Vocab, basic_english};

fn toks(text: &str) -> Vec<String> {
    basic_english(text)
}

#[test]
fn basic_english_goldens() {
    // Lower-case; `.` → " . ", `(` → " ( ", `)` → " ) "; split.
    assert_eq!(
        toks("Wall St. Bears Claw Back Into the Black (Reuters)"),
        ["wall", "st", ".", "bears", "claw", "back", "into", "the", "black", "(", "reuters", ")"]
    );
    // `'` → " '  ", `"` removed, `;` and `:` → " ", `!` → " ! ":
    // `he said: "it's over; done!"` → `he said  it '  s over  done ! ` → 8 tokens.
    assert_eq!(toks("He said: \"It's over; done!\""), ["he", "said", "it", "'", "s", "over", "done", "!"]);
    // `,` and `?` split off; `.` splits numbers and abbreviations; other symbols stay in words.
    assert_eq!(
        toks("U.S. (AP), 3.5% up? Short-sellers"),
        ["u", ".", "s", ".", "(", "ap", ")", ",", "3", ".", "5%", "up", "?", "short-sellers"]
    );
    // AG News writes apostrophes as the entity "#39;": the `;` separates.
    assert_eq!(toks("Bush #39;s plan"), ["bush", "#39", "s", "plan"]);
}

#[test]
fn basic_english_line_breaks_and_whitespace() {
    // `<br />` (after lower-casing) becomes a space: `line one . <br />line two?` → `line one .  line two ? `.
    assert_eq!(toks("Line one.<BR />Line \"two\"?"), ["line", "one", ".", "line", "two", "?"]);
    // Removing `"` runs before the `<br />` replacement, so it can complete one...
    assert_eq!(toks("a<br \"/>b"), ["a", "b"]);
    // ...while two spaces (collapsed only afterwards) or a tab do not match it.
    assert_eq!(toks("a<br  />b"), ["a<br", "/>b"]);
    assert_eq!(toks("a<br\t/>b"), ["a<br", "/>b"]);
    // Python's whitespace: tabs, newlines, U+00A0 and the separators U+001C..U+001F.
    assert_eq!(toks("  a\tb\nc\u{a0}d\u{1f}e  "), ["a", "b", "c", "d", "e"]);
    // Unicode lower-casing; an empty or blank text has no tokens.
    assert_eq!(toks("ÉCOLE Straße"), ["école", "straße"]);
    assert!(toks("").is_empty() && toks(" \" ; : ").is_empty());
}

#[test]
fn vocabulary_orders_by_count_then_lexicographically() {
    // Corpus: "the cat sat" / "the dog sat!" / "a cat, the end."
    // Counts: the 3; cat 2, sat 2; !, ",", ".", a, dog, end 1 each.
    // Order: <unk>; the; cat < sat; then the ties at 1 by code point: ! (0x21) , (0x2c) . (0x2e) a dog end.
    let docs: Vec<Vec<String>> = ["the cat sat", "the dog sat!", "a cat, the end."].iter().map(|t| toks(t)).collect();
    let v = Vocab::build(&docs, None);
    assert_eq!(v.tokens(), ["<unk>", "the", "cat", "sat", "!", ",", ".", "a", "dog", "end"]);
    assert_eq!((v.len(), v.id("the"), v.id("sat"), v.id("end"), v.id("zebra")), (10, 1, 3, 9, 0));
    // A cap keeps the most frequent ids, `<unk>` included.
    let capped = Vocab::build(&docs, Some(4));
    assert_eq!(capped.tokens(), ["<unk>", "the", "cat", "sat"]);
    assert_eq!(capped.id("dog"), 0);
    assert_eq!(Vocab::build(&docs, Some(1)).tokens(), ["<unk>"]);
}

#[test]
fn padding_and_truncation() {
    assert_eq!(pad_or_truncate([5, 6], 4), [5, 6, 0, 0]);
    assert_eq!(pad_or_truncate([5, 6, 7, 8, 9], 3), [5, 6, 7]);
    assert_eq!(pad_or_truncate([5, 6, 7], 3), [5, 6, 7]);
    let docs = vec![toks("b a b c")];
    let v = Vocab::build(&docs, None);
    // b 2, then a, c: <unk> 0, b 1, a 2, c 3.
    assert_eq!(v.encode(&toks("c b x"), 5), [3, 1, 0, 0, 0]);
    assert_eq!(v.encode(&toks("a a a a a a"), 2), [2, 2]);
}

/// The tiny corpus of `TINY_AGNEWS_*` in `tests/common` as texts: train "cat cat sat", "dog the
/// cat", "a dog sat, ok" (labels 0, 1, 2); test "zebra cat", "the zebra zebra" (labels 3, 1).
fn encode(scope: VocabScope, max_vocab: Option<usize>, seq_len: usize) -> EncodedSplits {
    let strings = |texts: &[&str]| texts.iter().map(|t| (*t).to_owned()).collect::<Vec<_>>();
    let train = strings(&["cat cat sat", "dog the cat", "a dog sat, ok"]);
    let test = strings(&["zebra cat", "the zebra zebra"]);
    encode_splits(
        LabelledTexts { texts: &train, labels: &[0, 1, 2] },
        LabelledTexts { texts: &test, labels: &[3, 1] },
        scope,
        max_vocab,
        seq_len,
    )
}

#[test]
fn both_splits_encode_with_one_vocabulary_of_the_chosen_scope() {
    // Train + test counts: cat 4, zebra 3, dog 2, sat 2, the 2, "," 1, a 1, ok 1.
    let e = encode(VocabScope::TrainTest, None, 4);
    assert_eq!(e.vocab.tokens(), ["<unk>", "cat", "zebra", "dog", "sat", "the", ",", "a", "ok"]);
    assert_eq!(e.train.ids, [1, 1, 4, 0, 3, 5, 1, 0, 7, 3, 4, 6]);
    assert_eq!(e.test.ids, [2, 1, 0, 0, 5, 2, 2, 0]);
    assert_eq!((e.train.labels.as_slice(), e.test.labels.as_slice()), (&[0, 1, 2][..], &[3, 1][..]));
    assert_eq!(e.train.row(2), [7, 3, 4, 6], "`ok` is cut by seq_len 4");

    // Train counts only: cat 3, dog 2, sat 2, "," a ok the 1; "zebra" is unknown (0) in test.
    let e = encode(VocabScope::Train, None, 4);
    assert_eq!(e.vocab.tokens(), ["<unk>", "cat", "dog", "sat", ",", "a", "ok", "the"]);
    assert_eq!(e.test.ids, [0, 1, 0, 0, 7, 0, 0, 0]);
    assert_eq!(e.train.row(2), [5, 2, 3, 4]);

    // A cap of 4 ids keeps <unk>, cat, zebra, dog.
    let e = encode(VocabScope::TrainTest, Some(4), 6);
    assert_eq!(e.vocab.len(), 4);
    assert_eq!(e.train.ids, [1, 1, 0, 0, 0, 0, 3, 0, 1, 0, 0, 0, 0, 3, 0, 0, 0, 0]);
}
