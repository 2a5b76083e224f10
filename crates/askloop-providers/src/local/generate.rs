//! One model call: prompt in, [`ModelEvent`]s out, on a blocking thread.
//!
//! The prompt's tokens go through the model in one batch, reusing the KV cache of the longest
//! prefix it shares with the previous call (the steps of one run share all but their tail).
//! Then tokens are sampled one by one under the step's [`DecodingPlan`]: text tokens are sent as
//! [`ModelEvent::TextDelta`] as they come; a tool call is collected and sent whole when its
//! grammar completes. Runs of tokens the grammar forces (`{"name": "ask_user", "arguments": `)
//! are appended in one batch without sampling.

use std::sync::{Mutex, PoisonError};

use askloop_core::model::{
    FinishReason, ModelEvent, ModelRequest, ToolArgs, ToolCall, ToolDefinition, Usage,
};
use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory};
use serde_json::Value;

use crate::local::error::{BoxedError, LocalModelError};
use crate::local::grammar::{self, DecodingPlan};
use crate::local::llama::KvCache;
use crate::local::network::Network;
use crate::local::prompt_cache::PromptCache;
use crate::local::sampler::Sampler;
use crate::local::template::{self, ChatFormat, TOOL_CALL_CLOSE, TOOL_CALL_OPEN};
use crate::local::tokenizer::{LocalTokenizer, TextAssembler};

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

/// Where events go; `false` from `send` means the consumer is gone and generation stops.
pub(crate) trait EventSink {
    /// Delivers one event.
    fn send(&mut self, event: ModelEvent) -> bool;
}

impl<F: FnMut(ModelEvent) -> bool> EventSink for F {
    fn send(&mut self, event: ModelEvent) -> bool {
        self(event)
    }
}

fn inference(source: candle_core::Error) -> LocalModelError {
    LocalModelError::Inference {
        source: source.into(),
    }
}

fn constraint(source: impl Into<BoxedError>) -> LocalModelError {
    LocalModelError::Constraint {
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
) -> Result<Option<Matcher>, LocalModelError> {
    let DecodingPlan::Grammar { lark, .. } = plan else {
        return Ok(None);
    };
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
    Ok(Some(matcher))
}

/// What the model is producing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Nothing yet.
    Undecided,
    /// Plain text, streamed.
    Text,
    /// A tool call, collected.
    ToolCall,
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
    let mut matcher = matcher_for(engine.factory, &plan)?;
    let prompt = engine.tokenizer.encode(&prompt_text(request, format)?);
    let context = engine.network.context_length();
    if prompt.len() >= context {
        return Err(LocalModelError::ContextOverflow {
            tokens: prompt.len(),
            context,
        });
    }
    let max_tokens = settings
        .max_tokens
        .unwrap_or(DEFAULT_MAX_TOKENS)
        .min((context - prompt.len()) as u32);
    let mut sampler = Sampler::new(
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
    let Prefilled {
        mut logits,
        from_disk,
    } = prefill(engine.network, session, &prompt, engine.prompt_cache)?;
    tracing::debug!(
        prompt = prompt.len(),
        from_disk,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "local model: prompt processed"
    );

    let end_of_turn = engine.tokenizer.end_of_turn();
    let end_of_text = engine.tokenizer.end_of_text();
    let mut mode = match &plan {
        DecodingPlan::Text => Mode::Text,
        DecodingPlan::Grammar {
            allow_text: true, ..
        } => Mode::Undecided,
        DecodingPlan::Grammar {
            allow_text: false, ..
        } => Mode::ToolCall,
    };
    let bare_calls = matches!(
        plan,
        DecodingPlan::Grammar {
            bare_calls: true,
            ..
        }
    );
    let mut assembler = TextAssembler::default();
    let mut call_bytes: Vec<u8> = Vec::new();
    let mut output_tokens: u32 = 0;
    let mut finish = FinishReason::Length;

    while output_tokens < max_tokens {
        // Tokens the grammar forces are appended without sampling.
        let forced = match matcher.as_mut() {
            Some(matcher) if mode == Mode::ToolCall => {
                let mut forced = matcher.compute_ff_tokens();
                forced.truncate((max_tokens - output_tokens) as usize);
                if !forced.is_empty() {
                    matcher.consume_tokens(&forced).map_err(constraint)?;
                }
                forced
            }
            _ => Vec::new(),
        };
        let token = if forced.is_empty() {
            if let Some(matcher) = matcher.as_mut() {
                let mask = matcher.compute_mask().map_err(constraint)?;
                mask.iter_unset_entries(|index| {
                    if let Some(logit) = logits.get_mut(index) {
                        *logit = f32::NEG_INFINITY;
                    }
                });
            } else {
                mask_control_tokens(engine.tokenizer, &mut logits);
            }
            let Some(token) = sampler.sample(&mut logits) else {
                // Nothing allowed: the grammar is complete.
                finish = FinishReason::Stop;
                break;
            };
            if token == end_of_turn || Some(token) == end_of_text {
                finish = FinishReason::Stop;
                break;
            }
            if let Some(matcher) = matcher.as_mut() {
                matcher.consume_token(token).map_err(constraint)?;
            }
            vec![token]
        } else {
            forced
        };
        output_tokens += token.len() as u32;
        for id in &token {
            let bytes = engine.tokenizer.token_bytes(*id);
            if mode == Mode::Undecided {
                let opens_call = match bytes.first() {
                    Some(b'<') => true,
                    Some(b'{') => bare_calls,
                    _ => false,
                };
                mode = if opens_call {
                    Mode::ToolCall
                } else {
                    Mode::Text
                };
            }
            match mode {
                Mode::ToolCall => call_bytes.extend_from_slice(bytes),
                _ => {
                    let text = assembler.push(bytes);
                    if !text.is_empty() && !sink.send(ModelEvent::TextDelta(text)) {
                        return Ok(());
                    }
                }
            }
        }
        if matcher.as_ref().is_some_and(Matcher::is_stopped) {
            // The grammar is complete: the model would close its turn here.
            finish = FinishReason::Stop;
            break;
        }
        logits = match engine.network.forward(&token, &mut session.cache) {
            Ok(logits) => logits,
            Err(error) => {
                *session = Session::default();
                return Err(inference(error));
            }
        };
    }
    // Keep only the complete prompt blocks for the next call.
    if session.cache.truncate(session.tokens.len()).is_err() {
        *session = Session::default();
    }

    let usage = Usage {
        input_tokens: prompt.len() as u64,
        output_tokens: u64::from(output_tokens),
    };
    if mode == Mode::ToolCall {
        if finish != FinishReason::Stop || !matcher.as_ref().is_some_and(Matcher::is_stopped) {
            tracing::debug!(
                partial = %String::from_utf8_lossy(&call_bytes),
                "local model: the token budget ended inside a tool call"
            );
            return Err(LocalModelError::ToolCallCutOff { max_tokens });
        }
        let call = parse_tool_call(&call_bytes, &request.tools);
        if !sink.send(ModelEvent::ToolCall(call)) {
            return Ok(());
        }
        sink.send(ModelEvent::Finish {
            reason: FinishReason::ToolCalls,
            usage,
        });
        return Ok(());
    }
    let rest = assembler.finish();
    if !rest.is_empty() && !sink.send(ModelEvent::TextDelta(rest)) {
        return Ok(());
    }
    sink.send(ModelEvent::Finish {
        reason: finish,
        usage,
    });
    Ok(())
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

/// Without a grammar, the only control token the model may produce is the end of its turn.
fn mask_control_tokens(tokenizer: &LocalTokenizer, logits: &mut [f32]) {
    let end_of_turn = tokenizer.end_of_turn() as usize;
    for (index, logit) in logits.iter_mut().enumerate() {
        if index != end_of_turn && tokenizer.is_special(index as u32) {
            *logit = f32::NEG_INFINITY;
        }
    }
}

/// The call in the grammar-complete text `<tool_call>\n{"name": …, "arguments": …}\n</tool_call>`,
/// or the bare JSON `{"name": …, "arguments": …}`.
fn parse_tool_call(bytes: &[u8], tools: &[ToolDefinition]) -> ToolCall {
    let text = String::from_utf8_lossy(bytes);
    let body = text
        .strip_prefix(TOOL_CALL_OPEN)
        .and_then(|rest| rest.strip_suffix(TOOL_CALL_CLOSE))
        .unwrap_or(&text);
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let name = parsed
        .as_ref()
        .and_then(|value| value.get("name"))
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| tools.first().map(|tool| tool.name.clone()))
        .unwrap_or_default();
    let args = match parsed.as_ref().and_then(|value| value.get("arguments")) {
        Some(arguments) => ToolArgs::Json(arguments.clone()),
        None => ToolArgs::Malformed(body.to_owned()),
    };
    // An empty id: the agent loop gives the call a unique one.
    ToolCall {
        id: "".into(),
        name,
        args,
    }
}

/// A seed for requests that give none.
fn random_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos() as u64);
    nanos ^ u64::from(std::process::id()).rotate_left(32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_complete_tool_call() {
        let call = parse_tool_call(
            b"<tool_call>\n{\"name\": \"ask_user\", \"arguments\": {\"question\": \"Where?\"}}\n</tool_call>",
            &[],
        );
        assert_eq!(call.name, "ask_user");
        assert_eq!(
            call.args,
            ToolArgs::Json(serde_json::json!({"question": "Where?"}))
        );
    }

    #[test]
    fn issue8_parses_a_bare_json_tool_call() {
        let call = parse_tool_call(
            b"{\"name\": \"ask_user\", \"arguments\": {\"question\": \"Where?\"}}",
            &[],
        );
        assert_eq!(call.name, "ask_user");
        assert_eq!(
            call.args,
            ToolArgs::Json(serde_json::json!({"question": "Where?"}))
        );
    }
}
