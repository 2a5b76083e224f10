//! The `qwen2` architecture (Qwen2.5-Coder-1.5B-Instruct): its GGUF hyper-parameters and block
//! projections on the shared [`Transformer`] layers, as in candle-transformers' quantized Qwen2.
//!
//! The projections are [`Projection`]s, with the Q/K/V biases; rotary embeddings pair the two
//! halves of a head (NEOX). Every matrix stays in its GGUF block format (Q4_K, Q6_K, …) and is
//! multiplied by candle's quantized kernels, or, for a few rows (decoding) on processors with
//! AVX-512 VNNI, by askloop's own on a packed copy ([`crate::local::packed`]). Three things
//! differ from `quantized_qwen2::ModelWeights`:
//!
//! - **The embedding stays quantized.** candle-transformers dequantizes the token embedding to
//!   dense f32 (151,936 × 1,536 values, 0.93 GB); here only the rows of the tokens looked up are
//!   dequantized ([`candle_core::quantized::QTensor::embedding`]).
//! - **Decoding reads about the file's bytes** (the packed kernels), where candle's tiled Q4_K
//!   copy takes a third more, and the query, key and value projections (the gate and up ones)
//!   share one quantization of their input and one hand-out of work to the threads.
//! - **The KV cache is the caller's** ([`crate::local::kv_cache::KvCache`], shared with the
//!   llama path), so a call can keep the complete prompt blocks of the previous call and
//!   truncate the rest; candle's model owns its cache and can only clear it.

use std::path::Path;

use candle_core::quantized::gguf_file;
use candle_core::{Device, Tensor};

use crate::local::config::LlamaConfig;
use crate::local::error::LocalModelError;
use crate::local::linear::Projection;
use crate::local::transformer::{Projections, Rotary, Transformer};
use crate::local::weights::{Tensors, read_tensors};

/// Positions the rotary tables cover at most (the model knows 32,768; prompts here stay far
/// shorter, and the tables cost 0.5 MB per 1,024 positions).
const MAX_CONTEXT: usize = 8192;

/// A `qwen2` model's weights.
pub(crate) type Qwen2Model = Transformer<Qwen2Projections>;

/// The matrices of one `qwen2` block.
pub(crate) struct Qwen2Projections {
    query: Projection,
    key: Projection,
    value: Projection,
    attention_output: Projection,
    gate: Projection,
    up: Projection,
    down: Projection,
}

impl Projections for Qwen2Projections {
    fn query_key_value(
        &self,
        x: &Tensor,
        _config: &LlamaConfig,
    ) -> candle_core::Result<(Tensor, Tensor, Tensor)> {
        match <[Tensor; 3]>::try_from(Projection::forward_each(
            &[&self.query, &self.key, &self.value],
            x,
        )?) {
            Ok([query, key, value]) => Ok((query, key, value)),
            Err(_) => candle_core::bail!("expected three projections"),
        }
    }

    fn attention_output(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.attention_output.forward(x)
    }

    fn gate_up(&self, x: &Tensor) -> candle_core::Result<(Tensor, Tensor)> {
        match <[Tensor; 2]>::try_from(Projection::forward_each(&[&self.gate, &self.up], x)?) {
            Ok([gate, up]) => Ok((gate, up)),
            Err(_) => candle_core::bail!("expected two projections"),
        }
    }

    fn down(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.down.forward(x)
    }
}

impl Qwen2Projections {
    /// The projections of block `index`; the query, key and value ones have biases.
    fn load(tensors: &mut Tensors, index: usize) -> Result<Self, LocalModelError> {
        Ok(Self {
            query: linear(tensors, index, "attn_q", true)?,
            key: linear(tensors, index, "attn_k", true)?,
            value: linear(tensors, index, "attn_v", true)?,
            attention_output: linear(tensors, index, "attn_output", false)?,
            gate: linear(tensors, index, "ffn_gate", false)?,
            up: linear(tensors, index, "ffn_up", false)?,
            down: linear(tensors, index, "ffn_down", false)?,
        })
    }
}

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

impl Qwen2Model {
    /// Loads the weights of a `qwen2` GGUF file.
    ///
    /// # Errors
    /// [`LocalModelError::Read`], [`LocalModelError::InvalidGguf`],
    /// [`LocalModelError::MissingMetadata`].
    pub(crate) fn load(path: &Path, content: &gguf_file::Content) -> Result<Self, LocalModelError> {
        let config = read_config(path, content)?;
        // The blocks' matrices multiply whole prompt blocks and single tokens; the output
        // matrix one row.
        let tensors = read_tensors(
            path,
            content,
            |name| name.starts_with("blk.") && name.ends_with(".weight"),
            |name| {
                (name.starts_with("blk.") && name.ends_with(".weight")) || name == "output.weight"
            },
        )?;
        Transformer::from_tensors(config, Rotary::Halves, tensors, Qwen2Projections::load)
    }
}

/// The projection `blk.{index}.{name}`: quantized weights (and their packed copy, if any), and
/// its bias if it has one.
fn linear(
    tensors: &mut Tensors,
    index: usize,
    name: &str,
    bias: bool,
) -> Result<Projection, LocalModelError> {
    let weight_name = format!("blk.{index}.{name}.weight");
    let weight = tensors.take(&weight_name)?;
    let packed = tensors.take_packed(&weight_name);
    let bias = if bias {
        let bias = tensors.take(&format!("blk.{index}.{name}.bias"))?;
        Some(
            bias.dequantize(&Device::Cpu)
                .map_err(|source| tensors.invalid(source))?,
        )
    } else {
        None
    };
    Projection::new(weight, bias, packed).map_err(|source| tensors.invalid(source))
}
