//! Downloads the default local model into askloop's data folder (what `askloop model pull` does),
//! printing progress to stderr: `cargo run -p askloop-providers --features local --example local_pull`.

use std::process::ExitCode;

use askloop_providers::local::{PullProgress, pull_default_model};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let mut last_percent = u64::MAX;
    let result = pull_default_model(move |progress| match progress {
        PullProgress::Downloading { downloaded, total } => {
            let percent = downloaded * 100 / total.max(1);
            if percent != last_percent && percent % 10 == 0 {
                eprintln!("downloading: {percent}%");
                last_percent = percent;
            }
        }
        PullProgress::Extracting { done, total } => {
            let percent = done * 100 / total.max(1);
            if percent != last_percent && percent % 25 == 0 {
                eprintln!("assembling and verifying: {percent}%");
                last_percent = percent;
            }
        }
        PullProgress::Waiting { lock } => {
            eprintln!("another process is fetching the model ({})", lock.display());
        }
        PullProgress::AlreadyPresent { path } => {
            eprintln!("already present and verified: {}", path.display());
        }
        PullProgress::Done { path } => eprintln!("saved {}", path.display()),
        _ => {}
    })
    .await;
    match result {
        Ok(path) => {
            println!("{}", path.display());
            ExitCode::SUCCESS
        }
        Err(error) => {
            let mut line = error.to_string();
            let mut source = std::error::Error::source(&error);
            while let Some(cause) = source {
                line.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            eprintln!("error: {line}");
            ExitCode::FAILURE
        }
    }
}
