//! The `llama` architecture (SmolLM2): its GGUF hyper-parameters and block projections on the
//! shared [`Transformer`] layers, tuned for a 135M model.
//!
//! Decoding one token at a time multiplies by the quantized weights (memory-bound, so the small
//! Q4_1 blocks are the fast path). A prompt of several tokens is instead multiplied by dense
//! copies of the weights made once at load, which candle's gemm handles many times faster than
//! row-by-row quantized dot products. The query, key and value projections are one matrix, as
//! are the gate and up projections; rotary embeddings pair neighbouring dimensions.

use std::path::Path;

use candle_core::quantized::{GgmlDType, QMatMul, QTensor, gguf_file};
use candle_core::{DType, Device, Module, Tensor};

use crate::local::config::LlamaConfig;
use crate::local::error::LocalModelError;
use crate::local::transformer::{Projections, Rotary, Transformer};
use crate::local::weights::{Tensors, read_tensors};

/// Prompts of at least this many new tokens go through the dense weights.
const DENSE_MIN_TOKENS: usize = 2;

/// The dtype of the dense copies. f32 (0.43 GB for the default model; peak RSS about 0.67 GB)
/// processes prompts about 15% faster than f16 (0.21 GB; peak RSS about 0.47 GB).
const DENSE_DTYPE: DType = DType::F32;

/// A `llama` model's weights.
pub(crate) type LlamaModel = Transformer<LlamaProjections>;

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

/// The matrices of one `llama` block.
pub(crate) struct LlamaProjections {
    /// Query, key and value projections, stacked.
    qkv: Linear,
    attention_output: Linear,
    /// Gate and up projections, stacked.
    gate_up: Linear,
    down: Linear,
}

impl Projections for LlamaProjections {
    fn query_key_value(
        &self,
        x: &Tensor,
        config: &LlamaConfig,
    ) -> candle_core::Result<(Tensor, Tensor, Tensor)> {
        let qkv = self.qkv.forward(x)?;
        let kv_width = config.kv_heads * config.head_dim;
        Ok((
            qkv.narrow(1, 0, config.hidden)?,
            qkv.narrow(1, config.hidden, kv_width)?,
            qkv.narrow(1, config.hidden + kv_width, kv_width)?,
        ))
    }

    fn attention_output(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.attention_output.forward(x)
    }

    fn gate_up(&self, x: &Tensor) -> candle_core::Result<(Tensor, Tensor)> {
        let gate_up = self.gate_up.forward(x)?;
        let width = gate_up.dim(1)? / 2;
        Ok((
            gate_up.narrow(1, 0, width)?,
            gate_up.narrow(1, width, width)?,
        ))
    }

    fn down(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.down.forward(x)
    }
}

impl LlamaProjections {
    /// The projections of block `index`, fused and with dense copies.
    fn load(tensors: &mut Tensors, index: usize) -> Result<Self, LocalModelError> {
        let mut linear = |names: &[&str]| -> Result<Linear, LocalModelError> {
            let parts = names
                .iter()
                .map(|name| tensors.take_owned(&format!("blk.{index}.{name}.weight")))
                .collect::<Result<Vec<_>, _>>()?;
            Linear::fused(parts, Some(DENSE_DTYPE)).map_err(|source| tensors.invalid(source))
        };
        Ok(Self {
            qkv: linear(&["attn_q", "attn_k", "attn_v"])?,
            attention_output: linear(&["attn_output"])?,
            gate_up: linear(&["ffn_gate", "ffn_up"])?,
            down: linear(&["ffn_down"])?,
        })
    }
}

/// The hyper-parameters of a `llama` GGUF file.
///
/// # Errors
/// [`LocalModelError::UnsupportedArchitecture`] for a file of another architecture;
/// [`LocalModelError::MissingMetadata`].
fn read_config(path: &Path, content: &gguf_file::Content) -> Result<LlamaConfig, LocalModelError> {
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
    LlamaConfig::read(path, content, "llama", 2048)
}

impl LlamaModel {
    /// Loads the weights of a llama GGUF file.
    ///
    /// # Errors
    /// [`LocalModelError::Read`], [`LocalModelError::InvalidGguf`],
    /// [`LocalModelError::UnsupportedArchitecture`], [`LocalModelError::MissingMetadata`].
    pub(crate) fn load(path: &Path, content: &gguf_file::Content) -> Result<Self, LocalModelError> {
        let config = read_config(path, content)?;
        // Prompts go through the dense copies: nothing to warm.
        let tensors = read_tensors(path, content, |_| false, |_| false)?;
        Transformer::from_tensors(config, Rotary::Interleaved, tensors, LlamaProjections::load)
    }
}
