//! Data integrity: the SHA-256 of every file of a dataset, recorded when it is fetched (a
//! `SHA256SUMS` file in its directory, in `sha256sum`'s format, so `sha256sum -c` reads it too)
//! and checked by `fl data info` and before every load. (The fetch itself checks MNIST's and
//! Fashion-MNIST's files against the official sums in the code before it records them.)
//!
//! A file written over (random bytes on the pixels keep the IDX header valid, so the readers
//! cannot tell) then fails with its path and both sums instead of training on noise;
//! `[dataset] verify = false` trusts the files as they are.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{DataError, Result};
use crate::fetch::sha256_hex;

/// The name of the file that records a dataset directory's sums.
pub const SUMS_FILE: &str = "SHA256SUMS";

/// What checking a dataset directory found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Integrity {
    /// Every recorded file is there with its recorded sum.
    Verified { files: usize },
    /// No sums are recorded for this directory (files placed by hand); nothing was checked.
    Unrecorded,
}

/// Checks `dir` against its `SHA256SUMS`. A recorded file that is absent is left to the
/// reader, which names what is missing and how to get it.
pub fn check(dir: &Path) -> Result<Integrity> {
    let sums_path = dir.join(SUMS_FILE);
    if !sums_path.is_file() {
        return Ok(Integrity::Unrecorded);
    }
    let recorded = parse(&sums_path)?;
    let mut files = 0;
    for (file, expected) in &recorded {
        let path = dir.join(file);
        if !path.is_file() {
            continue;
        }
        let actual = sha256_hex(&path)?;
        if actual != *expected {
            return Err(DataError::Altered { path, expected: expected.clone(), actual, sums: sums_path });
        }
        files += 1;
    }
    Ok(Integrity::Verified { files })
}

/// Records the sums of every file under `dir` (its subdirectories included, `SHA256SUMS`
/// excluded) in `dir/SHA256SUMS`, written to a temporary file and renamed into place.
pub fn record(dir: &Path) -> Result<usize> {
    let mut files = Vec::new();
    collect(dir, dir, &mut files)?;
    files.sort();
    let mut text = String::new();
    for rel in &files {
        let name = rel.to_string_lossy().replace('\\', "/");
        text.push_str(&format!("{}  {name}\n", sha256_hex(&dir.join(rel))?));
    }
    let tmp = dir.join(format!(".{SUMS_FILE}.tmp"));
    let mut f = std::fs::File::create(&tmp).map_err(|e| DataError::io(&tmp, e))?;
    f.write_all(text.as_bytes()).and_then(|()| f.sync_all()).map_err(|e| DataError::io(&tmp, e))?;
    std::fs::rename(&tmp, dir.join(SUMS_FILE)).map_err(|e| DataError::io(dir.join(SUMS_FILE), e))?;
    Ok(files.len())
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).map_err(|e| DataError::io(dir, e))? {
        let path = entry.map_err(|e| DataError::io(dir, e))?.path();
        if path.is_dir() {
            collect(root, &path, out)?;
        } else if path.file_name().is_some_and(|n| n != SUMS_FILE && !n.to_string_lossy().starts_with('.')) {
            out.push(path.strip_prefix(root).expect("under the root").to_path_buf());
        }
    }
    Ok(())
}

/// `(file, sum)` pairs of a `SHA256SUMS` file: lines `<64 hex digits><two spaces or " *"><name>`.
fn parse(path: &Path) -> Result<Vec<(String, String)>> {
    let text = std::fs::read_to_string(path).map_err(|e| DataError::io(path, e))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, line)| {
            let (hash, name) = line.split_at_checked(64).unwrap_or((line, ""));
            let name = name.strip_prefix("  ").or_else(|| name.strip_prefix(" *"));
            match name {
                Some(name) if hash.bytes().all(|b| b.is_ascii_hexdigit()) && !name.is_empty() => {
                    Ok((name.to_string(), hash.to_ascii_lowercase()))
                }
                _ => Err(DataError::format(
                    path,
                    "lines of a SHA-256 in hex, two spaces and a file name",
                    format!("line {}: `{line}`", i + 1),
                )),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_sums_verify_and_a_changed_byte_fails_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("a.bin"), b"abc").unwrap();
        std::fs::write(dir.path().join("sub/b.bin"), b"hello").unwrap();
        assert_eq!(check(dir.path()).unwrap(), Integrity::Unrecorded);
        assert_eq!(record(dir.path()).unwrap(), 2);
        let sums = std::fs::read_to_string(dir.path().join(SUMS_FILE)).unwrap();
        // sha256("abc"), as `sha256sum` prints it.
        assert!(
            sums.starts_with("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad  a.bin\n"),
            "{sums}"
        );
        assert!(sums.contains("  sub/b.bin\n"));
        assert_eq!(check(dir.path()).unwrap(), Integrity::Verified { files: 2 });
        std::fs::write(dir.path().join("sub/b.bin"), b"hellO").unwrap();
        match check(dir.path()) {
            Err(DataError::Altered { path, .. }) => assert!(path.ends_with("sub/b.bin")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_malformed_record_is_a_format_error_naming_the_line() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.bin"), b"abc").unwrap();
        std::fs::write(dir.path().join(SUMS_FILE), "not a sum line\n").unwrap();
        let err = check(dir.path()).unwrap_err().to_string();
        assert!(err.contains("SHA256SUMS") && err.contains("line 1"), "{err}");
    }
}
