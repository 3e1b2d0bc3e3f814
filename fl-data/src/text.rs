//! Text into token ids: torchtext's `basic_english` tokenizer, a frequency-ordered vocabulary
//! (torchtext's `build_vocab_from_iterator`), and padding or truncation to a fixed length.
//! Together they reproduce the preprocessing of PFLlib's `generate_agnews.py`, which the
//! KDD '23 fastText experiments used (Wang et al., KDD '23, §6.1).
//!
//! **Tokenizer.** `basic_english` lower-cases the line, then applies these regular-expression
//! replacements in order and splits on whitespace: `'` → ` '  `, `"` → (nothing), `.` → ` . `,
//! `<br />` → ` `, `,` → ` , `, `(` → ` ( `, `)` → ` ) `, `!` → ` ! `, `?` → ` ? `, `;` → ` `,
//! `:` → ` `, whitespace runs → ` `. Every pattern is a literal, so the replacements reorder
//! freely as long as the removal of `"` (which can join text into a `<br />`) comes before the
//! `<br />` replacement, and no replacement creates or breaks a `<br />` otherwise. This module
//! therefore removes `"`, replaces `<br />`, and then splits in one pass: `' . , ( ) ! ?` are
//! tokens of their own, `;`, `:` and whitespace separate tokens. Lower-casing is Rust's
//! `to_lowercase` (full Unicode mappings, final sigma included, like Python's `str.lower`), and
//! whitespace is what Python's `str.split` splits on: Unicode `White_Space` plus the four ASCII
//! separators U+001C..U+001F.
//!
//! **Vocabulary.** `<unk>` has id 0; the other tokens follow by descending count, ties in
//! lexicographic (code point) order, as torchtext sorts `(-count, token)`. With a size cap the
//! most frequent tokens stay. Tokens outside the vocabulary encode to 0. Padding also uses 0,
//! as in PFLlib, so padding and `<unk>` share an id. With [`Specials::PadUnk`] (IMDb) padding
//! has an id of its own instead: `<pad>` is 0, `<unk>` 1, and the tokens follow from 2.

use std::collections::BTreeMap;

use fl_core::Dataset;
use serde::{Deserialize, Serialize};
use tch::{Device, Tensor};

/// The special token at id 0.
pub const UNK: &str = "<unk>";
/// The id of [`UNK`], of tokens outside the vocabulary, and of padding.
pub const UNK_ID: i64 = 0;
/// The padding token of [`Specials::PadUnk`] (id 0 there).
pub const PAD: &str = "<pad>";

/// The special tokens that lead a vocabulary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Specials {
    /// `<unk>` at id 0, which also pads (PFLlib's AG News).
    #[default]
    Unk,
    /// `<pad>` at id 0 and `<unk>` at id 1: padding and unknown tokens are told apart.
    PadUnk,
}

impl Specials {
    /// The special tokens in id order.
    pub fn tokens(self) -> &'static [&'static str] {
        match self {
            Specials::Unk => &[UNK],
            Specials::PadUnk => &[PAD, UNK],
        }
    }

    /// The id of tokens outside the vocabulary.
    pub fn unk_id(self) -> i64 {
        match self {
            Specials::Unk => UNK_ID,
            Specials::PadUnk => 1,
        }
    }

    /// The id that pads a short document.
    pub fn pad_id(self) -> i64 {
        0
    }
}

/// Whitespace as Python's `str.split()` and `re`'s `\s` see it.
fn is_python_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Characters that `basic_english` surrounds with spaces, so that each is a token.
fn is_split_punctuation(c: char) -> bool {
    matches!(c, '\'' | '.' | ',' | '(' | ')' | '!' | '?')
}

/// Calls `f` with each `basic_english` token of `text`, in order, without allocating a string
/// per token.
pub fn for_each_basic_english_token(text: &str, mut f: impl FnMut(&str)) {
    let mut line = text.to_lowercase();
    if line.contains('"') {
        line.retain(|c| c != '"');
    }
    if line.contains("<br />") {
        line = line.replace("<br />", " ");
    }
    let mut start = None;
    for (i, c) in line.char_indices() {
        let separator = is_python_space(c) || matches!(c, ';' | ':');
        if separator || is_split_punctuation(c) {
            if let Some(s) = start.take() {
                f(&line[s..i]);
            }
            if !separator {
                f(&line[i..i + c.len_utf8()]);
            }
        } else if start.is_none() {
            start = Some(i);
        }
    }
    if let Some(s) = start {
        f(&line[s..]);
    }
}

/// The `basic_english` tokens of `text`.
pub fn basic_english(text: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    for_each_basic_english_token(text, |t| tokens.push(t.to_owned()));
    tokens
}

/// Token strings numbered densely in order of first appearance, so that a corpus is tokenised
/// (and each token looked up) once, and everything after works on integers.
///
/// The lookup is a `HashMap` (the workspace bans it for its iteration order): it is never
/// iterated, and ids depend only on the order tokens arrive in. A `BTreeMap`'s string
/// comparisons made interning AG News's 5.5 million tokens take seconds.
#[derive(Debug, Clone, Default)]
#[allow(clippy::disallowed_types)] // reason: lookup only, never iterated
pub struct Interner {
    tokens: Vec<String>,
    ids: std::collections::HashMap<String, u32>,
}

impl Interner {
    /// The id of `token`, numbering it if it is new.
    pub fn intern(&mut self, token: &str) -> u32 {
        if let Some(&id) = self.ids.get(token) {
            return id;
        }
        let id = u32::try_from(self.tokens.len()).expect("fewer than 2^32 distinct tokens");
        self.tokens.push(token.to_owned());
        self.ids.insert(token.to_owned(), id);
        id
    }

    /// The id of `token`, if it has one.
    pub fn get(&self, token: &str) -> Option<u32> {
        self.ids.get(token).copied()
    }

    pub fn token(&self, id: u32) -> &str {
        &self.tokens[id as usize]
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
}

/// A vocabulary: the special tokens (`<unk>` at id 0 by default), then tokens by descending
/// count (ties lexicographically).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vocab {
    /// Tokens by id; `tokens[0]` is [`UNK`] (or [`PAD`]).
    tokens: Vec<String>,
    ids: BTreeMap<String, i64>,
    specials: Specials,
}

impl Vocab {
    /// The vocabulary of `counts` (distinct tokens, each with its count): the tokens with a count
    /// of at least 1 (torchtext's `min_freq = 1`),
    /// keeping at most `max_size` entries, `<unk>` included (torchtext's `max_tokens`). A
    /// corpus token spelled `<unk>` is the special token itself and takes no second entry.
    ///
    /// # Panics
    /// If `max_size` is `Some(0)`: the vocabulary always holds `<unk>`.
    pub fn from_counts<'a>(counts: impl IntoIterator<Item = (&'a str, u64)>, max_size: Option<usize>) -> Vocab {
        Vocab::from_counts_with(counts, max_size, Specials::Unk)
    }

    /// [`Vocab::from_counts`] led by `specials`, which `max_size` counts. A corpus token spelled
    /// like a special token takes no entry of its own; `<pad>` in a text encodes to `<unk>`, so
    /// that only padding has the padding id.
    ///
    /// # Panics
    /// If `max_size` is below the number of special tokens.
    pub fn from_counts_with<'a>(
        counts: impl IntoIterator<Item = (&'a str, u64)>,
        max_size: Option<usize>,
        specials: Specials,
    ) -> Vocab {
        let lead = specials.tokens();
        assert!(max_size.is_none_or(|m| m >= lead.len()), "a vocabulary holds at least its special tokens {lead:?}");
        let mut sorted: Vec<(&str, u64)> = counts.into_iter().filter(|&(t, c)| c > 0 && !lead.contains(&t)).collect();
        sorted.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        if let Some(max) = max_size {
            sorted.truncate(max - lead.len());
        }
        let tokens: Vec<String> =
            lead.iter().copied().chain(sorted.iter().map(|&(t, _)| t)).map(str::to_owned).collect();
        let ids = tokens.iter().enumerate().filter(|(_, t)| *t != PAD).map(|(i, t)| (t.clone(), i as i64)).collect();
        Vocab { tokens, ids, specials }
    }

    /// The vocabulary of tokenised documents (counts every occurrence).
    pub fn build<S: AsRef<str>>(docs: &[Vec<S>], max_size: Option<usize>) -> Vocab {
        let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
        for token in docs.iter().flatten() {
            *counts.entry(token.as_ref()).or_default() += 1;
        }
        Vocab::from_counts(counts, max_size)
    }

    /// Number of ids, `<unk>` included.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Always false: `<unk>` is always there.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The id of `token`, or the `<unk>` id ([`UNK_ID`] by default) outside the vocabulary.
    pub fn id(&self, token: &str) -> i64 {
        self.ids.get(token).copied().unwrap_or(self.specials.unk_id())
    }

    /// The special tokens this vocabulary starts with.
    pub fn specials(&self) -> Specials {
        self.specials
    }

    /// Tokens in id order.
    pub fn tokens(&self) -> &[String] {
        &self.tokens
    }

    /// The ids of `tokens`, truncated or padded with the padding id (0) to `seq_len`.
    pub fn encode<S: AsRef<str>>(&self, tokens: &[S], seq_len: usize) -> Vec<i64> {
        pad_or_truncate(tokens.iter().map(|t| self.id(t.as_ref())), seq_len)
    }
}

/// The first `seq_len` of `ids`, padded with [`UNK_ID`] when there are fewer.
pub fn pad_or_truncate(ids: impl IntoIterator<Item = i64>, seq_len: usize) -> Vec<i64> {
    let mut out: Vec<i64> = ids.into_iter().take(seq_len).collect();
    out.resize(seq_len, UNK_ID);
    out
}

/// Which split's documents the vocabulary is built from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VocabScope {
    /// Train and test documents (PFLlib's `generate_agnews.py`; 98,635 ids on AG News).
    #[default]
    TrainTest,
    /// Training documents only: test tokens never seen in training encode to 0.
    Train,
}

/// Labelled documents of one split as fixed-length token-id rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenIds {
    /// `len() × seq_len` ids, row after row.
    pub ids: Vec<i64>,
    pub labels: Vec<i64>,
    pub seq_len: usize,
}

impl TokenIds {
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The ids of document `i`.
    pub fn row(&self, i: usize) -> &[i64] {
        &self.ids[i * self.seq_len..(i + 1) * self.seq_len]
    }

    /// Keeps the first `n` documents (all of them when there are fewer).
    pub fn keep_first(&mut self, n: usize) {
        self.labels.truncate(n);
        self.ids.truncate(n * self.seq_len);
    }

    /// int64 ids `[n, seq_len]` and int64 labels `[n]` on `device`.
    pub fn to_dataset(&self, device: Device) -> Dataset {
        let x = Tensor::from_slice(&self.ids).view([self.len() as i64, self.seq_len as i64]).to_device(device);
        let y = Tensor::from_slice(&self.labels).to_device(device);
        Dataset { x, y }
    }
}

/// A labelled split as text: `texts[i]` has class `labels[i]`.
#[derive(Debug, Clone, Copy)]
pub struct LabelledTexts<'a> {
    pub texts: &'a [String],
    pub labels: &'a [i64],
}

/// Both splits encoded with one vocabulary.
#[derive(Debug, Clone)]
pub struct EncodedSplits {
    pub vocab: Vocab,
    pub train: TokenIds,
    pub test: TokenIds,
}

/// Tokenises both splits with `basic_english`, builds the vocabulary over `scope` (capped at
/// `max_vocab` ids, `<unk>` included), and encodes every document to `seq_len` ids.
///
/// Each document is tokenised once and each token looked up once: tokens are interned while
/// counting, and the vocabulary's ids replace the interned ones at the end.
///
/// # Panics
/// If `max_vocab` is `Some(0)` or the labels and texts of a split differ in length.
pub fn encode_splits(
    train: LabelledTexts,
    test: LabelledTexts,
    scope: VocabScope,
    max_vocab: Option<usize>,
    seq_len: usize,
) -> EncodedSplits {
    encode_splits_with(train, test, scope, max_vocab, seq_len, Specials::Unk)
}

/// [`encode_splits`] with a vocabulary led by `specials` (padding with [`Specials::pad_id`]).
///
/// # Panics
/// If `max_vocab` is below the number of special tokens or the labels and texts of a split
/// differ in length.
pub fn encode_splits_with(
    train: LabelledTexts,
    test: LabelledTexts,
    scope: VocabScope,
    max_vocab: Option<usize>,
    seq_len: usize,
    specials: Specials,
) -> EncodedSplits {
    let mut interner = Interner::default();
    // counts[t][0]: occurrences of interned token t in train, counts[t][1] in test.
    let mut counts: Vec<[u64; 2]> = Vec::new();
    let mut interned: [Vec<u32>; 2] = [Vec::new(), Vec::new()];
    for (split, part) in [train, test].into_iter().enumerate() {
        assert_eq!(part.texts.len(), part.labels.len(), "encode_splits: one label per text");
        let rows = &mut interned[split];
        rows.reserve(part.texts.len() * seq_len);
        for text in part.texts {
            let mut kept = 0;
            for_each_basic_english_token(text, |token| {
                let id = interner.intern(token);
                if id as usize == counts.len() {
                    counts.push([0, 0]);
                }
                counts[id as usize][split] += 1;
                if kept < seq_len {
                    rows.push(id);
                    kept += 1;
                }
            });
            // Padding rows with a marker the remapping below turns into the padding id.
            rows.resize(rows.len() + seq_len - kept, u32::MAX);
        }
    }
    let in_scope = |c: &[u64; 2]| match scope {
        VocabScope::TrainTest => c[0] + c[1],
        VocabScope::Train => c[0],
    };
    let vocab = Vocab::from_counts_with(
        counts.iter().enumerate().map(|(t, c)| (interner.token(t as u32), in_scope(c))),
        max_vocab,
        specials,
    );
    let final_id: Vec<i64> = (0..interner.len()).map(|t| vocab.id(interner.token(t as u32))).collect();
    let [train_rows, test_rows] = interned;
    let pad = specials.pad_id();
    let remap = |rows: Vec<u32>, labels: &[i64]| TokenIds {
        ids: rows.into_iter().map(|t| if t == u32::MAX { pad } else { final_id[t as usize] }).collect(),
        labels: labels.to_vec(),
        seq_len,
    };
    EncodedSplits { train: remap(train_rows, train.labels), test: remap(test_rows, test.labels), vocab }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interner_numbers_tokens_in_first_seen_order() {
        let mut i = Interner::default();
        assert_eq!(i.get("b"), None);
        assert_eq!([i.intern("b"), i.intern("a"), i.intern("b")], [0, 1, 0]);
        assert_eq!((i.len(), i.token(1), i.get("a"), i.get("c")), (2, "a", Some(1), None));
        // Past several doublings of the table every token keeps its id.
        let words: Vec<String> = (0..5_000).map(|k| format!("w{k}")).collect();
        for w in &words {
            i.intern(w);
        }
        assert_eq!(i.len(), 5_002);
        assert!(words.iter().enumerate().all(|(k, w)| i.get(w) == Some(k as u32 + 2) && i.token(k as u32 + 2) == w));
        assert_eq!(i.intern("a"), 1);
    }

    #[test]
    fn pad_unk_vocabularies_pad_with_0_and_encode_unknown_and_literal_pad_tokens_as_1() {
        let v = Vocab::from_counts_with([("<pad>", 9), ("b", 2), ("a", 2), ("c", 1)], Some(4), Specials::PadUnk);
        assert_eq!(v.tokens(), ["<pad>", "<unk>", "a", "b"]);
        assert_eq!([v.id("a"), v.id("b"), v.id("c"), v.id("<pad>"), v.id("<unk>")], [2, 3, 1, 1, 1]);
        assert_eq!(v.encode(&["b", "c"], 4), [3, 1, 0, 0]);
    }

    #[test]
    fn a_corpus_token_spelled_unk_is_the_special_token() {
        let v = Vocab::from_counts([("<unk>", 5), ("a", 1)], None);
        assert_eq!(v.tokens(), ["<unk>", "a"]);
        assert_eq!(v.id("<unk>"), 0);
    }
}
