//! [`Decoder`]: the token loop of one model call. Tokens the grammar forces are taken as they
//! are, the others sampled; text streams to an [`EventSink`] as it completes, a tool call is
//! collected and sent whole at the end (announced, for progress displays, by one
//! [`ModelEvent::ToolCallDelta`] with its tool's name and no argument text as soon as the name
//! is written).

use askloop_core::model::{FinishReason, ModelEvent, ToolArgs, ToolCall, ToolDefinition, Usage};
use llguidance::Matcher;
use serde_json::Value;

use crate::local::error::{BoxedError, LocalModelError};
use crate::local::grammar::DecodingPlan;
use crate::local::sampler::Sampler;
use crate::local::script::ScriptFilter;
use crate::local::template::{TOOL_CALL_CLOSE, TOOL_CALL_OPEN};
use crate::local::tokenizer::{LocalTokenizer, TextAssembler};

/// Where events go; `false` from `send` means the consumer is gone and generation stops.
pub(crate) trait EventSink {
    /// Delivers one event.
    fn send(&mut self, event: ModelEvent) -> bool;

    /// Whether the consumer is gone (e.g. the stream was dropped on Ctrl-C), asked before
    /// every token, so decoding stops within one token even while it sends nothing (a tool
    /// call is sent whole at its end). `false` when the sink cannot tell.
    fn gone(&self) -> bool {
        false
    }
}

impl<F: FnMut(ModelEvent) -> bool> EventSink for F {
    fn send(&mut self, event: ModelEvent) -> bool {
        self(event)
    }
}

fn constraint(source: impl Into<BoxedError>) -> LocalModelError {
    LocalModelError::Constraint {
        source: source.into(),
    }
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

/// The output of one call as it is decoded: what the model is producing, and what it produced.
pub(crate) struct Decoder<'a> {
    tokenizer: &'a LocalTokenizer,
    /// The plan's grammar (plain text has one too, so that it never opens as a tool call).
    matcher: Matcher,
    /// The tokens of scripts the conversation does not use, masked with the grammar's mask.
    scripts: ScriptFilter,
    sampler: Sampler,
    mode: Mode,
    /// Whether a call may be written as bare JSON (`{` opens one).
    bare_calls: bool,
    assembler: TextAssembler,
    call_bytes: Vec<u8>,
    /// Whether the call being collected was announced (its tool's name is written).
    call_announced: bool,
    output_tokens: u32,
    max_tokens: u32,
}

impl<'a> Decoder<'a> {
    /// A decoder for `plan`, its grammar compiled into `matcher`, keeping to the scripts of
    /// `scripts`, of at most `max_tokens`.
    pub(crate) fn new(
        tokenizer: &'a LocalTokenizer,
        plan: &DecodingPlan,
        matcher: Matcher,
        scripts: ScriptFilter,
        sampler: Sampler,
        max_tokens: u32,
    ) -> Self {
        let mode = match plan {
            DecodingPlan::Text { .. } => Mode::Text,
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
        Self {
            tokenizer,
            matcher,
            scripts,
            sampler,
            mode,
            bare_calls,
            assembler: TextAssembler::default(),
            call_bytes: Vec::new(),
            call_announced: false,
            output_tokens: 0,
            max_tokens,
        }
    }

    /// Output tokens so far.
    pub(crate) fn output_tokens(&self) -> u32 {
        self.output_tokens
    }

    /// Decodes from the prompt's `logits` until the turn ends or the budget is spent; `forward`
    /// runs new tokens through the model and returns the logits after them. Returns why
    /// decoding stopped, or `None` when the consumer went away.
    ///
    /// # Errors
    /// [`LocalModelError::Constraint`]; the errors of `forward`.
    pub(crate) fn run(
        &mut self,
        mut logits: Vec<f32>,
        mut forward: impl FnMut(&[u32]) -> Result<Vec<f32>, LocalModelError>,
        sink: &mut dyn EventSink,
    ) -> Result<Option<FinishReason>, LocalModelError> {
        while self.output_tokens < self.max_tokens {
            if sink.gone() {
                return Ok(None);
            }
            let Some(tokens) = self.next_tokens(&mut logits)? else {
                return Ok(Some(FinishReason::Stop));
            };
            self.output_tokens += tokens.len() as u32;
            if !self.emit(&tokens, sink) {
                return Ok(None);
            }
            if self.grammar_complete() {
                // The grammar is complete: the model would close its turn here.
                return Ok(Some(FinishReason::Stop));
            }
            logits = forward(&tokens)?;
        }
        Ok(Some(FinishReason::Length))
    }

    /// The next tokens: a run the grammar forces, else one sampled from `logits`; `None` when
    /// the turn ends (the end-of-turn token, or nothing allowed).
    fn next_tokens(&mut self, logits: &mut [f32]) -> Result<Option<Vec<u32>>, LocalModelError> {
        // Tokens the grammar forces are appended without sampling.
        if self.mode == Mode::ToolCall {
            let mut forced = self.matcher.compute_ff_tokens();
            forced.truncate((self.max_tokens - self.output_tokens) as usize);
            if !forced.is_empty() {
                self.matcher.consume_tokens(&forced).map_err(constraint)?;
                return Ok(Some(forced));
            }
        }
        // The grammar's mask also keeps out every control token but the end of the turn; the
        // tokens of a script foreign to the conversation go too, unless nothing else is left.
        let mask = self
            .scripts
            .restrict(self.matcher.compute_mask().map_err(constraint)?);
        mask.iter_unset_entries(|index| {
            if let Some(logit) = logits.get_mut(index) {
                *logit = f32::NEG_INFINITY;
            }
        });
        let Some(token) = self.sampler.sample(logits) else {
            // Nothing allowed: the grammar is complete.
            return Ok(None);
        };
        if token == self.tokenizer.end_of_turn() || Some(token) == self.tokenizer.end_of_text() {
            return Ok(None);
        }
        self.matcher.consume_token(token).map_err(constraint)?;
        Ok(Some(vec![token]))
    }

    /// Adds `tokens` to the output: text is sent as it completes, a call's bytes collected.
    /// `false` when the consumer is gone.
    fn emit(&mut self, tokens: &[u32], sink: &mut dyn EventSink) -> bool {
        for id in tokens {
            let bytes = self.tokenizer.token_bytes(*id);
            if self.mode == Mode::Undecided {
                let opens_call = match bytes.first() {
                    Some(b'<') => true,
                    Some(b'{') => self.bare_calls,
                    _ => false,
                };
                self.mode = if opens_call {
                    Mode::ToolCall
                } else {
                    Mode::Text
                };
            }
            match self.mode {
                Mode::ToolCall => {
                    self.call_bytes.extend_from_slice(bytes);
                    if !self.call_announced
                        && let Some(name) = written_name(&self.call_bytes)
                    {
                        self.call_announced = true;
                        let announce = ModelEvent::ToolCallDelta {
                            id: String::new(),
                            name,
                            args_delta: String::new(),
                        };
                        if !sink.send(announce) {
                            return false;
                        }
                    }
                }
                _ => {
                    let text = self.assembler.push(bytes);
                    if !text.is_empty() && !sink.send(ModelEvent::TextDelta(text)) {
                        return false;
                    }
                }
            }
        }
        true
    }

    fn grammar_complete(&self) -> bool {
        self.matcher.is_stopped()
    }

    /// Sends the end of the output: the tool call, or the text held back; then the finish.
    ///
    /// # Errors
    /// [`LocalModelError::ToolCallCutOff`] when decoding stopped inside a tool call.
    pub(crate) fn finish(
        mut self,
        finish: FinishReason,
        usage: Usage,
        tools: &[ToolDefinition],
        sink: &mut dyn EventSink,
    ) -> Result<(), LocalModelError> {
        if self.mode == Mode::ToolCall {
            if finish != FinishReason::Stop || !self.grammar_complete() {
                tracing::debug!(
                    partial = %String::from_utf8_lossy(&self.call_bytes),
                    "local model: the token budget ended inside a tool call"
                );
                return Err(LocalModelError::ToolCallCutOff {
                    max_tokens: self.max_tokens,
                });
            }
            let call = parse_tool_call(&self.call_bytes, tools);
            if !sink.send(ModelEvent::ToolCall(call)) {
                return Ok(());
            }
            sink.send(ModelEvent::Finish {
                reason: FinishReason::ToolCalls,
                usage,
            });
            return Ok(());
        }
        let rest = self.assembler.finish();
        if !rest.is_empty() && !sink.send(ModelEvent::TextDelta(rest)) {
            return Ok(());
        }
        sink.send(ModelEvent::Finish {
            reason: finish,
            usage,
        });
        Ok(())
    }
}

/// The tool's name in a call's text so far (`…{"name": "ask_user", …`), once it is complete.
fn written_name(bytes: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(bytes);
    let key = text.find("\"name\"")?;
    let rest = text[key + "\"name\"".len()..].trim_start();
    let rest = rest.strip_prefix(':')?.trim_start().strip_prefix('"')?;
    let end = rest.find('"')?;
    Some(rest[..end].to_owned())
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

    #[test]
    fn issue33_a_calls_name_is_read_once_it_is_written() {
        assert_eq!(written_name(b"<tool_call>\n{\"name\": \"ask_"), None);
        assert_eq!(
            written_name(b"<tool_call>\n{\"name\": \"ask_user\", \"argu"),
            Some("ask_user".to_owned())
        );
        assert_eq!(written_name(b"{\"name\":\"pay\""), Some("pay".to_owned()));
        assert_eq!(written_name(b"{\"arguments\": {}"), None);
    }
}
