//! [`Network`]: the forward pass a GGUF file's architecture needs, and the chat format that goes
//! with it.

use std::path::Path;

use candle_core::quantized::gguf_file;

use crate::local::config::LlamaConfig;
use crate::local::error::LocalModelError;
use crate::local::kv_cache::KvCache;
use crate::local::llama::LlamaModel;
use crate::local::qwen2::Qwen2Model;
use crate::local::template::ChatFormat;

/// A loaded model's weights, by architecture (`general.architecture`).
pub(crate) enum Network {
    /// `llama` (SmolLM2): fused projections with dense copies for prompts, tuned for a 135M
    /// model.
    Llama(LlamaModel),
    /// `qwen2` (Qwen2.5): candle-transformers' projections with biases, every matrix quantized.
    Qwen2(Qwen2Model),
}

impl Network {
    /// Loads the weights of a GGUF file of a supported architecture.
    ///
    /// # Errors
    /// [`LocalModelError::UnsupportedArchitecture`] for another architecture; the loaders'
    /// errors.
    pub(crate) fn load(path: &Path, content: &gguf_file::Content) -> Result<Self, LocalModelError> {
        let architecture = content
            .metadata
            .get("general.architecture")
            .and_then(|value| value.to_string().ok())
            .cloned()
            .unwrap_or_default();
        match architecture.as_str() {
            "llama" => LlamaModel::load(path, content).map(Self::Llama),
            "qwen2" => Qwen2Model::load(path, content).map(Self::Qwen2),
            _ => Err(LocalModelError::UnsupportedArchitecture {
                path: path.to_path_buf(),
                architecture,
            }),
        }
    }

    /// The model's hyper-parameters.
    pub(crate) fn config(&self) -> &LlamaConfig {
        match self {
            Self::Llama(model) => model.config(),
            Self::Qwen2(model) => model.config(),
        }
    }

    /// Positions the model runs.
    pub(crate) fn context_length(&self) -> usize {
        self.config().context_length
    }

    /// The chat format the model was tuned on.
    pub(crate) fn chat_format(&self) -> ChatFormat {
        match self {
            Self::Llama(_) => ChatFormat::ChatMl,
            Self::Qwen2(_) => ChatFormat::Qwen,
        }
    }

    /// Runs `tokens` (positions `cache.len()..`) through the model, appending to `cache`, and
    /// returns the logits of the last token.
    pub(crate) fn forward(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
    ) -> candle_core::Result<Vec<f32>> {
        match self {
            Self::Llama(model) => model.forward(tokens, cache),
            Self::Qwen2(model) => model.forward(tokens, cache),
        }
    }
}
