//! [`LlamaConfig`]: the hyper-parameters of a llama-like model (`llama`, `qwen2`), read from
//! GGUF metadata.

use std::path::Path;

use candle_core::quantized::gguf_file;

use crate::local::error::LocalModelError;

/// The hyper-parameters of a llama-like model (`llama`, `qwen2`), read from GGUF metadata.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct LlamaConfig {
    /// Transformer blocks.
    pub(crate) layers: usize,
    /// Width of the residual stream.
    pub(crate) hidden: usize,
    /// Attention (query) heads.
    pub(crate) heads: usize,
    /// Key/value heads (grouped-query attention).
    pub(crate) kv_heads: usize,
    /// Width of one head.
    pub(crate) head_dim: usize,
    /// Rotary embedding base frequency.
    pub(crate) rope_base: f32,
    /// RMS norm epsilon.
    pub(crate) rms_eps: f64,
    /// Longest sequence the model was trained for.
    pub(crate) context_length: usize,
}

fn metadata_u32(content: &gguf_file::Content, key: &str) -> Result<usize, String> {
    content
        .metadata
        .get(key)
        .and_then(|value| value.to_u32().ok())
        .map(|value| value as usize)
        .ok_or_else(|| key.to_owned())
}

fn metadata_f32(content: &gguf_file::Content, key: &str) -> Result<f32, String> {
    content
        .metadata
        .get(key)
        .and_then(|value| value.to_f32().ok())
        .ok_or_else(|| key.to_owned())
}

impl LlamaConfig {
    /// Reads the hyper-parameters under `prefix` (`llama`, `qwen2`: the keys of the GGUF
    /// specification, e.g. `PREFIX.embedding_length`); `default_context` when the file gives
    /// no context length.
    ///
    /// # Errors
    /// [`LocalModelError::MissingMetadata`].
    pub(crate) fn read(
        path: &Path,
        content: &gguf_file::Content,
        prefix: &str,
        default_context: usize,
    ) -> Result<Self, LocalModelError> {
        let missing = |key: String| LocalModelError::MissingMetadata {
            path: path.to_path_buf(),
            key,
        };
        let key = |name: &str| format!("{prefix}.{name}");
        let hidden = metadata_u32(content, &key("embedding_length")).map_err(missing)?;
        let heads = metadata_u32(content, &key("attention.head_count")).map_err(missing)?;
        let kv_heads = metadata_u32(content, &key("attention.head_count_kv")).unwrap_or(heads);
        let rope_base = metadata_f32(content, &key("rope.freq_base")).unwrap_or(10_000.0);
        let rms_eps =
            metadata_f32(content, &key("attention.layer_norm_rms_epsilon")).map_err(missing)?;
        let layers = metadata_u32(content, &key("block_count")).map_err(missing)?;
        let context_length =
            metadata_u32(content, &key("context_length")).unwrap_or(default_context);
        if heads == 0 || kv_heads == 0 || hidden % heads != 0 || heads % kv_heads != 0 {
            return Err(missing(format!(
                "{prefix}.attention.head_count (consistent with embedding_length)"
            )));
        }
        Ok(Self {
            layers,
            hidden,
            heads,
            kv_heads,
            head_dim: hidden / heads,
            rope_base,
            rms_eps: f64::from(rms_eps),
            context_length,
        })
    }
}
