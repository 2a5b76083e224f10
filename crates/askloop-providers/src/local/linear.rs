//! [`Projection`]: a quantized linear layer (weights, optional bias) that multiplies a few rows
//! (decoding, short prompts) with askloop's packed kernels ([`crate::local::packed`]) where the
//! processor has them and the matrix was packed, and everything else with candle's `QMatMul`.

use std::sync::Arc;

use candle_core::quantized::{QMatMul, QTensor};
use candle_core::{Device, Tensor};

use crate::local::packed::{self, PackedMatrix, QuantizedRows};

/// Rows multiplied by the packed kernels at most; from 32 rows on candle's own products take
/// over (its AMX kernels on processors that have them, its tiled AVX-512 ones otherwise).
const PACKED_MAX_ROWS: usize = 31;

/// A linear layer `x × weightᵀ (+ bias)` over a quantized matrix.
pub(crate) struct Projection {
    matmul: QMatMul,
    /// The bias as a tensor (for candle's path) and as values (for the packed one).
    bias: Option<(Tensor, Vec<f32>)>,
    packed: Option<PackedMatrix>,
}

impl Projection {
    /// The layer of `weight` (outputs × inputs), with `bias` (outputs) if any, multiplied by
    /// the packed kernels when `packed` (the same matrix, packed) is given.
    ///
    /// # Errors
    /// candle's, for a weight `QMatMul` refuses or a bias that is not f32.
    pub(crate) fn new(
        weight: Arc<QTensor>,
        bias: Option<Tensor>,
        packed: Option<PackedMatrix>,
    ) -> candle_core::Result<Self> {
        let bias = match bias {
            Some(bias) => {
                let values = bias.flatten_all()?.to_vec1::<f32>()?;
                Some((bias, values))
            }
            None => None,
        };
        Ok(Self {
            matmul: QMatMul::from_arc(weight)?,
            bias,
            packed,
        })
    }

    /// `x` (…, inputs) times the weights, plus the bias: (…, outputs).
    pub(crate) fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        match Self::forward_packed(&[self], x)? {
            Some(mut outputs) => outputs
                .pop()
                .ok_or_else(|| candle_core::Error::Msg("no packed output".to_owned())),
            None => self.forward_candle(x),
        }
    }

    /// Each layer of `layers` applied to the same `x`, as [`Projection::forward`] would; the
    /// packed ones share one quantization of `x` and one hand-out of work to the threads.
    pub(crate) fn forward_each(layers: &[&Self], x: &Tensor) -> candle_core::Result<Vec<Tensor>> {
        match Self::forward_packed(layers, x)? {
            Some(outputs) => Ok(outputs),
            None => layers.iter().map(|layer| layer.forward_candle(x)).collect(),
        }
    }

    fn forward_candle(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let product = x.apply(&self.matmul)?;
        match &self.bias {
            Some((bias, _)) => product.broadcast_add(bias),
            None => Ok(product),
        }
    }

    /// The packed products of `x` by every layer, or `None` when one of them has no packed
    /// matrix or `x` has too many rows (or a shape the packed kernels do not take).
    fn forward_packed(layers: &[&Self], x: &Tensor) -> candle_core::Result<Option<Vec<Tensor>>> {
        let Some(packed) = layers
            .iter()
            .map(|layer| layer.packed.as_ref())
            .collect::<Option<Vec<&PackedMatrix>>>()
        else {
            return Ok(None);
        };
        // The loader packs nothing on processors without the kernels' instructions; this
        // keeps a packed matrix from reaching them anyway.
        if !packed::supported() {
            return Ok(None);
        }
        let dims = x.dims().to_vec();
        let Some((&columns, outer)) = dims.split_last() else {
            return Ok(None);
        };
        let rows: usize = outer.iter().product();
        if rows == 0 || rows > PACKED_MAX_ROWS {
            return Ok(None);
        }
        let values = x.flatten_all()?.to_vec1::<f32>()?;
        let Some(input) = QuantizedRows::new(&values, rows, columns) else {
            return Ok(None);
        };
        let mut outputs: Vec<Vec<f32>> = packed
            .iter()
            .map(|matrix| vec![0f32; rows * matrix.rows()])
            .collect();
        let mut parts: Vec<(&PackedMatrix, &mut [f32])> = packed
            .iter()
            .copied()
            .zip(outputs.iter_mut().map(Vec::as_mut_slice))
            .collect();
        packed::multiply(&mut parts, &input).map_err(candle_core::Error::wrap)?;
        layers
            .iter()
            .zip(outputs)
            .map(|(layer, mut output)| {
                let outputs = output.len() / rows;
                if let Some((_, bias)) = &layer.bias {
                    for row in output.chunks_exact_mut(outputs) {
                        for (value, add) in row.iter_mut().zip(bias) {
                            *value += add;
                        }
                    }
                }
                let mut shape = outer.to_vec();
                shape.push(outputs);
                Tensor::from_vec(output, shape, &Device::Cpu)
            })
            .collect::<candle_core::Result<Vec<_>>>()
            .map(Some)
    }
}

#[cfg(test)]
mod tests {
    use candle_core::quantized::GgmlDType;

    use super::*;
    use crate::local::packed::tests::{
        pack, random_input, random_matrix, relative_error, without_vnni,
    };

    /// A layer of random `dtype` blocks, with a random bias if `bias`, packed if `packed`.
    fn layer(
        dtype: GgmlDType,
        shape: (usize, usize),
        seed: u64,
        bias: bool,
        packed: bool,
    ) -> Projection {
        let (rows, columns) = shape;
        let weight = random_matrix(dtype, rows, columns, seed);
        let packed = packed.then(|| pack(&weight));
        let bias = bias.then(|| {
            Tensor::from_vec(random_input(1, rows, seed + 1), rows, &Device::Cpu).unwrap()
        });
        Projection::new(Arc::new(weight), bias, packed).unwrap()
    }

    fn values(tensor: &Tensor) -> Vec<f32> {
        tensor.flatten_all().unwrap().to_vec1::<f32>().unwrap()
    }

    /// `tokens` random activations of `columns` values, shaped (1, tokens, columns) as the
    /// model's blocks pass them.
    fn input(tokens: usize, columns: usize, seed: u64) -> Tensor {
        let values = random_input(tokens, columns, seed);
        Tensor::from_vec(values, (1, tokens, columns), &Device::Cpu).unwrap()
    }

    /// The query, key and value projections of one of the model's blocks (Q4_K, Q4_K and
    /// Q6_K, with biases).
    fn qkv() -> [Projection; 3] {
        [
            layer(GgmlDType::Q4K, (1536, 1536), 30, true, true),
            layer(GgmlDType::Q4K, (256, 1536), 31, true, true),
            layer(GgmlDType::Q6K, (256, 1536), 32, true, true),
        ]
    }

    /// The query, key and value projections (and gate and up) in one call give exactly what
    /// each gives alone, and what candle's products give to float rounding, biases included,
    /// in the model's (1, tokens, hidden) shape.
    #[test]
    fn fused_projections_equal_separate_ones_and_candles() {
        if !packed::supported() {
            eprintln!("skipped: the processor lacks AVX-512 VNNI");
            return;
        }
        let [query, key, value] = qkv();
        let gate = layer(GgmlDType::Q4K, (8960, 1536), 33, false, true);
        let up = layer(GgmlDType::Q4K, (8960, 1536), 34, false, true);
        for (layers, tokens) in [
            (vec![&query, &key, &value], 1),
            (vec![&query, &key, &value], 5),
            (vec![&gate, &up], 1),
        ] {
            let x = input(tokens, 1536, 35);
            let fused = Projection::forward_each(&layers, &x).unwrap();
            assert_eq!(fused.len(), layers.len());
            for (layer, output) in layers.iter().zip(&fused) {
                let alone = layer.forward(&x).unwrap();
                assert_eq!(values(&alone), values(output));
                let candle = layer.forward_candle(&x).unwrap();
                assert_eq!(candle.dims(), output.dims());
                assert_eq!(output.dims()[..2], [1, tokens]);
                let error = relative_error(&values(output), &values(&candle));
                assert!(error < 2e-6, "{tokens} tokens: error {error}");
            }
        }
    }

    /// Prompts of 32 tokens or more, a layer without a packed copy among the fused ones, and
    /// a processor without AVX-512 VNNI all take candle's products: the same values, bit for
    /// bit.
    #[test]
    fn other_products_take_candles_path() {
        let [query, key, value] = qkv();
        let unpacked_value = layer(GgmlDType::Q6K, (256, 1536), 32, true, false);
        let cases = [
            (vec![&query, &key, &value], 32, false),
            (vec![&query, &key, &unpacked_value], 1, false),
            (vec![&query, &key, &value], 1, true),
            (vec![&query, &key, &value], 3, true),
        ];
        for (layers, tokens, hidden) in cases {
            let x = input(tokens, 1536, 36);
            let fused = if hidden {
                without_vnni(|| Projection::forward_each(&layers, &x))
            } else {
                Projection::forward_each(&layers, &x)
            }
            .unwrap();
            for (layer, output) in layers.iter().zip(&fused) {
                let candle = layer.forward_candle(&x).unwrap();
                assert_eq!(values(&candle), values(output), "{tokens} tokens");
            }
            if hidden {
                let alone = without_vnni(|| query.forward(&x)).unwrap();
                assert_eq!(values(&alone), values(&query.forward_candle(&x).unwrap()));
            }
        }
    }
}
