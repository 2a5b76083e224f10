//! One model call: prompt in, [`askloop_core::model::ModelEvent`]s out, on a blocking thread.
//!
//! The prompt's tokens go through the model in one batch, reusing the KV cache of the longest
//! prefix it shares with the previous call (the steps of one run share all but their tail).
//! Then tokens are sampled one by one under the step's [`DecodingPlan`]: text tokens are sent as
//! [`ModelEvent::TextDelta`](askloop_core::model::ModelEvent::TextDelta) as they come; a tool
//! call is collected and sent whole when its grammar completes ([`crate::local::decode`]). Runs
//! of tokens the grammar forces (`{"name": "ask_user", "arguments": `) are appended in one batch
//! without sampling.

use std::sync::{Mutex, PoisonError};

use askloop_core::model::{ModelRequest, Usage};
use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory};

use crate::local::decode::{Decoder, EventSink};
use crate::local::error::LocalModelError;
use crate::local::grammar::{self, DecodingPlan};
use crate::local::kv_cache::KvCache;
use crate::local::network::Network;
use crate::local::prompt_cache::PromptCache;
use crate::local::sampler::Sampler;
use crate::local::script::{ScriptFilter, ScriptSet};
use crate::local::template::{self, ChatFormat};
use crate::local::tokenizer::LocalTokenizer;

/// Output tokens of one call when the request does not say.
pub const DEFAULT_MAX_TOKENS: u32 = 512;
/// Sampling temperature when the request does not say (SmolLM2's recommended 0.2).
pub const DEFAULT_TEMPERATURE: f32 = 0.2;
/// Top-p when the request does not say.
pub const DEFAULT_TOP_P: f32 = 0.9;

/// The prompt tokens whose keys and values are in `cache`.
#[derive(Default)]
pub(crate) struct Session {
    tokens: Vec<u32>,
    cache: KvCache,
}

/// What a generation needs from the loaded model.
pub(crate) struct Engine<'a> {
    pub(crate) network: &'a Network,
    pub(crate) tokenizer: &'a LocalTokenizer,
    pub(crate) factory: &'a ParserFactory,
    pub(crate) session: &'a Mutex<Session>,
    /// The prompt cache on disk (`None` when the model file's metadata cannot be read).
    pub(crate) prompt_cache: Option<&'a PromptCache>,
}

fn inference(source: candle_core::Error) -> LocalModelError {
    LocalModelError::Inference {
        source: source.into(),
    }
}

/// The prompt text of a request under its plan, in `format`.
pub(crate) fn prompt_text(
    request: &ModelRequest,
    format: ChatFormat,
) -> Result<String, LocalModelError> {
    let callable = grammar::callable_tools(&request.tools, &request.settings.tool_choice)?;
    let section = callable.map(|tools| match format {
        ChatFormat::ChatMl => template::tools_section(&tools),
        ChatFormat::Qwen => template::qwen_tools_section(&tools),
    });
    Ok(template::render_for(format, request, section.as_deref()))
}

/// Compiles the plan's grammar into a matcher.
pub(crate) fn matcher_for(
    factory: &ParserFactory,
    plan: &DecodingPlan,
) -> Result<Matcher, LocalModelError> {
    let (DecodingPlan::Text { lark } | DecodingPlan::Grammar { lark, .. }) = plan;
    let parser = factory
        .create_parser(TopLevelGrammar::from_lark(lark.clone()))
        .map_err(|source| LocalModelError::Grammar {
            tool: None,
            source: source.into(),
        })?;
    let matcher = Matcher::new(Ok(parser));
    if let Some(error) = matcher.get_error() {
        return Err(LocalModelError::Grammar {
            tool: None,
            source: error.into(),
        });
    }
    Ok(matcher)
}

/// Runs one model call to the end, sending events to `sink`.
///
/// # Errors
/// Any [`LocalModelError`] of planning, grammar compilation or inference, and
/// [`LocalModelError::ToolCallCutOff`] when the budget ends inside a tool call.
pub(crate) fn generate(
    engine: &Engine<'_>,
    request: &ModelRequest,
    sink: &mut dyn EventSink,
) -> Result<(), LocalModelError> {
    let settings = &request.settings;
    let format = engine.network.chat_format();
    let plan = grammar::plan(&request.tools, &settings.tool_choice, format)?;
    let matcher = matcher_for(engine.factory, &plan)?;
    let text = prompt_text(request, format)?;
    let prompt = engine.tokenizer.encode(&text);
    let scripts = ScriptFilter::new(engine.tokenizer.token_scripts(), &ScriptSet::of_text(&text));
    let max_tokens = token_budget(engine.network, settings.max_tokens, prompt.len())?;
    let sampler = Sampler::new(
        settings.temperature.unwrap_or(DEFAULT_TEMPERATURE),
        settings.top_p.unwrap_or(DEFAULT_TOP_P),
        settings.seed.unwrap_or_else(random_seed),
    );

    let mut session = engine
        .session
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let session = &mut *session;
    let started = std::time::Instant::now();
    let Prefilled { logits, from_disk } =
        prefill(engine.network, session, &prompt, engine.prompt_cache)?;
    tracing::debug!(
        prompt = prompt.len(),
        from_disk,
        elapsed_ms = started.elapsed().as_millis() as u64,
        foreign_tokens = scripts.len(),
        "local model: prompt processed"
    );

    let mut decoder = Decoder::new(
        engine.tokenizer,
        &plan,
        matcher,
        scripts,
        sampler,
        max_tokens,
    );
    let forward = |tokens: &[u32]| match engine.network.forward(tokens, &mut session.cache) {
        Ok(logits) => Ok(logits),
        Err(error) => {
            *session = Session::default();
            Err(inference(error))
        }
    };
    let Some(finish) = decoder.run(logits, forward, sink)? else {
        return Ok(());
    };
    // Keep only the complete prompt blocks for the next call.
    if session.cache.truncate(session.tokens.len()).is_err() {
        *session = Session::default();
    }
    let usage = Usage {
        input_tokens: prompt.len() as u64,
        output_tokens: u64::from(decoder.output_tokens()),
    };
    decoder.finish(finish, usage, &request.tools, sink)
}

/// The output tokens a call may produce: the request's `max_tokens` (default
/// [`DEFAULT_MAX_TOKENS`]), at most what the context leaves after the prompt.
///
/// # Errors
/// [`LocalModelError::ContextOverflow`] when the prompt fills the context.
fn token_budget(
    network: &Network,
    max_tokens: Option<u32>,
    prompt_len: usize,
) -> Result<u32, LocalModelError> {
    let context = network.context_length();
    if prompt_len >= context {
        return Err(LocalModelError::ContextOverflow {
            tokens: prompt_len,
            context,
        });
    }
    Ok(max_tokens
        .unwrap_or(DEFAULT_MAX_TOKENS)
        .min((context - prompt_len) as u32))
}

/// Prompt tokens are processed in blocks of this many, at fixed positions (0, 64, 128, …).
const PREFILL_BLOCK: usize = 64;

/// Processes the prompt and returns the logits after its last token.
///
/// The prompt runs in blocks at fixed positions, and only complete blocks are kept for the next
/// call. A block's keys and values depend only on the tokens up to its end, computed the same way
/// every time, so reusing them gives exactly the numbers a fresh process would compute: a seed
/// gives the same output whatever ran before. A call that starts with nothing in memory (the
/// process's first) takes the blocks it shares with the prompt cache on disk, if any, and stores
/// its own complete blocks there when it computed new ones.
pub(crate) fn prefill(
    network: &Network,
    session: &mut Session,
    prompt: &[u32],
    stored: Option<&PromptCache>,
) -> Result<Prefilled, LocalModelError> {
    let cold = session.cache.len() == 0;
    if cold && let Some((tokens, cache)) = stored.and_then(|stored| stored.load(network.config())) {
        *session = Session { tokens, cache };
    }
    let shared = session
        .tokens
        .iter()
        .zip(prompt)
        .take_while(|(cached, new)| cached == new)
        .count()
        .min(session.cache.len())
        // At least one token must run to produce logits.
        .min(prompt.len() - 1);
    let reused = shared - shared % PREFILL_BLOCK;
    session.cache.truncate(reused).map_err(inference)?;
    session.tokens.truncate(reused);
    tracing::debug!(
        prompt = prompt.len(),
        reused,
        cold,
        "local model: processing the prompt"
    );
    let mut logits = Vec::new();
    for block in prompt[reused..].chunks(PREFILL_BLOCK) {
        logits = match network.forward(block, &mut session.cache) {
            Ok(logits) => logits,
            Err(error) => {
                *session = Session::default();
                return Err(inference(error));
            }
        };
        if block.len() == PREFILL_BLOCK {
            session.tokens.extend_from_slice(block);
        }
    }
    if cold
        && session.tokens.len() > reused
        && let Some(stored) = stored
    {
        stored.store(&session.tokens, &session.cache);
    }
    Ok(Prefilled {
        logits,
        from_disk: if cold { reused } else { 0 },
    })
}

/// What [`prefill`] did.
pub(crate) struct Prefilled {
    /// The logits after the prompt's last token.
    pub(crate) logits: Vec<f32>,
    /// Positions taken from the prompt cache on disk.
    pub(crate) from_disk: usize,
}

/// A seed for requests that give none.
fn random_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos() as u64);
    nanos ^ u64::from(std::process::id()).rotate_left(32)
}
