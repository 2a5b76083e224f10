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

use crate::local::decode::EventSink;
use crate::local::error::LocalModelError;
use crate::local::generate::{self, Engine, Session};
use crate::local::grammar;
use crate::local::network::Network;
use crate::local::prompt_cache::PromptCache;
use crate::local::tokenizer::LocalTokenizer;

/// A loaded model: weights, tokenizer, grammar compiler and the KV cache of the last call.
pub(crate) struct LoadedModel {
    path: PathBuf,
    model_id: String,
    network: Network,
    tokenizer: Arc<LocalTokenizer>,
    factory: ParserFactory,
    session: Mutex<Session>,
    prompt_cache: Option<PromptCache>,
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
        generate::generate(&self.engine(), request, &mut on_event)
    }

    /// Runs one request on the calling thread, sending each event to `sender`; stops within
    /// one token once the receiver is dropped ([`ChannelSink`]), even while nothing is sent.
    ///
    /// # Errors
    /// As [`LocalModel::generate_blocking`].
    fn generate_to_channel(
        &self,
        request: &ModelRequest,
        sender: &EventSender,
    ) -> Result<(), LocalModelError> {
        generate::generate(&self.engine(), request, &mut ChannelSink(sender))
    }

    /// What a call runs on: this model's network, tokenizer, grammar factory, session and
    /// prompt cache.
    fn engine(&self) -> Engine<'_> {
        let inner = &self.inner;
        Engine {
            network: &inner.network,
            tokenizer: &inner.tokenizer,
            factory: &inner.factory,
            session: &inner.session,
            prompt_cache: inner.prompt_cache.as_ref(),
        }
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
    let prompt_cache = PromptCache::beside(path, network.config());
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
        max_words = grammar::MAX_WORDS,
        prompt_cache = prompt_cache.as_ref().map(|cache| cache.path().display().to_string()),
        "local model loaded"
    );
    Ok(LoadedModel {
        path: path.to_path_buf(),
        model_id,
        network,
        tokenizer,
        factory,
        session: Mutex::new(Session::default()),
        prompt_cache,
    })
}

/// The sending end of a model call's events.
type EventSender = tokio::sync::mpsc::Sender<Result<ModelEvent, ModelError>>;

/// The events of a call run on a blocking thread, sent to the stream's channel: gone as soon
/// as the stream (the receiver) is dropped, which stops decoding within one token.
struct ChannelSink<'a>(&'a EventSender);

impl EventSink for ChannelSink<'_> {
    fn send(&mut self, event: ModelEvent) -> bool {
        self.0.blocking_send(Ok(event)).is_ok()
    }

    fn gone(&self) -> bool {
        self.0.is_closed()
    }
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
            let result = model.generate_to_channel(&request, &sender);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local::generate::prefill;
    use crate::local::{FetchOptions, SMOLLM2_135M, fetch_model};

    /// SmolLM2-135M, fetched (once per data folder) as the integration tests fetch it.
    fn small_model() -> LocalModel {
        let path = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async {
                fetch_model(&SMOLLM2_135M, &FetchOptions::from_data_dir()?, |_| {}).await
            })
            .unwrap();
        LocalModel::load(&path).unwrap()
    }

    #[test]
    fn the_prompt_cache_on_disk_gives_the_numbers_a_cold_prompt_does() {
        let model = small_model();
        let inner = &model.inner;
        let network = &inner.network;
        let dir = tempfile::tempdir().unwrap();
        let stored =
            PromptCache::at(dir.path().join("cache"), &inner.path, network.config()).unwrap();
        let text = "You are a helpful assistant who plans trips, picks databases and writes \
                    birthday messages. Ask one short question when something is missing. "
            .repeat(6);
        let prompt = inner
            .tokenizer
            .encode(&format!("{text}Help me plan a trip"));
        let other = inner
            .tokenizer
            .encode(&format!("{text}Which database should I use?"));
        assert!(prompt.len() > 2 * 64, "{} tokens", prompt.len());
        let cold = |prompt: &[u32]| {
            prefill(network, &mut Session::default(), prompt, None)
                .unwrap()
                .logits
        };
        let blocks = |len: usize| len - len % 64;

        // A first process computes everything and stores its complete blocks.
        let first = prefill(network, &mut Session::default(), &prompt, Some(&stored)).unwrap();
        assert_eq!(first.from_disk, 0);
        let (tokens, _) = stored.load(network.config()).unwrap();
        assert_eq!(tokens, prompt[..blocks(prompt.len())]);
        // A second one takes them from disk: the same numbers.
        let second = prefill(network, &mut Session::default(), &prompt, Some(&stored)).unwrap();
        assert_eq!(second.from_disk, blocks(prompt.len() - 1));
        assert_eq!(second.logits, first.logits);
        assert_eq!(first.logits, cold(&prompt));
        // Another request after the same instructions shares their blocks.
        let shared = prompt
            .iter()
            .zip(&other)
            .take_while(|(a, b)| a == b)
            .count();
        let third = prefill(network, &mut Session::default(), &other, Some(&stored)).unwrap();
        assert_eq!(third.from_disk, blocks(shared));
        assert!(third.from_disk >= 64);
        assert_eq!(third.logits, cold(&other));
        // A damaged file is ignored and replaced.
        std::fs::write(stored.path(), b"damaged").unwrap();
        let fourth = prefill(network, &mut Session::default(), &prompt, Some(&stored)).unwrap();
        assert_eq!(fourth.from_disk, 0);
        assert_eq!(fourth.logits, first.logits);
        assert!(stored.load(network.config()).is_some());
    }

    /// A sink whose consumer goes away as soon as the tool call is announced: counts the
    /// tokens decoded after that (one `gone` question each) and the events still sent.
    #[derive(Default)]
    struct LeavesAtTheAnnounce {
        announced: bool,
        asked_after: std::cell::Cell<usize>,
        events_after: usize,
    }

    impl EventSink for LeavesAtTheAnnounce {
        fn send(&mut self, event: ModelEvent) -> bool {
            if self.announced {
                self.events_after += 1;
            }
            if matches!(event, ModelEvent::ToolCallDelta { .. }) {
                self.announced = true;
            }
            true
        }

        fn gone(&self) -> bool {
            if self.announced {
                self.asked_after.set(self.asked_after.get() + 1);
            }
            self.announced
        }
    }

    #[test]
    fn issue33_decoding_a_tool_call_stops_within_one_token_once_the_consumer_is_gone() {
        use askloop_core::model::{Message, ModelSettings, ToolChoice, ToolDefinition};

        let model = small_model();
        let book = ToolDefinition {
            name: "book_table".into(),
            description: "Book a restaurant table.".into(),
            input_schema: serde_json::json!({"type": "object", "properties": {
                "restaurant": {"type": "string", "minLength": 1},
                "requests": {"type": "array", "items": {"type": "string"}}},
                "required": ["restaurant", "requests"]}),
        };
        let request = ModelRequest::new(vec![Message::user("Book a table for a dinner date")])
            .with_tools(vec![book])
            .with_settings(
                ModelSettings::new()
                    .with_seed(7)
                    .with_max_tokens(200)
                    .with_tool_choice(ToolChoice::Tool("book_table".into())),
            );
        let mut sink = LeavesAtTheAnnounce::default();
        generate::generate(&model.engine(), &request, &mut sink).unwrap();
        assert!(sink.announced, "the call was announced");
        // Asked once, before the next token: nothing more decoded, nothing more sent.
        assert_eq!(sink.asked_after.get(), 1);
        assert_eq!(
            sink.events_after, 0,
            "no tool call and no finish after it left"
        );
    }

    #[tokio::test]
    async fn issue33_a_dropped_stream_is_gone_for_the_decoder() {
        let (sender, receiver) = tokio::sync::mpsc::channel(1);
        let sink = ChannelSink(&sender);
        assert!(!sink.gone());
        drop(receiver);
        assert!(sink.gone());
    }
}
