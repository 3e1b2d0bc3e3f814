//! Caches of decoded datasets: a dataset whose official files are slow to read (Tiny-ImageNet's
//! 110,000 JPEGs, IMDb's 50,000 review files) is decoded once into one file per split beside
//! the data, and later loads read that file.
//!
//! **Format** (integers little-endian):
//! ```text
//! magic        8 bytes  "FLCACHE1"
//! what         u32 length + UTF-8 (the dataset, split and parameters, e.g. "tiny-imagenet train")
//! source       32 bytes (SHA-256 fingerprint of the source files, see [`Fingerprint`])
//! element      u8       (1: u8 values, 4: u32 values)
//! count        u64      (samples)
//! ndim         u32, then ndim u64 (the shape of one sample)
//! extra        u64      (length of the extra bytes)
//! sha256       32 bytes (SHA-256 of everything after the header)
//! labels       count bytes
//! values       count × Π shape × element bytes
//! extra        the extra bytes (IMDb: the vocabulary, one token a line)
//! ```
//! A cache whose `what` or `source` differs from the expected one is *stale* (other parameters,
//! or source files added, removed or resized since), one whose body does not match its length
//! or SHA-256 is *damaged*; either is rebuilt from the source files with a note on stderr.
//! Caches are written to a hidden temporary file (one per process) and renamed into place, so
//! an interrupted build leaves no half-written cache and concurrent builds do not mix; a directory that cannot be written (read-only shared
//! data) only costs the decoding on every load, with a warning.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::{DataError, Result};

/// The first bytes of every cache file (the last digit is the format's version).
pub const MAGIC: &[u8; 8] = b"FLCACHE1";

/// The cached values of one split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Values {
    U8(Vec<u8>),
    U32(Vec<u32>),
}

impl Values {
    fn element(&self) -> u8 {
        match self {
            Values::U8(_) => 1,
            Values::U32(_) => 4,
        }
    }

    fn len(&self) -> usize {
        match self {
            Values::U8(v) => v.len(),
            Values::U32(v) => v.len(),
        }
    }
}

/// What a cache file holds: one label byte per sample, the samples' values and extra bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cached {
    pub labels: Vec<u8>,
    /// The shape of one sample (`[3, 64, 64]`, `[seq_len]`).
    pub sample_shape: Vec<usize>,
    pub values: Values,
    pub extra: Vec<u8>,
}

/// How a load got its split: from the cache, or by decoding the source files (and why).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheUse {
    /// The cache was read.
    Read,
    /// There was no cache; the source files were decoded and the cache written.
    Built,
    /// The cache was stale or damaged (the reason says which and why) and was rebuilt.
    Rebuilt(String),
}

/// What looking a cache up found.
#[derive(Debug)]
pub enum Lookup {
    Hit(Cached),
    Absent,
    /// Another dataset, split, parameters or source files.
    Stale(String),
    /// Truncated, or bytes changed.
    Damaged(String),
}

impl Lookup {
    /// The [`CacheUse`] of a rebuild after this lookup (which was not a hit).
    pub fn rebuild_use(&self) -> CacheUse {
        match self {
            Lookup::Hit(_) | Lookup::Absent => CacheUse::Built,
            Lookup::Stale(why) | Lookup::Damaged(why) => CacheUse::Rebuilt(why.clone()),
        }
    }
}

/// A SHA-256 over the source files a cache derives from: the contents of the small index
/// files (class lists, annotations) and each data file's relative path and size. Files edited
/// in place at the same size go unnoticed; `SHA256SUMS` ([`crate::integrity`]) is the check
/// for those.
#[derive(Debug, Clone, Default)]
pub struct Fingerprint(Sha256);

impl Fingerprint {
    /// Adds a small file's name and whole contents.
    pub fn contents(&mut self, name: &str, bytes: &[u8]) {
        self.0.update(format!("{name}\0{}\0", bytes.len()).as_bytes());
        self.0.update(bytes);
    }

    /// Adds a data file's path (relative to the dataset root) and size.
    pub fn file(&mut self, root: &Path, path: &Path) -> Result<()> {
        let size = std::fs::metadata(path).map_err(|e| DataError::io(path, e))?.len();
        let rel = path.strip_prefix(root).unwrap_or(path);
        self.0.update(format!("{}\0{size}\n", rel.display()).as_bytes());
        Ok(())
    }

    pub fn finish(self) -> [u8; 32] {
        self.0.finalize().into()
    }
}

/// `n` bytes (the callers bound `n` by the file's size before asking for a large one).
fn read_exact(r: &mut impl Read, n: usize, what: &str) -> std::result::Result<Vec<u8>, String> {
    let mut buf = Vec::with_capacity(n);
    r.take(n as u64).read_to_end(&mut buf).map_err(|e| format!("reading the {what}: {e}"))?;
    if buf.len() != n {
        return Err(format!("truncated in the {what} ({} of {n} bytes)", buf.len()));
    }
    Ok(buf)
}

fn u32_at(b: &[u8]) -> u32 {
    u32::from_le_bytes(b[..4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8]) -> u64 {
    u64::from_le_bytes(b[..8].try_into().expect("8 bytes"))
}

/// Looks up the cache at `path`, expecting `what` built from sources with fingerprint `source`.
/// Only an I/O error other than "not found" on opening is an error; anything wrong inside the
/// file is a [`Lookup::Stale`] or [`Lookup::Damaged`] that says what.
pub fn lookup(path: &Path, what: &str, source: &[u8; 32]) -> Result<Lookup> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Lookup::Absent),
        Err(e) => return Err(DataError::io(path, e)),
    };
    let file_len = file.metadata().map_err(|e| DataError::io(path, e))?.len();
    let mut r = BufReader::new(file);
    match read_body(&mut r, file_len, what, source) {
        Ok(lookup) => Ok(lookup),
        Err(why) => Ok(Lookup::Damaged(why)),
    }
}

fn read_body(r: &mut impl Read, file_len: u64, what: &str, source: &[u8; 32]) -> std::result::Result<Lookup, String> {
    let magic = read_exact(r, 8, "magic number")?;
    if magic != MAGIC {
        return Ok(Lookup::Damaged(format!("it does not start with {:?}", String::from_utf8_lossy(MAGIC))));
    }
    let what_len = u32_at(&read_exact(r, 4, "header")?) as usize;
    if what_len > 4096 {
        return Ok(Lookup::Damaged(format!("a {what_len}-byte description in the header")));
    }
    let found_what = String::from_utf8_lossy(&read_exact(r, what_len, "header")?).into_owned();
    if found_what != what {
        return Ok(Lookup::Stale(format!("it holds `{found_what}`, not `{what}`")));
    }
    if read_exact(r, 32, "header")? != source {
        return Ok(Lookup::Stale("the source files changed since it was built".into()));
    }
    let fixed = read_exact(r, 1 + 8 + 4, "header")?;
    let (element, count, ndim) = (fixed[0], u64_at(&fixed[1..]), u32_at(&fixed[9..]) as usize);
    if !matches!(element, 1 | 4) || ndim > 8 {
        return Ok(Lookup::Damaged(format!("element size {element} and {ndim} dimensions in the header")));
    }
    let dims = read_exact(r, 8 * ndim, "header")?;
    let shape: Vec<u64> = dims.chunks_exact(8).map(u64_at).collect();
    let rest = read_exact(r, 8 + 32, "header")?;
    let extra_len = u64_at(&rest);
    let expected_sha: [u8; 32] = rest[8..].try_into().expect("32 bytes");
    // The body's length, computed without overflow on a damaged header.
    let values_len = shape.iter().try_fold(count, |a, &d| a.checked_mul(d)).and_then(|v| v.checked_mul(element.into()));
    let header_len = (8 + 4 + what_len + 32 + 13 + 8 * ndim + 40) as u64;
    let body_len = values_len.and_then(|v| v.checked_add(count)).and_then(|v| v.checked_add(extra_len));
    let Some(body_len) = body_len.filter(|&b| b.checked_add(header_len) == Some(file_len)) else {
        return Ok(Lookup::Damaged(format!(
            "{file_len} bytes, which is not the header's {count} samples of shape {shape:?} and {extra_len} extra bytes"
        )));
    };
    let values_len = values_len.expect("checked above") as usize;
    let mut sha = Sha256::new();
    let labels = read_exact(r, count as usize, "labels")?;
    sha.update(&labels);
    let raw = read_exact(r, values_len, "values")?;
    sha.update(&raw);
    let extra = read_exact(r, extra_len as usize, "extra bytes")?;
    sha.update(&extra);
    debug_assert_eq!(labels.len() + raw.len() + extra.len(), body_len as usize);
    if <[u8; 32]>::from(sha.finalize()) != expected_sha {
        return Ok(Lookup::Damaged("its contents do not match the SHA-256 in its header".into()));
    }
    let values = match element {
        1 => Values::U8(raw),
        _ => Values::U32(raw.chunks_exact(4).map(u32_at).collect()),
    };
    Ok(Lookup::Hit(Cached { labels, sample_shape: shape.iter().map(|&d| d as usize).collect(), values, extra }))
}

/// Writes `cached` to `path` (through a hidden temporary file renamed into place).
pub fn write(path: &Path, what: &str, source: &[u8; 32], cached: &Cached) -> Result<()> {
    let per_sample: usize = cached.sample_shape.iter().product();
    assert_eq!(cached.values.len(), cached.labels.len() * per_sample, "one sample of values per label");
    let raw: std::borrow::Cow<[u8]> = match &cached.values {
        Values::U8(v) => v.as_slice().into(),
        Values::U32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>().into(),
    };
    let mut sha = Sha256::new();
    sha.update(&cached.labels);
    sha.update(&raw);
    sha.update(&cached.extra);
    let mut header = Vec::new();
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&(what.len() as u32).to_le_bytes());
    header.extend_from_slice(what.as_bytes());
    header.extend_from_slice(source);
    header.push(cached.values.element());
    header.extend_from_slice(&(cached.labels.len() as u64).to_le_bytes());
    header.extend_from_slice(&(cached.sample_shape.len() as u32).to_le_bytes());
    for &d in &cached.sample_shape {
        header.extend_from_slice(&(d as u64).to_le_bytes());
    }
    header.extend_from_slice(&(cached.extra.len() as u64).to_le_bytes());
    header.extend_from_slice(&sha.finalize());
    let tmp = hidden_tmp(path);
    let written = (|| {
        let mut w = BufWriter::new(File::create(&tmp)?);
        for part in [&header[..], &cached.labels, &raw, &cached.extra] {
            w.write_all(part)?;
        }
        w.into_inner().map_err(|e| e.into_error())?.sync_all()
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(DataError::io(&tmp, e));
    }
    std::fs::rename(&tmp, path).map_err(|e| DataError::io(path, e))
}

/// A hidden temporary name beside `path`, one per process, so that jobs building the same cache
/// at once (an array of runs started together) never write into one file.
fn hidden_tmp(path: &Path) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!(".{name}.{}.tmp", std::process::id()))
}

/// Writes a freshly built cache; a failure (a read-only data directory) is a warning, since
/// the data are in memory anyway.
pub fn store(path: &Path, what: &str, source: &[u8; 32], cached: &Cached) {
    if let Err(e) = write(path, what, source, cached) {
        eprintln!("warning: could not write the cache of {what} ({e}); the files will be decoded again next time");
    }
}

/// Says on stderr why a cache is rebuilt (nothing for a first build).
pub fn note_rebuild(path: &Path, lookup: &Lookup) {
    match lookup {
        Lookup::Stale(why) => eprintln!("note: {} is stale ({why}); rebuilding it", path.display()),
        Lookup::Damaged(why) => eprintln!("note: {} is damaged ({why}); rebuilding it", path.display()),
        Lookup::Hit(_) | Lookup::Absent => {}
    }
}

/// Progress of a long decode on stderr: a line at the start and one as each tenth is passed
/// (one line per file at most), so that it reads the same in a terminal and in a batch job's
/// log.
#[derive(Debug)]
pub struct Progress {
    /// What is done and to what, e.g. "decoding tiny-imagenet train".
    doing: String,
    total: usize,
    done: usize,
    next_tenth: usize,
}

impl Progress {
    pub fn start(doing: impl Into<String>, total: usize) -> Self {
        let doing = doing.into();
        eprintln!("{doing}: {total} files");
        Progress { doing, total, done: 0, next_tenth: 1 }
    }

    pub fn tick(&mut self) {
        self.done += 1;
        let passed = (self.done * 10 / self.total.max(1)).min(10);
        if passed >= self.next_tenth {
            eprintln!("{}: {}% ({}/{})", self.doing, passed * 10, self.done, self.total);
            self.next_tenth = passed + 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Cached {
        Cached {
            labels: vec![1, 0],
            sample_shape: vec![3],
            values: Values::U32(vec![1, 2, 3, 4, 5, 70_000]),
            extra: b"ab".to_vec(),
        }
    }

    #[test]
    fn a_written_cache_reads_back_and_a_flipped_byte_or_another_key_is_noticed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cache-train.bin");
        let source = [7; 32];
        assert!(matches!(lookup(&path, "x train", &source).unwrap(), Lookup::Absent));
        write(&path, "x train", &source, &sample()).unwrap();
        assert!(matches!(lookup(&path, "x train", &source).unwrap(), Lookup::Hit(c) if c == sample()));
        assert!(matches!(lookup(&path, "x test", &source).unwrap(), Lookup::Stale(w) if w.contains("x train")));
        assert!(matches!(lookup(&path, "x train", &[8; 32]).unwrap(), Lookup::Stale(_)));
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 3;
        bytes[last] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert!(matches!(lookup(&path, "x train", &source).unwrap(), Lookup::Damaged(w) if w.contains("SHA-256")));
        std::fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
        assert!(matches!(lookup(&path, "x train", &source).unwrap(), Lookup::Damaged(w) if w.contains("bytes")));
        std::fs::write(&path, b"FLCACHE").unwrap();
        assert!(matches!(lookup(&path, "x train", &source).unwrap(), Lookup::Damaged(w) if w.contains("truncated")));
    }

    #[test]
    fn progress_reaches_every_tenth_once() {
        let mut p = Progress::start("t", 3);
        for _ in 0..3 {
            p.tick();
        }
        assert_eq!(p.next_tenth, 11);
    }
}
