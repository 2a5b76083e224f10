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
