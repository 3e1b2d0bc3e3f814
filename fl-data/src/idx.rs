//! Reader of the IDX format of MNIST and Fashion-MNIST, raw or gzipped.
//!
//! An IDX file is a big-endian header (magic `0x0000_08DD`: type 0x08 = unsigned byte, DD =
//! number of dimensions; then one u32 per dimension) followed by the values in row-major order.
//! Images have magic `0x0000_0803` (count, rows, cols), labels `0x0000_0801` (count). Every
//! check names the file and what it expected, because these files come from outside.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::error::{DataError, Result};

/// Magic number of an IDX file of unsigned bytes with three dimensions (images).
pub const IMAGES_MAGIC: u32 = 0x0000_0803;
/// Magic number of an IDX file of unsigned bytes with one dimension (labels).
pub const LABELS_MAGIC: u32 = 0x0000_0801;

/// The contents of an IDX image file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdxImages {
    pub count: usize,
    pub rows: usize,
    pub cols: usize,
    /// `count * rows * cols` bytes, image after image, row-major.
    pub pixels: Vec<u8>,
}

/// `dir/name` if it exists, else `dir/name.gz` if that exists.
pub fn find(dir: &Path, name: &str) -> Option<PathBuf> {
    let plain = dir.join(name);
    if plain.is_file() {
        return Some(plain);
    }
    let gz = dir.join(format!("{name}.gz"));
    gz.is_file().then_some(gz)
}

/// The file's bytes, decompressed when they start with the gzip magic (whatever the name).
pub fn read_maybe_gzipped(path: &Path) -> Result<Vec<u8>> {
    let bytes = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
    if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::with_capacity(bytes.len() * 4);
        flate2::read::MultiGzDecoder::new(bytes.as_slice())
            .read_to_end(&mut out)
            .map_err(|e| DataError::format(path, "a complete gzip stream", format!("a damaged one ({e})")))?;
        Ok(out)
    } else {
        Ok(bytes)
    }
}

/// Reads an IDX image file (magic 0x00000803).
pub fn read_images(path: &Path) -> Result<IdxImages> {
    let bytes = read_maybe_gzipped(path)?;
    let dims = header(path, &bytes, IMAGES_MAGIC, "images")?;
    let [count, rows, cols] = dims[..] else { unreachable!("the magic fixes three dimensions") };
    let pixels = payload(path, &bytes, 16, count * rows * cols, &format!("{count} images of {rows}x{cols} bytes"))?;
    Ok(IdxImages { count, rows, cols, pixels })
}

/// Reads an IDX label file (magic 0x00000801).
pub fn read_labels(path: &Path) -> Result<Vec<u8>> {
    let bytes = read_maybe_gzipped(path)?;
    let dims = header(path, &bytes, LABELS_MAGIC, "labels")?;
    payload(path, &bytes, 8, dims[0], &format!("{} label bytes", dims[0]))
}

/// Checks the magic number and returns the dimensions it announces.
fn header(path: &Path, bytes: &[u8], magic: u32, what: &str) -> Result<Vec<usize>> {
    let be32 = |at: usize| bytes.get(at..at + 4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    let found = be32(0).ok_or_else(|| {
        DataError::format(
            path,
            format!("an IDX {what} file (magic 0x{magic:08x})"),
            format!("only {} bytes", bytes.len()),
        )
    })?;
    if found != magic {
        return Err(DataError::format(
            path,
            format!("an IDX {what} file with magic number 0x{magic:08x}"),
            format!("0x{found:08x}"),
        ));
    }
    let ndims = (magic & 0xff) as usize;
    (0..ndims)
        .map(|d| {
            be32(4 + 4 * d).map(|v| v as usize).ok_or_else(|| {
                DataError::format(
                    path,
                    format!("a {}-byte IDX header", 4 + 4 * ndims),
                    format!("only {} bytes", bytes.len()),
                )
            })
        })
        .collect()
}

/// The `len` bytes after the header, which must be all that follows it.
fn payload(path: &Path, bytes: &[u8], start: usize, len: usize, what: &str) -> Result<Vec<u8>> {
    let have = bytes.len() - start;
    if have != len {
        let kind = if have < len { "truncated file" } else { "trailing bytes" };
        return Err(DataError::format(
            path,
            format!("{len} bytes after the header ({what})"),
            format!("{have} ({kind})"),
        ));
    }
    Ok(bytes[start..].to_vec())
}
