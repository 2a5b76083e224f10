//! [`LocalModel`]: a GGUF llama model running in-process on the CPU, as a [`LanguageModel`].

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use askloop_core::model::{LanguageModel, ModelError, ModelEvent, ModelEventStream, ModelRequest};
use async_trait::async_trait;
use candle_core::quantized::gguf_file;
use llguidance::ParserFactory;
use llguidance::toktrie::InferenceCapabilities;

use crate::local::error::LocalModelError;
use crate::local::generate::{self, Engine, Session};
use crate::local::grammar;
use crate::local::network::Network;
use crate::local::tokenizer::LocalTokenizer;

/// A loaded model: weights, tokenizer, grammar compiler and the KV cache of the last call.
pub(crate) struct LoadedModel {
    path: PathBuf,
    model_id: String,
    network: Network,
    tokenizer: Arc<LocalTokenizer>,
    factory: ParserFactory,
    session: Mutex<Session>,
}

/// The embedded local model: a llama-architecture GGUF file run by candle on the CPU.
///
/// Loading reads the whole file on a few threads; a `qwen2` model's matrices also get candle's
/// tiled copies then (about 2.3 GB resident for the default 1.5B model on x86-64), the 135M
/// `llama` model dense copies for prompt processing (about 0.6 GB). [`LocalModel::load`] does
/// it once per process and path. Calls are served one at a time. Each call takes its sampling settings from
/// the request: `temperature` (default 0.2), `top_p` (0.9), `seed` (random when absent; a fixed
/// seed gives the same output), `max_tokens` (512), and `tool_choice`, enforced by constrained
/// decoding (see [`crate::local`]).
#[derive(Clone)]
pub struct LocalModel {
    inner: Arc<LoadedModel>,
}

impl std::fmt::Debug for LocalModel {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("LocalModel")
            .field("path", &self.inner.path)
            .field("model_id", &self.inner.model_id)
            .finish_non_exhaustive()
    }
}

/// The models this process loaded, by canonical path.
type LoadedModels = Mutex<Vec<(PathBuf, Arc<LoadedModel>)>>;

/// Models loaded by this process, by canonical path.
fn loaded() -> &'static LoadedModels {
    static LOADED: OnceLock<LoadedModels> = OnceLock::new();
    LOADED.get_or_init(|| Mutex::new(Vec::new()))
}

impl LocalModel {
    /// Loads a llama GGUF file, or returns the copy this process already loaded from that path.
    ///
    /// # Errors
    /// [`LocalModelError::ModelMissing`], [`LocalModelError::Read`],
    /// [`LocalModelError::InvalidGguf`], [`LocalModelError::UnsupportedArchitecture`],
    /// [`LocalModelError::MissingMetadata`], [`LocalModelError::Tokenizer`],
    /// [`LocalModelError::Grammar`].
    pub fn load(path: &Path) -> Result<Self, LocalModelError> {
        let canonical = std::fs::canonicalize(path).map_err(|source| {
            if source.kind() == std::io::ErrorKind::NotFound {
                LocalModelError::ModelMissing {
                    path: path.to_path_buf(),
                }
            } else {
                LocalModelError::Read {
                    path: path.to_path_buf(),
                    source,
                }
            }
        })?;
        let mut models = loaded().lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, model)) = models.iter().find(|(loaded, _)| *loaded == canonical) {
            return Ok(Self {
                inner: Arc::clone(model),
            });
        }
        let model = Arc::new(load_model(&canonical)?);
        models.push((canonical, Arc::clone(&model)));
        Ok(Self { inner: model })
    }

    /// Whether this process has already loaded the file at `path`.
    pub fn is_loaded(path: &Path) -> bool {
        let Ok(canonical) = std::fs::canonicalize(path) else {
            return false;
        };
        loaded()
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .any(|(loaded, _)| *loaded == canonical)
    }

    /// The model file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The model's tokenizer.
    pub fn tokenizer(&self) -> &LocalTokenizer {
        &self.inner.tokenizer
    }

    /// The exact prompt text a request becomes (ChatML, tools in the system prompt).
    ///
    /// # Errors
    /// [`LocalModelError::NoTools`] or [`LocalModelError::UnknownTool`] for a tool choice the
    /// request's tools cannot satisfy.
    pub fn prompt(&self, request: &ModelRequest) -> Result<String, LocalModelError> {
        generate::prompt_text(request, self.inner.network.chat_format())
    }

    /// Runs one request on the calling thread, handing each event to `on_event` (return `false`
    /// to stop early). This is what [`LanguageModel::stream`] runs on a blocking thread.
    ///
    /// # Errors
    /// Any [`LocalModelError`] of planning, grammar compilation or inference, and
    /// [`LocalModelError::ToolCallCutOff`] when the token budget ends inside a tool call.
    pub fn generate_blocking(
        &self,
        request: &ModelRequest,
        mut on_event: impl FnMut(ModelEvent) -> bool,
    ) -> Result<(), LocalModelError> {
        let inner = &self.inner;
        let engine = Engine {
            network: &inner.network,
            tokenizer: &inner.tokenizer,
            factory: &inner.factory,
            session: &inner.session,
        };
        generate::generate(&engine, request, &mut on_event)
    }

    fn request_error(&self, error: LocalModelError) -> ModelError {
        // The message says where it failed; the source, printed after it, says why.
        ModelError::Request {
            model: self.inner.model_id.clone(),
            message: "generation failed".to_owned(),
            source: Some(Box::new(error)),
        }
    }
}

fn load_model(path: &Path) -> Result<LoadedModel, LocalModelError> {
    let started = std::time::Instant::now();
    let file = File::open(path).map_err(|source| LocalModelError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let mut reader = BufReader::new(file);
    let content =
        gguf_file::Content::read(&mut reader).map_err(|source| LocalModelError::InvalidGguf {
            path: path.to_path_buf(),
            source: source.into(),
        })?;
    let tokenizer = Arc::new(LocalTokenizer::from_gguf(path, &content)?);
    let network = Network::load(path, &content)?;
    let tok_env = tokenizer.tok_env();
    let mut factory = ParserFactory::new(
        &tok_env,
        InferenceCapabilities {
            ff_tokens: true,
            ..InferenceCapabilities::default()
        },
        &llguidance::earley::SlicedBiasComputer::general_slices(),
    )
    .map_err(|source| LocalModelError::Grammar {
        tool: None,
        source: source.into(),
    })?;
    factory.quiet();
    let model_id = path
        .file_name()
        .map(|name| name.to_string_lossy().trim_end_matches(".gguf").to_owned())
        .unwrap_or_else(|| "local".to_owned());
    tracing::info!(
        path = %path.display(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        max_string = grammar::MAX_STRING_LENGTH,
        "local model loaded"
    );
    Ok(LoadedModel {
        path: path.to_path_buf(),
        model_id,
        network,
        tokenizer,
        factory,
        session: Mutex::new(Session::default()),
    })
}

#[async_trait]
impl LanguageModel for LocalModel {
    fn provider(&self) -> &str {
        "local"
    }

    fn model_id(&self) -> &str {
        &self.inner.model_id
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelEventStream, ModelError> {
        // Settle tool-choice errors before anything streams.
        grammar::callable_tools(&request.tools, &request.settings.tool_choice)
            .map_err(|error| self.request_error(error))?;
        let (sender, receiver) = tokio::sync::mpsc::channel(64);
        let model = self.clone();
        tokio::task::spawn_blocking(move || {
            let result =
                model.generate_blocking(&request, |event| sender.blocking_send(Ok(event)).is_ok());
            if let Err(error) = result {
                let _ = sender.blocking_send(Err(model.request_error(error)));
            }
        });
        let stream = futures::stream::unfold(receiver, |mut receiver| async move {
            receiver.recv().await.map(|item| (item, receiver))
        });
        Ok(Box::pin(stream))
    }
}
