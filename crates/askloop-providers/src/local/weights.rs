//! [`read_tensors`]: every tensor of a GGUF file, read and made ready on several threads.
//!
//! candle's `gguf_file::Content::tensor` reads one tensor into a fresh buffer and copies it
//! into the tensor's blocks, so loading a 1.1 GB model fills 2.2 GB of newly mapped memory
//! (the kernel zeroes every page first) on one thread. Here each thread keeps one read buffer
//! for all the tensors it reads, and the threads share the work, largest tensors first.
//!
//! **Warming.** On x86-64 with AVX2 or AVX-512, candle (0.11) multiplies Q4_K matrices, and
//! Q6_K ones by more than one row, in a tiled layout it builds from the GGUF blocks the first
//! time a matrix is used, on the calling thread (`repack_x86::pack`). Left alone, that is
//! seconds of the first call's prompt processing, on one core. A loader can name the matrices
//! to warm: each is multiplied once by a few zero rows and once by one right after it is
//! read, on the reading thread, so the tiles are built in parallel with the reads and the
//! first call starts at full speed. On other processors the products are cheap and build
//! nothing.
//!
//! **Packing.** A loader can also name the Q4_K and Q6_K matrices to pack for askloop's own
//! kernels ([`crate::local::packed`], products of up to 31 rows on processors with AVX-512
//! VNNI): each is packed from the read buffer on the reading thread, and then only warmed for
//! many rows, the one-row product never reaching candle.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::{Arc, Mutex};

use candle_core::quantized::{GgmlDType, QMatMul, QTensor, ggml_file, gguf_file};
use candle_core::{DType, Device, Module, Tensor};

use crate::local::error::LocalModelError;
use crate::local::packed::{self, Format, PackedMatrix};

/// Threads reading at most: the reads are bounded by memory bandwidth and page faults, which
/// stop scaling after a few cores.
const MAX_THREADS: usize = 4;

/// Rows of the product that warms a matrix for many-row products: at least the 32 above which
/// candle takes its AMX kernels where the processor has them (a layout of their own).
const WARM_ROWS: usize = 32;

/// The tensors of a GGUF file by name, each taken once by the loader that builds the model.
pub(crate) struct Tensors {
    path: std::path::PathBuf,
    tensors: HashMap<String, Arc<QTensor>>,
    packed: HashMap<String, PackedMatrix>,
}

impl Tensors {
    /// Takes the tensor `name` out.
    ///
    /// # Errors
    /// [`LocalModelError::InvalidGguf`] when the file has no such tensor (or it was taken).
    pub(crate) fn take(&mut self, name: &str) -> Result<Arc<QTensor>, LocalModelError> {
        self.tensors
            .remove(name)
            .ok_or_else(|| LocalModelError::InvalidGguf {
                path: self.path.clone(),
                source: candle_core::Error::Msg(format!("the file has no tensor `{name}`")).into(),
            })
    }

    /// Takes the tensor `name` out as the only copy, for a layer that takes its weights by
    /// value (a norm). Only a warmed tensor is ever shared, and only while it is warmed.
    ///
    /// # Errors
    /// As [`Tensors::take`].
    pub(crate) fn take_owned(&mut self, name: &str) -> Result<QTensor, LocalModelError> {
        let tensor = self.take(name)?;
        Arc::try_unwrap(tensor).map_err(|_| LocalModelError::InvalidGguf {
            path: self.path.clone(),
            source: candle_core::Error::Msg(format!("the tensor `{name}` is shared")).into(),
        })
    }

    /// The error for a tensor candle refuses to build a layer from.
    pub(crate) fn invalid(&self, source: candle_core::Error) -> LocalModelError {
        LocalModelError::InvalidGguf {
            path: self.path.clone(),
            source: source.into(),
        }
    }

    /// Takes the packed copy of the matrix `name` out, if it was packed (see the module docs).
    pub(crate) fn take_packed(&mut self, name: &str) -> Option<PackedMatrix> {
        self.packed.remove(name)
    }

    /// Whether the file has the tensor `name` (and it was not taken yet).
    pub(crate) fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }
}

/// Reads every tensor `content` lists from the file at `path`, on up to [`MAX_THREADS`]
/// threads, warming the quantized matrices whose names `warm` accepts and packing those whose
/// names `pack` accepts (see the module docs).
///
/// # Errors
/// [`LocalModelError::Read`] when the file cannot be opened or read;
/// [`LocalModelError::InvalidGguf`] for a file that ends inside a tensor, or a tensor candle
/// cannot build (an unsupported block type, a size that is not a whole number of blocks).
pub(crate) fn read_tensors(
    path: &Path,
    content: &gguf_file::Content,
    warm: fn(&str) -> bool,
    pack: fn(&str) -> bool,
) -> Result<Tensors, LocalModelError> {
    let mut infos: Vec<(&String, &gguf_file::TensorInfo)> = content.tensor_infos.iter().collect();
    // Largest first, so the last tensors a thread takes are small ones.
    infos.sort_by_key(|(_, info)| std::cmp::Reverse(byte_size(info)));
    let threads = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .clamp(1, MAX_THREADS)
        .min(infos.len().max(1));
    let started = std::time::Instant::now();
    let queue = Mutex::new(infos.into_iter());
    let data_start = content.tensor_data_offset;
    let results: Vec<Result<Share, LocalModelError>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| scope.spawn(|| read_some(path, data_start, &queue, warm, pack)))
            .collect();
        workers
            .into_iter()
            .map(|worker| {
                worker.join().unwrap_or_else(|_| {
                    Err(LocalModelError::InvalidGguf {
                        path: path.to_path_buf(),
                        source: candle_core::Error::Msg(
                            "a thread reading the tensors panicked".to_owned(),
                        )
                        .into(),
                    })
                })
            })
            .collect()
    });
    let mut tensors = HashMap::with_capacity(content.tensor_infos.len());
    let mut packed = HashMap::new();
    let mut warming = std::time::Duration::ZERO;
    let mut packing = std::time::Duration::ZERO;
    for result in results {
        let share = result?;
        tensors.extend(share.tensors);
        packed.extend(share.packed);
        warming += share.warming;
        packing += share.packing;
    }
    tracing::debug!(
        path = %path.display(),
        threads,
        elapsed_ms = started.elapsed().as_millis() as u64,
        warming_ms = warming.as_millis() as u64,
        packing_ms = packing.as_millis() as u64,
        packed = packed.len(),
        "tensors read"
    );
    Ok(Tensors {
        path: path.to_path_buf(),
        tensors,
        packed,
    })
}

/// One thread's share of the tensors, by name, and the time it spent warming and packing them.
#[derive(Default)]
struct Share {
    tensors: Vec<(String, Arc<QTensor>)>,
    packed: Vec<(String, PackedMatrix)>,
    warming: std::time::Duration,
    packing: std::time::Duration,
}

/// The bytes a tensor takes in the file.
fn byte_size(info: &gguf_file::TensorInfo) -> usize {
    info.shape.elem_count() / info.ggml_dtype.block_size() * info.ggml_dtype.type_size()
}

/// One thread's share: takes tensors from `queue` until it is empty, reading each into the
/// thread's one buffer and building the tensor (and its packed copy) from it. Returns them and
/// the time spent warming and packing.
fn read_some<'a>(
    path: &Path,
    data_start: u64,
    queue: &Mutex<impl Iterator<Item = (&'a String, &'a gguf_file::TensorInfo)>>,
    warm: fn(&str) -> bool,
    pack: fn(&str) -> bool,
) -> Result<Share, LocalModelError> {
    let read_error = |source| LocalModelError::Read {
        path: path.to_path_buf(),
        source,
    };
    let mut file = File::open(path).map_err(read_error)?;
    let mut buffer = Vec::new();
    let mut share = Share::default();
    loop {
        let next = queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .next();
        let Some((name, info)) = next else {
            return Ok(share);
        };
        let size = byte_size(info);
        // Largest first: after the first tensor the buffer only shrinks, keeping the pages it
        // has (no new zeroed memory) and giving back what the smaller ones do not need.
        buffer.truncate(size);
        buffer.shrink_to(size);
        buffer.resize(size, 0);
        file.seek(SeekFrom::Start(data_start + info.offset))
            .and_then(|_| file.read_exact(&mut buffer))
            .map_err(|source| match source.kind() {
                std::io::ErrorKind::UnexpectedEof => LocalModelError::InvalidGguf {
                    path: path.to_path_buf(),
                    source: candle_core::Error::Msg(format!(
                        "the file ends inside tensor `{name}` (is it cut short?)"
                    ))
                    .into(),
                },
                _ => read_error(source),
            })?;
        let invalid = |source: candle_core::Error| LocalModelError::InvalidGguf {
            path: path.to_path_buf(),
            source: source.context(format!("tensor `{name}`")).into(),
        };
        let tensor = ggml_file::qtensor_from_ggml(
            info.ggml_dtype,
            &buffer,
            info.shape.dims().to_vec(),
            &Device::Cpu,
        )
        .map(Arc::new)
        .map_err(invalid)?;
        let started = std::time::Instant::now();
        let packed = if pack(name) {
            pack_matrix(&tensor, &buffer)
        } else {
            None
        };
        share.packing += started.elapsed();
        if warm(name) {
            let started = std::time::Instant::now();
            let rows: &[usize] = if packed.is_some() {
                &[WARM_ROWS]
            } else {
                &[WARM_ROWS, 1]
            };
            warm_matrix(&tensor, rows).map_err(invalid)?;
            share.warming += started.elapsed();
        }
        if let Some(packed) = packed {
            share.packed.push((name.clone(), packed));
        }
        share.tensors.push((name.clone(), tensor));
    }
}

/// The packed copy of a Q4_K or Q6_K matrix from `data`, its blocks as the file has them, on
/// processors the packed kernels run on; `None` for anything else.
fn pack_matrix(tensor: &QTensor, data: &[u8]) -> Option<PackedMatrix> {
    let format = match tensor.dtype() {
        GgmlDType::Q4K => Format::Q4K,
        GgmlDType::Q6K => Format::Q6K,
        _ => return None,
    };
    let (rows, columns) = tensor.shape().dims2().ok()?;
    if !packed::supported() {
        return None;
    }
    PackedMatrix::pack(format, data, rows, columns)
}

/// Multiplies a quantized matrix by each count of zero `rows` ([`WARM_ROWS`], and 1 unless it
/// was packed), so that candle builds the layouts its kernels use for them (see the module
/// docs). Anything but a quantized matrix is left alone.
fn warm_matrix(tensor: &Arc<QTensor>, rows: &[usize]) -> candle_core::Result<()> {
    if tensor.rank() != 2
        || matches!(
            tensor.dtype(),
            GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16
        )
    {
        return Ok(());
    }
    let (_, columns) = tensor.shape().dims2()?;
    let matmul = QMatMul::from_arc(Arc::clone(tensor))?;
    for &rows in rows {
        matmul.forward(&Tensor::zeros((rows, columns), DType::F32, &Device::Cpu)?)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local::packed::tests::{random_input, random_matrix, without_vnni};

    /// The loader packs Q4_K and Q6_K matrices the tiles hold, on processors with AVX-512
    /// VNNI only; anything else stays with candle.
    #[test]
    fn packs_only_what_the_kernels_run() {
        for dtype in [GgmlDType::Q4K, GgmlDType::Q6K] {
            let matrix = random_matrix(dtype, 32, 512, 40);
            let data = matrix.data().unwrap();
            assert_eq!(
                pack_matrix(&matrix, &data).is_some(),
                packed::supported(),
                "{dtype:?}"
            );
            assert!(without_vnni(|| pack_matrix(&matrix, &data)).is_none());
            let odd = random_matrix(dtype, 40, 512, 41);
            assert!(pack_matrix(&odd, &odd.data().unwrap()).is_none());
        }
        let values = Tensor::from_vec(random_input(32, 512, 42), (32, 512), &Device::Cpu).unwrap();
        let q8 = QTensor::quantize(&values, GgmlDType::Q8_0).unwrap();
        assert!(pack_matrix(&q8, &q8.data().unwrap()).is_none());
    }
}
