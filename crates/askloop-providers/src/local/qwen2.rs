//! The `qwen2` forward pass (Qwen2.5-Coder-1.5B-Instruct): candle-transformers' quantized Qwen2,
//! adapted in two places.
//!
//! The layers are candle-transformers' own (`quantized_nn::Linear` with the Q/K/V biases,
//! `quantized_nn::RmsNorm`), laid out as in its `models::quantized_qwen2`: NEOX rotary
//! embeddings, grouped-query attention, SiLU-gated MLP, a separate output matrix (or the tied
//! embedding). Every matrix stays in its GGUF block format (Q4_K, Q6_K, …) and is multiplied by
//! candle's quantized kernels. Two things differ from `quantized_qwen2::ModelWeights`:
//!
//! - **The embedding stays quantized.** candle-transformers dequantizes the token embedding to
//!   dense f32 (151,936 × 1,536 values, 0.93 GB); here only the rows of the tokens looked up are
//!   dequantized ([`QTensor::embedding`]).
//! - **The KV cache is the caller's** ([`KvCache`], shared with the llama path), so a call can
//!   keep the complete prompt blocks of the previous call and truncate the rest; candle's
//!   model owns its cache and can only clear it.
//!
//! Grouped-query attention folds each key/value head's query heads into rows instead of copying
//! the keys and values per query head (`repeat_kv`), which would copy the whole cache at every
//! token.

use std::path::Path;
use std::sync::Arc;

use candle_core::quantized::{QMatMul, QTensor, gguf_file};
use candle_core::{DType, Device, IndexOp, Module, Tensor};
use candle_transformers::quantized_nn::{Linear, RmsNorm};

use crate::local::error::LocalModelError;
use crate::local::llama::{KvCache, LlamaConfig, causal_mask, rotary_tables};
use crate::local::weights::{Tensors, read_tensors};

/// Positions the rotary tables cover at most (the model knows 32,768; prompts here stay far
/// shorter, and the tables cost 0.5 MB per 1,024 positions).
const MAX_CONTEXT: usize = 8192;

/// The hyper-parameters of a `qwen2` GGUF file (the llama-like set under `qwen2.`), its
/// context length capped at [`MAX_CONTEXT`].
///
/// # Errors
/// [`LocalModelError::MissingMetadata`].
fn read_config(path: &Path, content: &gguf_file::Content) -> Result<LlamaConfig, LocalModelError> {
    let mut config = LlamaConfig::read(path, content, "qwen2", MAX_CONTEXT)?;
    config.context_length = config.context_length.min(MAX_CONTEXT);
    Ok(config)
}

struct Block {
    attention_norm: RmsNorm,
    query: Linear,
    key: Linear,
    value: Linear,
    attention_output: Linear,
    ffn_norm: RmsNorm,
    gate: Linear,
    up: Linear,
    down: Linear,
}

/// A `qwen2` model's weights, shared read-only by every generation.
pub(crate) struct Qwen2Model {
    config: LlamaConfig,
    /// The token embedding, quantized; rows are dequantized as they are looked up. With tied
    /// embeddings (no `output.weight`, as in Qwen2.5-1.5B) the output matrix shares it.
    embedding: Arc<QTensor>,
    blocks: Vec<Block>,
    output_norm: RmsNorm,
    output: QMatMul,
    cos: Tensor,
    sin: Tensor,
}

impl Qwen2Model {
    /// Loads the weights of a `qwen2` GGUF file.
    ///
    /// # Errors
    /// [`LocalModelError::Read`], [`LocalModelError::InvalidGguf`],
    /// [`LocalModelError::MissingMetadata`].
    pub(crate) fn load(path: &Path, content: &gguf_file::Content) -> Result<Self, LocalModelError> {
        let config = read_config(path, content)?;
        // The blocks' matrices multiply whole prompt blocks; the output matrix one row.
        let mut tensors = read_tensors(path, content, |name| {
            name.starts_with("blk.") && name.ends_with(".weight")
        })?;
        let embedding = tensors.take("token_embd.weight")?;
        let output_norm =
            RmsNorm::from_qtensor(tensors.take_owned("output_norm.weight")?, config.rms_eps)
                .map_err(|source| tensors.invalid(source))?;
        // Tied embeddings: the output matrix is the embedding's blocks, read and kept once.
        let output = if tensors.contains("output.weight") {
            QMatMul::from_arc(tensors.take("output.weight")?)
        } else {
            QMatMul::from_arc(embedding.clone())
        }
        .map_err(|source| tensors.invalid(source))?;
        let mut blocks = Vec::with_capacity(config.layers);
        for index in 0..config.layers {
            let eps = config.rms_eps;
            let tensors = &mut tensors;
            blocks.push(Block {
                attention_norm: norm(tensors, index, "attn_norm", eps)?,
                query: linear(tensors, index, "attn_q", true)?,
                key: linear(tensors, index, "attn_k", true)?,
                value: linear(tensors, index, "attn_v", true)?,
                attention_output: linear(tensors, index, "attn_output", false)?,
                ffn_norm: norm(tensors, index, "ffn_norm", eps)?,
                gate: linear(tensors, index, "ffn_gate", false)?,
                up: linear(tensors, index, "ffn_up", false)?,
                down: linear(tensors, index, "ffn_down", false)?,
            });
        }
        let (cos, sin) = rotary_tables(&config).map_err(|source| tensors.invalid(source))?;
        Ok(Self {
            config,
            embedding,
            blocks,
            output_norm,
            output,
            cos,
            sin,
        })
    }

    /// The model's hyper-parameters.
    pub(crate) fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// Runs `tokens` (positions `cache.len()..`) through the model, appending to `cache`, and
    /// returns the logits of the last token.
    pub(crate) fn forward(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
    ) -> candle_core::Result<Vec<f32>> {
        let seq_len = tokens.len();
        if seq_len == 0 {
            candle_core::bail!("no tokens to process");
        }
        let start = cache.len();
        if start + seq_len > self.config.context_length {
            candle_core::bail!(
                "{} tokens exceed the context length {}",
                start + seq_len,
                self.config.context_length
            );
        }
        let slots = cache.slots(self.blocks.len());
        let ids = Tensor::new(tokens, &Device::Cpu)?;
        let mut x = self.embedding.embedding(&ids)?;
        let mask = causal_mask(start, seq_len)?;
        let cos = self.cos.narrow(0, start, seq_len)?;
        let sin = self.sin.narrow(0, start, seq_len)?;
        for (block, slot) in self.blocks.iter().zip(slots.iter_mut()) {
            let residual = x.clone();
            let normed = block.attention_norm.forward(&x)?;
            let attention = self.attention(block, &normed, slot, mask.as_ref(), &cos, &sin)?;
            x = (attention + residual)?;
            let residual = x.clone();
            let normed = block.ffn_norm.forward(&x)?;
            let gate = candle_nn::ops::silu(&block.gate.forward(&normed)?)?;
            let up = block.up.forward(&normed)?;
            x = (block.down.forward(&(gate * up)?)? + residual)?;
        }
        cache.advance(seq_len);
        let last = x.i((seq_len - 1)..seq_len)?;
        let normed = self.output_norm.forward(&last)?;
        let logits = self.output.forward(&normed)?;
        logits.squeeze(0)?.to_dtype(DType::F32)?.to_vec1()
    }

    fn attention(
        &self,
        block: &Block,
        x: &Tensor,
        slot: &mut Option<(Tensor, Tensor)>,
        mask: Option<&Tensor>,
        cos: &Tensor,
        sin: &Tensor,
    ) -> candle_core::Result<Tensor> {
        let config = &self.config;
        let seq_len = x.dim(0)?;
        let heads = |t: Tensor, count: usize| -> candle_core::Result<Tensor> {
            t.reshape((1, seq_len, count, config.head_dim))?
                .transpose(1, 2)?
                .contiguous()
        };
        let query = heads(block.query.forward(x)?, config.heads)?;
        let key = heads(block.key.forward(x)?, config.kv_heads)?;
        let value = heads(block.value.forward(x)?, config.kv_heads)?;
        let query = candle_nn::rotary_emb::rope(&query, cos, sin)?;
        let key = candle_nn::rotary_emb::rope(&key, cos, sin)?;
        let (key, value) = match slot.take() {
            Some((cached_key, cached_value)) => (
                Tensor::cat(&[&cached_key, &key], 2)?,
                Tensor::cat(&[&cached_value, &value], 2)?,
            ),
            None => (key, value),
        };
        *slot = Some((key.clone(), value.clone()));
        // Grouped-query attention: the query heads of one kv head become rows of one matrix.
        let group = config.heads / config.kv_heads;
        let total = key.dim(2)?;
        let query = query.reshape((config.kv_heads, group * seq_len, config.head_dim))?;
        let key = key.squeeze(0)?;
        let value = value.squeeze(0)?;
        let scale = 1.0 / (config.head_dim as f64).sqrt();
        let scores = (query.matmul(&key.t()?)? * scale)?;
        let scores = match mask {
            Some(mask) => scores
                .reshape((config.kv_heads, group, seq_len, total))?
                .broadcast_add(mask)?
                .reshape((config.kv_heads, group * seq_len, total))?,
            None => scores,
        };
        let weights = candle_nn::ops::softmax_last_dim(&scores)?;
        let output = weights.matmul(&value)?;
        output
            .reshape((config.heads, seq_len, config.head_dim))?
            .transpose(0, 1)?
            .reshape((seq_len, config.hidden))
            .and_then(|output| block.attention_output.forward(&output))
    }
}

/// The projection `blk.{index}.{name}`: quantized weights, and its bias if it has one.
fn linear(
    tensors: &mut Tensors,
    index: usize,
    name: &str,
    bias: bool,
) -> Result<Linear, LocalModelError> {
    let weight = tensors.take(&format!("blk.{index}.{name}.weight"))?;
    let bias = if bias {
        let bias = tensors.take(&format!("blk.{index}.{name}.bias"))?;
        Some(
            bias.dequantize(&Device::Cpu)
                .map_err(|source| tensors.invalid(source))?,
        )
    } else {
        None
    };
    Linear::from_arc(weight, bias).map_err(|source| tensors.invalid(source))
}

/// The RMS norm `blk.{index}.{name}`.
fn norm(
    tensors: &mut Tensors,
    index: usize,
    name: &str,
    eps: f64,
) -> Result<RmsNorm, LocalModelError> {
    let weight = tensors.take_owned(&format!("blk.{index}.{name}.weight"))?;
    RmsNorm::from_qtensor(weight, eps).map_err(|source| tensors.invalid(source))
}
