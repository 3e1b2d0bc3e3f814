//! Where the project keeps what it downloads: one user cache shared by every checkout, so a
//! fresh clone (CI) reuses libtorch and the datasets instead of fetching them again.

use std::path::PathBuf;

/// The cache root: `FL_CACHE_DIR`, else `$XDG_CACHE_HOME/fl`, else `~/.cache/fl`.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("FL_CACHE_DIR") {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(dir).join("fl");
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".cache").join("fl")
}

/// The dataset cache: `FL_DATA_DIR`, else `<cache>/data`.
pub fn data_dir() -> PathBuf {
    std::env::var_os("FL_DATA_DIR").map_or_else(|| cache_dir().join("data"), PathBuf::from)
}
