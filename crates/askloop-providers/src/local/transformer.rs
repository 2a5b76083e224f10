//! [`Transformer`]: the layers `llama` and `qwen2` share: token embedding, RMS norms, rotary
//! embeddings, grouped-query attention over the caller's [`KvCache`], the SiLU-gated MLP, and
//! the output projection (or the tied embedding). What differs between them, the block's
//! projections ([`Projections`]) and the rotary layout ([`Rotary`]), each architecture's file
//! supplies.
//!
//! Grouped-query attention folds each key/value head's query heads into rows instead of copying
//! the keys and values per query head (`repeat_kv`), which would copy the whole cache at every
//! token.

use std::sync::Arc;

use candle_core::quantized::QTensor;
use candle_core::{DType, Device, IndexOp, Module, Tensor};
use candle_transformers::quantized_nn::RmsNorm;

use crate::local::config::LlamaConfig;
use crate::local::error::LocalModelError;
use crate::local::kv_cache::KvCache;
use crate::local::linear::Projection;
use crate::local::weights::Tensors;

/// The matrices of one block, which each architecture lays out its own way.
pub(crate) trait Projections {
    /// The queries, keys and values of `x` (tokens, hidden): (tokens, heads × head_dim),
    /// (tokens, kv_heads × head_dim) twice.
    fn query_key_value(
        &self,
        x: &Tensor,
        config: &LlamaConfig,
    ) -> candle_core::Result<(Tensor, Tensor, Tensor)>;

    /// The attention's output projection: (tokens, hidden) → (tokens, hidden).
    fn attention_output(&self, x: &Tensor) -> candle_core::Result<Tensor>;

    /// The MLP's gate and up projections of `x`: (tokens, intermediate) each.
    fn gate_up(&self, x: &Tensor) -> candle_core::Result<(Tensor, Tensor)>;

    /// The MLP's down projection: (tokens, intermediate) → (tokens, hidden).
    fn down(&self, x: &Tensor) -> candle_core::Result<Tensor>;
}

/// How the rotary embedding pairs a head's dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rotary {
    /// Neighbours (0, 1), (2, 3), … (`llama` in GGUF, whose Q/K rows are permuted for it).
    Interleaved,
    /// The two halves (i, i + head_dim / 2), GPT-NeoX's layout (`qwen2`).
    Halves,
}

impl Rotary {
    fn apply(self, x: &Tensor, cos: &Tensor, sin: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Self::Interleaved => candle_nn::rotary_emb::rope_i(x, cos, sin),
            Self::Halves => candle_nn::rotary_emb::rope(x, cos, sin),
        }
    }
}

/// One transformer block: pre-norm attention, then pre-norm MLP, each added to the residual.
struct Block<P> {
    attention_norm: RmsNorm,
    ffn_norm: RmsNorm,
    projections: P,
}

/// A llama-like model's weights, shared read-only by every generation.
pub(crate) struct Transformer<P> {
    config: LlamaConfig,
    rotary: Rotary,
    /// The token embedding, quantized; rows are dequantized as they are looked up. With tied
    /// embeddings (no `output.weight`) the output projection shares it.
    embedding: Arc<QTensor>,
    blocks: Vec<Block<P>>,
    output_norm: RmsNorm,
    output: Projection,
    cos: Tensor,
    sin: Tensor,
}

impl<P: Projections> Transformer<P> {
    /// Builds the model from the file's `tensors`: the embedding, the output norm and
    /// projection, and `config.layers` blocks whose norms are `blk.N.attn_norm` /
    /// `blk.N.ffn_norm` and whose projections `projections(tensors, N)` takes.
    ///
    /// # Errors
    /// [`LocalModelError::InvalidGguf`] for a missing or unusable tensor; the errors of
    /// `projections`.
    pub(crate) fn from_tensors(
        config: LlamaConfig,
        rotary: Rotary,
        mut tensors: Tensors,
        mut projections: impl FnMut(&mut Tensors, usize) -> Result<P, LocalModelError>,
    ) -> Result<Self, LocalModelError> {
        let embedding = tensors.take("token_embd.weight")?;
        let output_norm = norm(&mut tensors, "output_norm.weight", config.rms_eps)?;
        // Tied embeddings: the output matrix is the embedding's blocks, read and kept once.
        let output = if tensors.contains("output.weight") {
            let packed = tensors.take_packed("output.weight");
            Projection::new(tensors.take("output.weight")?, None, packed)
        } else {
            Projection::new(embedding.clone(), None, None)
        }
        .map_err(|source| tensors.invalid(source))?;
        let mut blocks = Vec::with_capacity(config.layers);
        for index in 0..config.layers {
            let projections = projections(&mut tensors, index)?;
            let mut block_norm = |name: &str| {
                norm(
                    &mut tensors,
                    &format!("blk.{index}.{name}.weight"),
                    config.rms_eps,
                )
            };
            blocks.push(Block {
                attention_norm: block_norm("attn_norm")?,
                ffn_norm: block_norm("ffn_norm")?,
                projections,
            });
        }
        let (cos, sin) = rotary_tables(&config).map_err(|source| tensors.invalid(source))?;
        Ok(Self {
            config,
            rotary,
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
        let positions = Positions {
            mask: causal_mask(start, seq_len)?,
            cos: self.cos.narrow(0, start, seq_len)?,
            sin: self.sin.narrow(0, start, seq_len)?,
        };
        for (block, slot) in self.blocks.iter().zip(slots.iter_mut()) {
            x = self.block_forward(block, x, slot, &positions)?;
        }
        cache.advance(seq_len);
        let last = x.i((seq_len - 1)..seq_len)?;
        let normed = self.output_norm.forward(&last)?;
        let logits = self.output.forward(&normed)?;
        logits.squeeze(0)?.to_dtype(DType::F32)?.to_vec1()
    }

    /// One block over `x` (tokens, hidden), its keys and values appended to `slot`.
    fn block_forward(
        &self,
        block: &Block<P>,
        x: Tensor,
        slot: &mut Option<(Tensor, Tensor)>,
        positions: &Positions,
    ) -> candle_core::Result<Tensor> {
        let residual = x.clone();
        let normed = block.attention_norm.forward(&x)?;
        let attention = self.attention(&block.projections, &normed, slot, positions)?;
        let x = (attention + residual)?;
        let residual = x.clone();
        let normed = block.ffn_norm.forward(&x)?;
        let (gate, up) = block.projections.gate_up(&normed)?;
        let gate = candle_nn::ops::silu(&gate)?;
        block.projections.down(&(gate * up)?)? + residual
    }

    fn attention(
        &self,
        projections: &P,
        x: &Tensor,
        slot: &mut Option<(Tensor, Tensor)>,
        positions: &Positions,
    ) -> candle_core::Result<Tensor> {
        let config = &self.config;
        let seq_len = x.dim(0)?;
        let heads = |t: Tensor, count: usize| -> candle_core::Result<Tensor> {
            t.reshape((1, seq_len, count, config.head_dim))?
                .transpose(1, 2)?
                .contiguous()
        };
        let (query, key, value) = projections.query_key_value(x, config)?;
        let query = heads(query, config.heads)?;
        let key = heads(key, config.kv_heads)?;
        let value = heads(value, config.kv_heads)?;
        let query = self.rotary.apply(&query, &positions.cos, &positions.sin)?;
        let key = self.rotary.apply(&key, &positions.cos, &positions.sin)?;
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
        let scores = match &positions.mask {
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
            .and_then(|output| projections.attention_output(&output))
    }
}

/// What every block of one forward pass shares: the causal mask and the rotary tables of the
/// new positions.
struct Positions {
    mask: Option<Tensor>,
    cos: Tensor,
    sin: Tensor,
}

/// The RMS norm whose weights are the tensor `name`.
fn norm(tensors: &mut Tensors, name: &str, eps: f64) -> Result<RmsNorm, LocalModelError> {
    let weight = tensors.take_owned(name)?;
    RmsNorm::from_qtensor(weight, eps).map_err(|source| tensors.invalid(source))
}

/// Additive causal mask (seq_len, start + seq_len) for new positions `start..start + seq_len`;
/// `None` for a single token, which may see everything.
fn causal_mask(start: usize, seq_len: usize) -> candle_core::Result<Option<Tensor>> {
    if seq_len == 1 {
        return Ok(None);
    }
    let total = start + seq_len;
    let values: Vec<f32> = (0..seq_len)
        .flat_map(|row| {
            (0..total).map(move |column| {
                if column > start + row {
                    f32::NEG_INFINITY
                } else {
                    0.0
                }
            })
        })
        .collect();
    Tensor::from_vec(values, (seq_len, total), &Device::Cpu).map(Some)
}

/// Rotary tables (positions × head_dim / 2): the cosines and sines of each position's angles,
/// as candle-transformers computes them.
fn rotary_tables(config: &LlamaConfig) -> candle_core::Result<(Tensor, Tensor)> {
    let half = config.head_dim / 2;
    let inverse: Vec<f32> = (0..half)
        .map(|index| {
            1.0 / config
                .rope_base
                .powf((2 * index) as f32 / config.head_dim as f32)
        })
        .collect();
    let inverse = Tensor::from_vec(inverse, (1, half), &Device::Cpu)?;
    let positions = Tensor::arange(0u32, config.context_length as u32, &Device::Cpu)?
        .to_dtype(DType::F32)?
        .reshape((config.context_length, 1))?;
    let angles = positions.matmul(&inverse)?;
    Ok((angles.cos()?, angles.sin()?))
}
