//! [`LocalTokenizer`]: the byte-level BPE tokenizer built from a GGUF file's own vocabulary.
//!
//! GGUF files of the `gpt2` tokenizer family carry the vocabulary (`tokenizer.ggml.tokens`), the
//! merges and each token's type, but not the pre-tokenizer itself: only its name,
//! `tokenizer.ggml.pre`, which picks one of these ([`PreTokenizer`]):
//!
//! - `smollm` (and files without the key): SmolLM2's `tokenizer.json`: digits split one by one,
//!   then GPT-2's byte-level split with no prefix space.
//! - `qwen2`: one split by Qwen2's own pattern (unlike GPT-2's, letters may take one leading
//!   non-letter, digits go one by one, and punctuation runs keep their line breaks), then
//!   byte-level without a regex of its own. Like llama.cpp (and unlike Hugging Face's
//!   `tokenizer.json`, which applies NFC first), the text is not normalized, so decoding gives
//!   back exactly the text encoded.
//!
//! Control tokens (type 3) and user-defined tokens (type 4, such as Qwen's `<tool_call>`) are
//! matched whole in the input, never split; control tokens are special (masked in plain text).
//! candle's generic GGUF tokenizer adds a prefix space and keeps digit runs together, so it
//! disagrees with the models' reference tokenizers on most text; this one matches them (pinned
//! by tests against ids from independent implementations).

use std::path::Path;
use std::sync::Arc;

use candle_core::quantized::gguf_file;
use llguidance::toktrie::{TokEnv, TokRxInfo, TokTrie, TokenizerEnv};
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, SplitDelimiterBehavior, Tokenizer};

use crate::local::error::LocalModelError;
use crate::local::script::TokenScripts;

/// GGUF token type of control (special) tokens.
const CONTROL_TOKEN: i32 = 3;
/// GGUF token type of user-defined tokens (added tokens that are not control tokens).
const USER_DEFINED_TOKEN: i32 = 4;

/// Qwen2's split pattern, from its `tokenizer.json`.
const QWEN2_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The pre-tokenizers this tokenizer knows, by the GGUF key `tokenizer.ggml.pre`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PreTokenizer {
    /// `smollm` (also files without the key): digits one by one, then GPT-2's byte-level split.
    SmolLm,
    /// `qwen2`: Qwen2's split pattern, then byte-level.
    Qwen2,
}

impl PreTokenizer {
    /// The pre-tokenizer a GGUF file names; `None` for a name this tokenizer does not know.
    pub fn from_gguf_name(name: Option<&str>) -> Option<Self> {
        match name {
            None | Some("smollm") => Some(Self::SmolLm),
            Some("qwen2") => Some(Self::Qwen2),
            Some(_) => None,
        }
    }
}

/// The tokenizer of a local model.
pub struct LocalTokenizer {
    inner: Tokenizer,
    pre: PreTokenizer,
    token_bytes: Vec<Vec<u8>>,
    special: Vec<bool>,
    /// Each token's scripts, computed once (special tokens have none).
    scripts: TokenScripts,
    end_of_turn: u32,
    end_of_text: Option<u32>,
}

impl std::fmt::Debug for LocalTokenizer {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("LocalTokenizer")
            .field("vocab_size", &self.token_bytes.len())
            .field("end_of_turn", &self.end_of_turn)
            .finish_non_exhaustive()
    }
}

/// GPT-2's map from bytes to the printable characters byte-level BPE vocabularies are written in.
fn byte_to_char_table() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut next = 256u32;
    for byte in 0..=255u8 {
        let printable = matches!(byte, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        table[usize::from(byte)] = if printable {
            char::from(byte)
        } else {
            let mapped = char::from_u32(next).unwrap_or('\0');
            next += 1;
            mapped
        };
    }
    table
}

fn string_array(
    path: &Path,
    content: &gguf_file::Content,
    key: &str,
) -> Result<Vec<String>, LocalModelError> {
    let missing = || LocalModelError::MissingMetadata {
        path: path.to_path_buf(),
        key: key.to_owned(),
    };
    let values = content
        .metadata
        .get(key)
        .and_then(|value| value.to_vec().ok())
        .ok_or_else(missing)?;
    values
        .iter()
        .map(|value| value.to_string().cloned().map_err(|_| missing()))
        .collect()
}

/// The pre-tokenizer of a GGUF file of the `gpt2` tokenizer family.
///
/// # Errors
/// [`LocalModelError::UnsupportedArchitecture`] for another tokenizer model or an unknown
/// pre-tokenizer.
fn file_pre_tokenizer(
    path: &Path,
    content: &gguf_file::Content,
) -> Result<PreTokenizer, LocalModelError> {
    let model = content
        .metadata
        .get("tokenizer.ggml.model")
        .and_then(|value| value.to_string().ok())
        .cloned()
        .unwrap_or_default();
    if model != "gpt2" {
        return Err(LocalModelError::UnsupportedArchitecture {
            path: path.to_path_buf(),
            architecture: format!("tokenizer {model}"),
        });
    }
    let pre_name = content
        .metadata
        .get("tokenizer.ggml.pre")
        .and_then(|value| value.to_string().ok())
        .cloned();
    PreTokenizer::from_gguf_name(pre_name.as_deref()).ok_or_else(|| {
        LocalModelError::UnsupportedArchitecture {
            path: path.to_path_buf(),
            architecture: format!(
                "pre-tokenizer {} (known: smollm, qwen2)",
                pre_name.as_deref().unwrap_or_default()
            ),
        }
    })
}

/// Each token's GGUF type (`tokenizer.ggml.token_type`); normal (1) when the file gives none.
fn token_types(content: &gguf_file::Content, count: usize) -> Vec<i32> {
    content
        .metadata
        .get("tokenizer.ggml.token_type")
        .and_then(|value| value.to_vec().ok())
        .map(|values| {
            values
                .iter()
                .map(|value| value.to_i32().unwrap_or(1))
                .collect()
        })
        .unwrap_or_else(|| vec![1; count])
}

/// The merges (`"A B"` each) as pairs.
///
/// # Errors
/// [`LocalModelError::MissingMetadata`] for a merge that is not two tokens.
fn merge_pairs(path: &Path, merges: &[String]) -> Result<Vec<(String, String)>, LocalModelError> {
    merges
        .iter()
        .map(|merge| {
            merge
                .split_once(' ')
                .map(|(left, right)| (left.to_owned(), right.to_owned()))
                .ok_or_else(|| LocalModelError::MissingMetadata {
                    path: path.to_path_buf(),
                    key: format!("tokenizer.ggml.merges (entry {merge:?} is not \"A B\")"),
                })
        })
        .collect()
}

/// The byte-level BPE model of `tokens` and `merges` with the pre-tokenizer `pre` and the
/// byte-level decoder; added tokens come later.
fn bpe_tokenizer(
    tokens: &[String],
    merges: Vec<(String, String)>,
    pre: PreTokenizer,
) -> Result<Tokenizer, tokenizers::Error> {
    let vocab: tokenizers::models::bpe::Vocab = tokens
        .iter()
        .enumerate()
        .map(|(id, token)| (token.clone(), id as u32))
        .collect();
    let bpe = BPE::builder().vocab_and_merges(vocab, merges).build()?;
    let mut inner = Tokenizer::new(bpe);
    match pre {
        PreTokenizer::SmolLm => {
            inner.with_pre_tokenizer(Some(Sequence::new(vec![
                Digits::new(true).into(),
                ByteLevel::new(false, true, true).into(),
            ])));
        }
        PreTokenizer::Qwen2 => {
            let split = Split::new(
                SplitPattern::Regex(QWEN2_PATTERN.to_owned()),
                SplitDelimiterBehavior::Isolated,
                false,
            )?;
            inner.with_pre_tokenizer(Some(Sequence::new(vec![
                split.into(),
                ByteLevel::new(false, false, false).into(),
            ])));
        }
    }
    inner.with_decoder(Some(ByteLevelDecoder::default()));
    Ok(inner)
}

/// The bytes each token stands for: an added token's are its name, a byte-level token's the
/// bytes its characters map back to.
fn tokens_as_bytes(tokens: &[String], added: &[bool]) -> Vec<Vec<u8>> {
    let table = byte_to_char_table();
    let mut char_to_byte = std::collections::HashMap::new();
    for (byte, character) in table.iter().enumerate() {
        char_to_byte.insert(*character, byte as u8);
    }
    tokens
        .iter()
        .zip(added)
        .map(|(token, added)| {
            if *added {
                token.as_bytes().to_vec()
            } else {
                token
                    .chars()
                    .map(|character| {
                        // A character outside the byte map (not expected) stands for itself.
                        char_to_byte
                            .get(&character)
                            .copied()
                            .map_or_else(|| character.to_string().into_bytes(), |byte| vec![byte])
                    })
                    .collect::<Vec<_>>()
                    .concat()
            }
        })
        .collect()
}

impl LocalTokenizer {
    /// Builds the tokenizer from a GGUF file's metadata.
    ///
    /// # Errors
    /// [`LocalModelError::UnsupportedArchitecture`] for a tokenizer model other than `gpt2`;
    /// [`LocalModelError::MissingMetadata`]; [`LocalModelError::Tokenizer`].
    pub fn from_gguf(path: &Path, content: &gguf_file::Content) -> Result<Self, LocalModelError> {
        let pre = file_pre_tokenizer(path, content)?;
        let tokens = string_array(path, content, "tokenizer.ggml.tokens")?;
        let merges = string_array(path, content, "tokenizer.ggml.merges")?;
        let types = token_types(content, tokens.len());
        let merges = merge_pairs(path, &merges)?;
        let tokenizer_error = |source: tokenizers::Error| LocalModelError::Tokenizer {
            path: path.to_path_buf(),
            source,
        };
        let mut inner = bpe_tokenizer(&tokens, merges, pre).map_err(tokenizer_error)?;
        let special: Vec<bool> = (0..tokens.len())
            .map(|id| types.get(id) == Some(&CONTROL_TOKEN))
            .collect();
        // Added tokens: written as themselves (not in the byte-level alphabet), matched whole.
        let added: Vec<bool> = (0..tokens.len())
            .map(|id| matches!(types.get(id), Some(&CONTROL_TOKEN | &USER_DEFINED_TOKEN)))
            .collect();
        let added_tokens = |wanted: bool| -> Vec<AddedToken> {
            tokens
                .iter()
                .enumerate()
                .filter(|(id, _)| added[*id] && special[*id] == wanted)
                .map(|(_, token)| AddedToken::from(token.clone(), wanted).normalized(false))
                .collect()
        };
        inner
            .add_special_tokens(added_tokens(true))
            .map_err(tokenizer_error)?;
        inner
            .add_tokens(added_tokens(false))
            .map_err(tokenizer_error)?;
        let token_bytes = tokens_as_bytes(&tokens, &added);
        let scripts = TokenScripts::new(
            token_bytes
                .iter()
                .zip(&special)
                .map(|(bytes, special)| (!*special).then_some(bytes.as_slice())),
        );
        let end_of_turn = inner
            .token_to_id("<|im_end|>")
            .or_else(|| {
                content
                    .metadata
                    .get("tokenizer.ggml.eos_token_id")
                    .and_then(|value| value.to_u32().ok())
            })
            .ok_or_else(|| LocalModelError::MissingMetadata {
                path: path.to_path_buf(),
                key: "tokenizer.ggml.eos_token_id".to_owned(),
            })?;
        let end_of_text = inner.token_to_id("<|endoftext|>");
        Ok(Self {
            inner,
            pre,
            token_bytes,
            special,
            scripts,
            end_of_turn,
            end_of_text,
        })
    }

    /// The pre-tokenizer the file named.
    pub fn pre_tokenizer(&self) -> PreTokenizer {
        self.pre
    }

    /// The token ids of `text`; special token names in it (`<|im_start|>`, …) become their ids.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        match self.inner.encode_fast(text, false) {
            Ok(encoding) => encoding.get_ids().to_vec(),
            // The BPE model knows every byte, so encoding cannot fail; stay total anyway.
            Err(_) => Vec::new(),
        }
    }

    /// The bytes of a token; a special token's bytes are its name.
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        self.token_bytes
            .get(id as usize)
            .map_or(&[], |bytes| bytes.as_slice())
    }

    /// The text of a sequence of tokens (lossy for cut UTF-8), special tokens included.
    pub fn decode(&self, ids: &[u32]) -> String {
        let bytes: Vec<u8> = ids
            .iter()
            .flat_map(|id| self.token_bytes(*id).iter().copied())
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// The scripts each token writes, by id ([`ScriptSet::of_bytes`](crate::local::ScriptSet::of_bytes)),
    /// computed once when the tokenizer is built.
    pub(crate) fn token_scripts(&self) -> &TokenScripts {
        &self.scripts
    }

    /// Whether a token is a control token.
    pub fn is_special(&self, id: u32) -> bool {
        self.special.get(id as usize).copied().unwrap_or(false)
    }

    /// The id of a token by its vocabulary entry (e.g. `"<|im_start|>"`).
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The end-of-turn token (`<|im_end|>`, id 2 in SmolLM2).
    pub fn end_of_turn(&self) -> u32 {
        self.end_of_turn
    }

    /// The end-of-text token, if the vocabulary has one.
    pub fn end_of_text(&self) -> Option<u32> {
        self.end_of_text
    }

    /// Vocabulary size.
    pub fn vocab_size(&self) -> usize {
        self.token_bytes.len()
    }

    /// This tokenizer as llguidance sees it: a token trie with special tokens marked.
    pub(crate) fn tok_env(self: &Arc<Self>) -> TokEnv {
        let words: Vec<Vec<u8>> = self
            .token_bytes
            .iter()
            .zip(&self.special)
            .map(|(bytes, special)| {
                if *special {
                    let mut marked = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                    marked.extend_from_slice(bytes);
                    marked
                } else {
                    bytes.clone()
                }
            })
            .collect();
        let mut info = TokRxInfo::new(words.len() as u32, self.end_of_turn);
        info.tok_end_of_turn = Some(self.end_of_turn);
        info.tok_unk = None;
        let trie = TokTrie::from(&info, &words);
        Arc::new(GuidanceTokenizer {
            trie,
            tokenizer: Arc::clone(self),
        })
    }
}

/// [`LocalTokenizer`] as an llguidance tokenizer environment.
struct GuidanceTokenizer {
    trie: TokTrie,
    tokenizer: Arc<LocalTokenizer>,
}

impl TokenizerEnv for GuidanceTokenizer {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, bytes: &[u8]) -> Vec<u32> {
        match std::str::from_utf8(bytes) {
            Ok(text) => self.tokenizer.encode(text),
            Err(_) => self.trie.greedy_tokenize(bytes),
        }
    }
}

/// Turns a stream of tokens into text pieces, holding back bytes of an unfinished UTF-8
/// character until it completes.
#[derive(Debug, Default)]
pub(crate) struct TextAssembler {
    pending: Vec<u8>,
}

impl TextAssembler {
    /// Adds a token's bytes; returns the text that is now complete (possibly empty).
    pub(crate) fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        match std::str::from_utf8(&self.pending) {
            Ok(text) => {
                let text = text.to_owned();
                self.pending.clear();
                text
            }
            Err(error) => {
                let valid = error.valid_up_to();
                // A hard error (not just an unfinished character) can never complete: flush it.
                if error.error_len().is_some() {
                    let text = String::from_utf8_lossy(&self.pending).into_owned();
                    self.pending.clear();
                    return text;
                }
                let text = String::from_utf8_lossy(&self.pending[..valid]).into_owned();
                self.pending.drain(..valid);
                text
            }
        }
    }

    /// The bytes still held back, as lossy text.
    pub(crate) fn finish(&mut self) -> String {
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        text
    }
}
