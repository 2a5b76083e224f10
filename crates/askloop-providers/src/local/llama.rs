//! The llama forward pass on candle: GGUF weights, KV cache, logits of the last position.
//!
//! Decoding one token at a time multiplies by the quantized weights (memory-bound, so the small
//! Q4_1 blocks are the fast path). A prompt of several tokens is instead multiplied by dense
//! copies of the weights made once at load, which candle's gemm handles many times faster than
//! row-by-row quantized dot products.

use std::path::Path;
use std::sync::Arc;

use candle_core::quantized::{GgmlDType, QMatMul, QTensor, gguf_file};
use candle_core::{DType, Device, IndexOp, Module, Tensor};

use crate::local::error::LocalModelError;
use crate::local::weights::read_tensors;

/// Prompts of at least this many new tokens go through the dense weights.
const DENSE_MIN_TOKENS: usize = 2;

/// The dtype of the dense copies. f32 (0.43 GB for the default model; peak RSS about 0.67 GB)
/// processes prompts about 15% faster than f16 (0.21 GB; peak RSS about 0.47 GB).
const DENSE_DTYPE: DType = DType::F32;

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

/// A linear layer without bias: quantized weights, plus an optional dense copy for prompts.
struct Linear {
    quantized: QMatMul,
    dense: Option<Tensor>,
}

impl Linear {
    /// One layer from the weights `parts` (each (out_i, in)), stacked along the output
    /// dimension so one multiplication serves them all.
    fn fused(parts: Vec<QTensor>, dense_dtype: Option<DType>) -> candle_core::Result<Self> {
        // candle has no SIMD kernel for these block types; Q8_0 has one and keeps their
        // values almost exactly, so decoding runs several times faster on it.
        let fast = |dtype: GgmlDType| {
            matches!(
                dtype,
                GgmlDType::Q4_0 | GgmlDType::Q8_0 | GgmlDType::Q4K | GgmlDType::Q6K
            )
        };
        if let [single] = parts.as_slice()
            && fast(single.dtype())
            && dense_dtype.is_none()
        {
            let Some(single) = parts.into_iter().next() else {
                candle_core::bail!("no weights");
            };
            return Ok(Self {
                quantized: QMatMul::from_qtensor(single)?,
                dense: None,
            });
        }
        let full = parts
            .iter()
            .map(|part| part.dequantize(&Device::Cpu))
            .collect::<candle_core::Result<Vec<_>>>()?;
        let full = Tensor::cat(&full, 0)?;
        let dense = match dense_dtype {
            Some(dtype) => Some(full.to_dtype(dtype)?),
            None => None,
        };
        let dtype = parts.first().map_or(GgmlDType::Q8_0, QTensor::dtype);
        let target = if fast(dtype) { dtype } else { GgmlDType::Q8_0 };
        Ok(Self {
            quantized: QMatMul::from_qtensor(QTensor::quantize(&full, target)?)?,
            dense,
        })
    }

    /// `x`: (tokens, in) → (tokens, out).
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        match &self.dense {
            Some(weight) if x.dim(0)? >= DENSE_MIN_TOKENS => {
                let dtype = x.dtype();
                x.to_dtype(weight.dtype())?
                    .matmul(&weight.t()?)?
                    .to_dtype(dtype)
            }
            _ => self.quantized.forward(x),
        }
    }
}

struct Block {
    attention_norm: Tensor,
    /// Query, key and value projections, stacked.
    qkv: Linear,
    attention_output: Linear,
    ffn_norm: Tensor,
    /// Gate and up projections, stacked.
    gate_up: Linear,
    down: Linear,
}

/// A llama model's weights, shared read-only by every generation.
pub(crate) struct LlamaModel {
    config: LlamaConfig,
    /// The token embedding; with tied embeddings the output projection shares it.
    embedding: Arc<QTensor>,
    blocks: Vec<Block>,
    output_norm: Tensor,
    output: QMatMul,
    cos: Tensor,
    sin: Tensor,
}

/// The keys and values of every position processed so far, per block.
#[derive(Clone, Default)]
pub(crate) struct KvCache {
    blocks: Vec<Option<(Tensor, Tensor)>>,
    len: usize,
}

impl KvCache {
    /// Positions held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The per-block slots, made empty ones for `blocks` blocks if the cache was for another
    /// model shape.
    pub(crate) fn slots(&mut self, blocks: usize) -> &mut [Option<(Tensor, Tensor)>] {
        if self.blocks.len() != blocks {
            self.blocks = vec![None; blocks];
        }
        &mut self.blocks
    }

    /// A cache of `len` positions made of one (key, value) pair per block, each
    /// `[1, kv_heads, len, head_dim]`.
    pub(crate) fn from_blocks(blocks: Vec<(Tensor, Tensor)>, len: usize) -> Self {
        Self {
            blocks: blocks.into_iter().map(Some).collect(),
            len,
        }
    }

    /// The first `len` positions of every block, or `None` when the cache holds fewer (or a
    /// block holds none).
    pub(crate) fn prefix(&self, len: usize) -> candle_core::Result<Option<Vec<(Tensor, Tensor)>>> {
        if len > self.len || len == 0 {
            return Ok(None);
        }
        let mut blocks = Vec::with_capacity(self.blocks.len());
        for entry in &self.blocks {
            let Some((key, value)) = entry else {
                return Ok(None);
            };
            blocks.push((key.narrow(2, 0, len)?, value.narrow(2, 0, len)?));
        }
        Ok(Some(blocks))
    }

    /// Records that `count` more positions were appended to every block.
    pub(crate) fn advance(&mut self, count: usize) {
        self.len += count;
    }

    /// Keeps only the first `len` positions.
    pub(crate) fn truncate(&mut self, len: usize) -> candle_core::Result<()> {
        if len >= self.len {
            return Ok(());
        }
        if len == 0 {
            self.blocks.clear();
        } else {
            for entry in self.blocks.iter_mut().flatten() {
                let key = entry.0.narrow(2, 0, len)?;
                let value = entry.1.narrow(2, 0, len)?;
                *entry = (key, value);
            }
        }
        self.len = len;
        Ok(())
    }
}

pub(crate) fn metadata_u32(content: &gguf_file::Content, key: &str) -> Result<usize, String> {
    content
        .metadata
        .get(key)
        .and_then(|value| value.to_u32().ok())
        .map(|value| value as usize)
        .ok_or_else(|| key.to_owned())
}

pub(crate) fn metadata_f32(content: &gguf_file::Content, key: &str) -> Result<f32, String> {
    content
        .metadata
        .get(key)
        .and_then(|value| value.to_f32().ok())
        .ok_or_else(|| key.to_owned())
}

impl LlamaConfig {
    /// Reads the hyper-parameters of a `llama` GGUF file.
    pub(crate) fn from_gguf(
        path: &Path,
        content: &gguf_file::Content,
    ) -> Result<Self, LocalModelError> {
        let architecture = content
            .metadata
            .get("general.architecture")
            .and_then(|value| value.to_string().ok())
            .cloned()
            .unwrap_or_default();
        if architecture != "llama" {
            return Err(LocalModelError::UnsupportedArchitecture {
                path: path.to_path_buf(),
                architecture,
            });
        }
        Self::read(path, content, "llama", 2048)
    }

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

impl LlamaModel {
    /// Loads the weights of a llama GGUF file.
    ///
    /// # Errors
    /// [`LocalModelError::Read`], [`LocalModelError::InvalidGguf`],
    /// [`LocalModelError::UnsupportedArchitecture`], [`LocalModelError::MissingMetadata`].
    pub(crate) fn load(path: &Path, content: &gguf_file::Content) -> Result<Self, LocalModelError> {
        let config = LlamaConfig::from_gguf(path, content)?;
        // Prompts go through the dense copies: nothing to warm.
        let mut tensors = read_tensors(path, content, |_| false)?;
        let device = Device::Cpu;
        let dense_dtype = Some(DENSE_DTYPE);
        let embedding = tensors.take("token_embd.weight")?;
        let output_norm = tensors
            .take("output_norm.weight")?
            .dequantize(&device)
            .map_err(|source| tensors.invalid(source))?;
        let output = if tensors.contains("output.weight") {
            QMatMul::from_arc(tensors.take("output.weight")?)
        } else {
            // Tied embeddings: the output projection is the embedding table.
            QMatMul::from_arc(embedding.clone())
        }
        .map_err(|source| tensors.invalid(source))?;
        let mut blocks = Vec::with_capacity(config.layers);
        for index in 0..config.layers {
            let mut linear = |names: &[&str]| -> Result<Linear, LocalModelError> {
                let parts = names
                    .iter()
                    .map(|name| tensors.take_owned(&format!("blk.{index}.{name}.weight")))
                    .collect::<Result<Vec<_>, _>>()?;
                Linear::fused(parts, dense_dtype).map_err(|source| tensors.invalid(source))
            };
            let qkv = linear(&["attn_q", "attn_k", "attn_v"])?;
            let attention_output = linear(&["attn_output"])?;
            let gate_up = linear(&["ffn_gate", "ffn_up"])?;
            let down = linear(&["ffn_down"])?;
            let mut norm = |name: &str| -> Result<Tensor, LocalModelError> {
                tensors
                    .take(&format!("blk.{index}.{name}.weight"))?
                    .dequantize(&device)
                    .map_err(|source| tensors.invalid(source))
            };
            let block = Block {
                qkv,
                attention_output,
                gate_up,
                down,
                attention_norm: norm("attn_norm")?,
                ffn_norm: norm("ffn_norm")?,
            };
            blocks.push(block);
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
        let start = cache.len;
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
            let normed =
                candle_nn::ops::rms_norm(&x, &block.attention_norm, self.config.rms_eps as f32)?;
            let attention = self.attention(block, &normed, slot, mask.as_ref(), &cos, &sin)?;
            x = (attention + residual)?;
            let residual = x.clone();
            let normed = candle_nn::ops::rms_norm(&x, &block.ffn_norm, self.config.rms_eps as f32)?;
            let gate_up = block.gate_up.forward(&normed)?;
            let width = gate_up.dim(1)? / 2;
            let gate = candle_nn::ops::silu(&gate_up.narrow(1, 0, width)?)?;
            let up = gate_up.narrow(1, width, width)?;
            x = (block.down.forward(&(gate * up)?)? + residual)?;
        }
        cache.advance(seq_len);
        let last = x.i((seq_len - 1)..seq_len)?;
        let normed =
            candle_nn::ops::rms_norm(&last, &self.output_norm, self.config.rms_eps as f32)?;
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
        let qkv = block.qkv.forward(x)?;
        let kv_width = config.kv_heads * config.head_dim;
        let query = heads(qkv.narrow(1, 0, config.hidden)?, config.heads)?;
        let key = heads(qkv.narrow(1, config.hidden, kv_width)?, config.kv_heads)?;
        let value = heads(
            qkv.narrow(1, config.hidden + kv_width, kv_width)?,
            config.kv_heads,
        )?;
        let query = candle_nn::rotary_emb::rope_i(&query, cos, sin)?;
        let key = candle_nn::rotary_emb::rope_i(&key, cos, sin)?;
        let (key, value) = match slot.take() {
            Some((cached_key, cached_value)) => (
                Tensor::cat(&[&cached_key, &key], 2)?,
                Tensor::cat(&[&cached_value, &value], 2)?,
            ),
            None => (key, value),
        };
        *slot = Some((key.clone(), value.clone()));
        // Grouped-query attention: fold the query heads of one kv head into the rows.
        let group = config.heads / config.kv_heads;
        let total = key.dim(2)?;
        let query = query.reshape((config.kv_heads, group * seq_len, config.head_dim))?;
        let key = key.squeeze(0)?;
        let value = value.squeeze(0)?;
        let scale = 1.0 / (config.head_dim as f64).sqrt();
        let scores = (query.matmul(&key.t()?)? * scale)?;
        let scores = match mask {
            Some(mask) => {
                let scores = scores.reshape((config.kv_heads, group, seq_len, total))?;
                scores
                    .broadcast_add(mask)?
                    .reshape((config.kv_heads, group * seq_len, total))?
            }
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

/// Additive causal mask (seq_len, start + seq_len) for new positions `start..start + seq_len`;
/// `None` for a single token, which may see everything.
pub(crate) fn causal_mask(start: usize, seq_len: usize) -> candle_core::Result<Option<Tensor>> {
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
/// as candle-transformers computes them; `llama` and `qwen2` share them.
pub(crate) fn rotary_tables(config: &LlamaConfig) -> candle_core::Result<(Tensor, Tensor)> {
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
