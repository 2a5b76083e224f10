//! Loading errors: a missing file names the pull command; a file that is not a model says so.

use askloop_providers::local::{LocalModelError, PULL_COMMAND, resolve_model_path};
use askloop_providers::{ModelSpec, ProviderError, ProviderOptions, build_model};

async fn local_error(spec: ModelSpec) -> (String, Box<dyn std::error::Error + Send + Sync>) {
    let Err(ProviderError::Local(error)) = build_model(&spec, &ProviderOptions::from_env()).await
    else {
        panic!("{spec} loaded");
    };
    (error.to_string(), error)
}

#[tokio::test]
async fn a_missing_model_file_names_the_pull_command() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent.gguf");
    let (message, error) = local_error(ModelSpec::Local(Some(path))).await;
    assert!(message.contains(PULL_COMMAND), "{message}");
    assert!(matches!(
        error.downcast_ref::<LocalModelError>(),
        Some(LocalModelError::ModelMissing { .. })
    ));
}

#[tokio::test]
async fn a_file_that_is_not_gguf_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.gguf");
    std::fs::write(&path, b"this is not a model file at all").unwrap();
    let (message, error) = local_error(ModelSpec::Local(Some(path))).await;
    assert!(message.contains("not a valid GGUF model file"), "{message}");
    assert!(matches!(
        error.downcast_ref::<LocalModelError>(),
        Some(LocalModelError::InvalidGguf { .. })
    ));
}

/// A file cut short (its header intact, its tensors not) is an invalid model file that names
/// where it ends, not a read error or a panic in a reading thread.
#[tokio::test]
async fn a_file_cut_short_names_the_tensor_it_ends_in() {
    let whole = std::fs::read(crate::local::support::model_path()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cut.gguf");
    std::fs::write(&path, &whole[..whole.len() / 2]).unwrap();
    let (message, error) = local_error(ModelSpec::Local(Some(path))).await;
    assert!(message.contains("not a valid GGUF model file"), "{message}");
    let chain = crate::local::support::chain(&*error);
    assert!(chain.contains("the file ends inside tensor"), "{chain}");
}

#[test]
fn a_folder_names_its_single_gguf_file() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        resolve_model_path(Some(dir.path())),
        Err(LocalModelError::AmbiguousFolder { found: 0, .. })
    ));
    std::fs::write(dir.path().join("model.gguf"), b"").unwrap();
    std::fs::write(dir.path().join("notes.txt"), b"").unwrap();
    assert_eq!(
        resolve_model_path(Some(dir.path())).unwrap(),
        dir.path().join("model.gguf")
    );
    std::fs::write(dir.path().join("other.gguf"), b"").unwrap();
    assert!(matches!(
        resolve_model_path(Some(dir.path())),
        Err(LocalModelError::AmbiguousFolder { found: 2, .. })
    ));
}

/// Issue 7: printed as a chain (`a: b: c`), every cause appears once: no message repeats the
/// text of its source.
#[tokio::test]
async fn issue7_a_load_error_prints_each_cause_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.gguf");
    std::fs::write(&path, b"this is not a model file at all").unwrap();
    let Err(error) = build_model(
        &ModelSpec::Local(Some(path.clone())),
        &ProviderOptions::from_env(),
    )
    .await
    else {
        panic!("a broken file loaded");
    };
    let mut messages = vec![error.to_string()];
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        messages.push(cause.to_string());
        source = cause.source();
    }
    assert!(messages.len() >= 3, "{messages:?}");
    assert_eq!(messages[0], "cannot load the local model");
    assert_eq!(
        messages[1],
        format!("{} is not a valid GGUF model file", path.display())
    );
    for pair in messages.windows(2) {
        assert!(!pair[0].contains(&pair[1]), "{messages:?}");
    }
}
