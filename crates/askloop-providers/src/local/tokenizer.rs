//! [`LocalTokenizer`]: the byte-level BPE tokenizer built from a GGUF file's own vocabulary.
//!
//! GGUF files of the `gpt2` tokenizer family carry the vocabulary (`tokenizer.ggml.tokens`), the
//! merges and each token's type, but not the pre-tokenizer settings. These are SmolLM2's (its
//! `tokenizer.json`): digits split one by one, then GPT-2's byte-level split with no prefix
//! space; control tokens (type 3) are special and matched whole in the input. candle's generic
//! GGUF tokenizer adds a prefix space and keeps digit runs together, so it disagrees with the
//! model's reference tokenizer on most text; this one matches it (pinned by a test against ids
//! from Hugging Face `tokenizers`).

use std::path::Path;
use std::sync::Arc;

use candle_core::quantized::gguf_file;
use llguidance::toktrie::{TokEnv, TokRxInfo, TokTrie, TokenizerEnv};
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::{AddedToken, Tokenizer};

use crate::local::error::LocalModelError;

/// GGUF token type of control (special) tokens.
const CONTROL_TOKEN: i32 = 3;

/// The tokenizer of a local model.
pub struct LocalTokenizer {
    inner: Tokenizer,
    token_bytes: Vec<Vec<u8>>,
    special: Vec<bool>,
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

impl LocalTokenizer {
    /// Builds the tokenizer from a GGUF file's metadata.
    ///
    /// # Errors
    /// [`LocalModelError::UnsupportedArchitecture`] for a tokenizer model other than `gpt2`;
    /// [`LocalModelError::MissingMetadata`]; [`LocalModelError::Tokenizer`].
    pub fn from_gguf(path: &Path, content: &gguf_file::Content) -> Result<Self, LocalModelError> {
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
        let tokens = string_array(path, content, "tokenizer.ggml.tokens")?;
        let merges = string_array(path, content, "tokenizer.ggml.merges")?;
        let types: Vec<i32> = content
            .metadata
            .get("tokenizer.ggml.token_type")
            .and_then(|value| value.to_vec().ok())
            .map(|values| {
                values
                    .iter()
                    .map(|value| value.to_i32().unwrap_or(1))
                    .collect()
            })
            .unwrap_or_else(|| vec![1; tokens.len()]);
        let merges = merges
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
            .collect::<Result<Vec<_>, _>>()?;
        let tokenizer_error = |source: tokenizers::Error| LocalModelError::Tokenizer {
            path: path.to_path_buf(),
            source,
        };
        let vocab: tokenizers::models::bpe::Vocab = tokens
            .iter()
            .enumerate()
            .map(|(id, token)| (token.clone(), id as u32))
            .collect();
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .map_err(tokenizer_error)?;
        let mut inner = Tokenizer::new(bpe);
        inner.with_pre_tokenizer(Some(Sequence::new(vec![
            Digits::new(true).into(),
            ByteLevel::new(false, true, true).into(),
        ])));
        inner.with_decoder(Some(ByteLevelDecoder::default()));
        let special: Vec<bool> = (0..tokens.len())
            .map(|id| types.get(id) == Some(&CONTROL_TOKEN))
            .collect();
        let special_tokens: Vec<AddedToken> = tokens
            .iter()
            .zip(&special)
            .filter(|(_, special)| **special)
            .map(|(token, _)| AddedToken::from(token.clone(), true).normalized(false))
            .collect();
        inner
            .add_special_tokens(special_tokens)
            .map_err(tokenizer_error)?;

        let table = byte_to_char_table();
        let mut char_to_byte = std::collections::HashMap::new();
        for (byte, character) in table.iter().enumerate() {
            char_to_byte.insert(*character, byte as u8);
        }
        let token_bytes = tokens
            .iter()
            .zip(&special)
            .map(|(token, special)| {
                if *special {
                    token.as_bytes().to_vec()
                } else {
                    token
                        .chars()
                        .map(|character| {
                            // A character outside the byte map (not expected) stands for itself.
                            char_to_byte.get(&character).copied().map_or_else(
                                || character.to_string().into_bytes(),
                                |byte| vec![byte],
                            )
                        })
                        .collect::<Vec<_>>()
                        .concat()
                }
            })
            .collect();
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
            token_bytes,
            special,
            end_of_turn,
            end_of_text,
        })
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
