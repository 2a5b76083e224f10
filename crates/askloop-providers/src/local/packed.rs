//! [`PackedMatrix`]: a Q4_K or Q6_K matrix laid out for products with a few rows (decoding a
//! token, a short prompt), and the AVX-512 VNNI kernels that multiply it; askloop's own code,
//! used instead of candle's for those products where the processor has the instructions.
//!
//! **Why.** Decoding one token reads every matrix once, so its speed is the memory bandwidth
//! divided by the bytes of the weights. candle 0.11 multiplies Q4_K matrices on x86-64 in a
//! tiled copy whose scales are unpacked to f32, 6 bits a weight where the file has 4.5, and
//! Q6_K matrices by one row in their file blocks with 256-bit code, which takes more time per
//! byte than the memory does on a busy core. Here both keep (about) the file's size.
//!
//! **Layout.** A matrix of `rows` × `columns` (`columns` a multiple of 256, `rows` of 16) is cut
//! into tiles of 16 rows × one 256-value super-block, a tile row's tiles one after another. In
//! a tile the 4-bit parts of the values are interleaved so that one 64-byte load gives 4
//! consecutive values of each of the 16 rows twice (low and high nibbles), the form in which
//! `vpdpbusd` multiplies them by 4 activation bytes and adds to 16 sums; the scales and minimums
//! stay 6-bit integers (Q4_K) or bytes (Q6_K), the block scales f16, as in the file.
//!
//! - Q4_K (2,368 bytes a tile, 2,304 in the file): nibbles 0..2,048 (sub-block `s`, group `j`,
//!   row `r`, byte `i`: low nibble value `32s + 4j + i`, high `32s + 16 + 4j + i`), scales
//!   2,048..2,176 (`[s][r]`), minimums 2,176..2,304 (`[s / 2][r][s % 2]`), `d` and `dmin`
//!   2,304..2,368 (`[r]` each).
//! - Q6_K (3,392 bytes a tile, 3,360 in the file, the rest padding): 32 values after another
//!   in 6 lines, 0..3,072: the low 4 bits in 4 lines as Q4_K's nibbles, then their high 2 bits
//!   in 2 (the low nibbles' and the high nibbles', group `j` in bits `2j..2j+2`), so that a tile
//!   is read front to back (with the high bits in a region of their own, read alternately with
//!   the nibbles, one-row Q6_K products streamed about 15 GB/s where Q4_K's made 24, and
//!   decoding ran at 16.2 tokens/s instead of 19.7); the 16-value scales 3,072..3,328
//!   (`[t][r]`), `d` 3,328..3,360.
//!
//! **Memory.** Each tile is prefetched [`PREFETCH_AHEAD`] bytes before it is read: without it
//! one core read about 5 GB/s of a matrix larger than the caches on the machine of
//! docs/benchmarks.md, with it about 10 (the hardware prefetchers alone do not keep up).
//! The tile rows are shared among candle's threads (its barrier pool), so the packed products
//! and candle's own never run at once on more threads than candle's.
//!
//! **Activations** are quantized per 256 values to 8 bits ([`QuantizedRows`]) as ggml's Q8_K
//! defines it (the scale `-127 / max`, rounded half away from zero, the same bytes candle's
//! products use), with sums of 16 and 32 values for the minimums and the Q6_K offset. The
//! integer products are then exactly candle's; the f32 sums are added in another order, so
//! results differ from candle's in the last bits.

#![allow(unsafe_code)]

use std::ops::Range;

/// Values per super-block.
const QK: usize = 256;
/// Rows of a tile: the 16 lanes of a 512-bit vector of i32 or f32.
const TILE_ROWS: usize = 16;
/// Bytes of a Q4_K block in a GGUF file: `d`, `dmin` (f16), 12 bytes of 6-bit scales and
/// minimums, 128 bytes of nibbles.
const Q4K_BLOCK: usize = 144;
/// Bytes of a Q6_K block: 128 of low nibbles, 64 of high bits, 16 scales (i8), `d` (f16).
const Q6K_BLOCK: usize = 210;
/// 64-byte lines of a tile.
const Q4K_TILE_LINES: usize = 37;
const Q6K_TILE_LINES: usize = 53;
/// Lines of 32 values of a Q6_K tile: 4 of low nibbles, 2 of high bits.
const Q6K_CHUNK_LINES: usize = 6;
/// Activation rows one pass over a tile row multiplies at most (their sums stay in registers).
const ROWS_PER_PASS: usize = 4;
/// How far ahead of the tile being multiplied its successors are prefetched, in bytes.
const PREFETCH_AHEAD: usize = 4096;

/// One 64-byte line of a tile, aligned for whole-line loads.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// The block format a matrix was packed from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    /// Q4_K: 4-bit values, a 6-bit scale and minimum per 32.
    Q4K,
    /// Q6_K: 6-bit values, an 8-bit scale per 16.
    Q6K,
}

impl Format {
    fn block_bytes(self) -> usize {
        match self {
            Self::Q4K => Q4K_BLOCK,
            Self::Q6K => Q6K_BLOCK,
        }
    }

    fn tile_lines(self) -> usize {
        match self {
            Self::Q4K => Q4K_TILE_LINES,
            Self::Q6K => Q6K_TILE_LINES,
        }
    }
}

/// A quantized matrix (`rows` outputs × `columns` inputs) in tiles for [`multiply`].
pub(crate) struct PackedMatrix {
    format: Format,
    rows: usize,
    columns: usize,
    lines: Vec<Line>,
}

/// Whether this processor runs the kernels (AVX-512 F, BW and VNNI): detected at run time,
/// so a build for x86-64 runs on processors without them (candle's products take over).
pub(crate) fn supported() -> bool {
    #[cfg(test)]
    if tests::VNNI_HIDDEN.with(std::cell::Cell::get) {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

impl PackedMatrix {
    /// Packs `data`, the matrix's blocks as a GGUF file stores them (row after row), or `None`
    /// when the shape does not fit the tiles (`columns` not a multiple of 256, `rows` of 16) or
    /// `data` is not exactly the matrix's blocks.
    pub(crate) fn pack(format: Format, data: &[u8], rows: usize, columns: usize) -> Option<Self> {
        if rows == 0
            || columns == 0
            || !rows.is_multiple_of(TILE_ROWS)
            || !columns.is_multiple_of(QK)
        {
            return None;
        }
        let blocks = columns / QK;
        if data.len() != rows * blocks * format.block_bytes() {
            return None;
        }
        let tile_lines = format.tile_lines();
        let mut lines = vec![Line([0; 64]); rows / TILE_ROWS * blocks * tile_lines];
        for (index, tile) in lines.chunks_exact_mut(tile_lines).enumerate() {
            let (tile_row, block) = (index / blocks, index % blocks);
            let tile = tile_bytes(tile);
            for row in 0..TILE_ROWS {
                let at = ((tile_row * TILE_ROWS + row) * blocks + block) * format.block_bytes();
                let source = &data[at..at + format.block_bytes()];
                match format {
                    Format::Q4K => pack_q4k_row(source, row, tile),
                    Format::Q6K => pack_q6k_row(source, row, tile),
                }
            }
        }
        Some(Self {
            format,
            rows,
            columns,
            lines,
        })
    }

    /// Outputs (the matrix's rows).
    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    /// The lines of tile row `index` (16 outputs, every super-block).
    fn tile_row(&self, index: usize) -> &[Line] {
        let length = self.columns / QK * self.format.tile_lines();
        &self.lines[index * length..(index + 1) * length]
    }
}

/// The bytes of a tile's lines.
fn tile_bytes(lines: &mut [Line]) -> &mut [u8] {
    let length = lines.len() * 64;
    // Lines are plain bytes with no padding between them (size 64, align 64).
    unsafe { std::slice::from_raw_parts_mut(lines.as_mut_ptr().cast::<u8>(), length) }
}

/// The 256 values of a Q4_K block's nibbles, in order.
fn q4k_values(nibbles: &[u8]) -> [u8; QK] {
    let mut values = [0u8; QK];
    for chunk in 0..4 {
        for index in 0..32 {
            let byte = nibbles[chunk * 32 + index];
            values[chunk * 64 + index] = byte & 0x0F;
            values[chunk * 64 + 32 + index] = byte >> 4;
        }
    }
    values
}

/// The 6-bit scale and minimum of sub-block `index` from a Q4_K block's 12 bytes.
fn q4k_scale_min(packed: &[u8], index: usize) -> (u8, u8) {
    if index < 4 {
        (packed[index] & 63, packed[index + 4] & 63)
    } else {
        (
            (packed[index + 4] & 0x0F) | ((packed[index - 4] >> 6) << 4),
            (packed[index + 4] >> 4) | ((packed[index] >> 6) << 4),
        )
    }
}

/// Writes the nibbles of 256 values (each below 16 after `& 0x0F`) into a tile, row `row`:
/// the 4 lines of each 32 values `stride` lines after the previous 32's.
fn pack_nibbles(values: &[u8; QK], row: usize, stride: usize, tile: &mut [u8]) {
    for sub in 0..8 {
        for group in 0..4 {
            for byte in 0..4 {
                let low = values[sub * 32 + group * 4 + byte] & 0x0F;
                let high = values[sub * 32 + 16 + group * 4 + byte] & 0x0F;
                tile[(sub * stride + group) * 64 + row * 4 + byte] = low | (high << 4);
            }
        }
    }
}

fn pack_q4k_row(block: &[u8], row: usize, tile: &mut [u8]) {
    pack_nibbles(&q4k_values(&block[16..Q4K_BLOCK]), row, 4, tile);
    for sub in 0..8 {
        let (scale, min) = q4k_scale_min(&block[4..16], sub);
        tile[2048 + sub * 16 + row] = scale;
        tile[2176 + (sub / 2) * 32 + row * 2 + sub % 2] = min;
    }
    tile[2304 + row * 2..2304 + row * 2 + 2].copy_from_slice(&block[0..2]);
    tile[2336 + row * 2..2336 + row * 2 + 2].copy_from_slice(&block[2..4]);
}

/// The 256 values (0..64, 32 meaning zero) of a Q6_K block, in order.
fn q6k_values(block: &[u8]) -> [u8; QK] {
    let mut values = [0u8; QK];
    for half in 0..2 {
        let low = &block[half * 64..half * 64 + 64];
        let high = &block[128 + half * 32..128 + half * 32 + 32];
        let out = &mut values[half * 128..half * 128 + 128];
        for index in 0..32 {
            out[index] = (low[index] & 0x0F) | ((high[index] & 3) << 4);
            out[index + 32] = (low[index + 32] & 0x0F) | (((high[index] >> 2) & 3) << 4);
            out[index + 64] = (low[index] >> 4) | (((high[index] >> 4) & 3) << 4);
            out[index + 96] = (low[index + 32] >> 4) | (((high[index] >> 6) & 3) << 4);
        }
    }
    values
}

fn pack_q6k_row(block: &[u8], row: usize, tile: &mut [u8]) {
    let values = q6k_values(block);
    pack_nibbles(&values, row, Q6K_CHUNK_LINES, tile);
    for chunk in 0..8 {
        for half in 0..2 {
            for byte in 0..4 {
                let mut bits = 0u8;
                for group in 0..4 {
                    let value = values[chunk * 32 + half * 16 + group * 4 + byte];
                    bits |= (value >> 4) << (2 * group);
                }
                tile[(chunk * Q6K_CHUNK_LINES + 4 + half) * 64 + row * 4 + byte] = bits;
            }
        }
    }
    for sub in 0..16 {
        tile[3072 + sub * 16 + row] = block[192 + sub];
    }
    tile[3328 + row * 2..3328 + row * 2 + 2].copy_from_slice(&block[208..210]);
}

/// 256 activations quantized to 8 bits: `qs × d` ≈ the values.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(crate) struct Q8Block {
    qs: [i8; QK],
    /// Sums of each 16 `qs`.
    sums16: [i16; 16],
    /// Sums of 32 `qs`, two by two: sub-blocks `2p` and `2p + 1` as the low and high i16 of
    /// entry `p` (the pairs `vpmaddwd` multiplies by the Q4_K minimums).
    min_pairs: [i32; 4],
    d: f32,
}

impl Q8Block {
    const ZERO: Self = Self {
        qs: [0; QK],
        sums16: [0; 16],
        min_pairs: [0; 4],
        d: 0.0,
    };

    /// Quantizes 256 values as ggml's Q8_K: `q = round(-127 / max × x)`, `max` the value of
    /// largest magnitude (the first of equals), `d = 1 / (-127 / max)`. Written so that the
    /// compiler vectorizes it in [`quantize_avx512`].
    #[inline(always)]
    fn quantize(values: &[f32; QK]) -> Self {
        let mut block = Self::ZERO;
        let largest = values
            .iter()
            .fold(0f32, |largest, value| largest.max(value.abs()));
        if largest == 0.0 {
            return block;
        }
        let max = values
            .iter()
            .copied()
            .find(|value| value.abs() == largest)
            .unwrap_or(largest);
        let scale = -127.0 / max;
        for (quantized, &value) in block.qs.iter_mut().zip(values) {
            *quantized = (scale * value).round().clamp(-128.0, 127.0) as i8;
        }
        block.d = 1.0 / scale;
        for (sum, chunk) in block.sums16.iter_mut().zip(block.qs.chunks_exact(16)) {
            *sum = chunk.iter().map(|&q| i16::from(q)).sum();
        }
        for (pair, sums) in block.min_pairs.iter_mut().zip(block.sums16.chunks_exact(4)) {
            let low = sums[0] + sums[1];
            let high = sums[2] + sums[3];
            *pair = i32::from(low as u16) | (i32::from(high as u16) << 16);
        }
        block
    }
}

/// Quantizes `values` (a whole number of super-blocks) block by block.
fn quantize_rows(values: &[f32]) -> Vec<Q8Block> {
    let mut blocks = vec![Q8Block::ZERO; values.len() / QK];
    #[cfg(target_arch = "x86_64")]
    if supported() {
        // The features `quantize_avx512` is compiled for were detected.
        unsafe { quantize_avx512(values, &mut blocks) };
        return blocks;
    }
    quantize_into(values, &mut blocks);
    blocks
}

#[inline(always)]
fn quantize_into(values: &[f32], blocks: &mut [Q8Block]) {
    for (block, chunk) in blocks.iter_mut().zip(values.chunks_exact(QK)) {
        if let Ok(chunk) = <&[f32; QK]>::try_from(chunk) {
            *block = Q8Block::quantize(chunk);
        }
    }
}

/// [`quantize_into`] compiled for AVX-512 (vectorized).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn quantize_avx512(values: &[f32], blocks: &mut [Q8Block]) {
    quantize_into(values, blocks);
}

/// Rows of activations quantized for [`multiply`].
pub(crate) struct QuantizedRows {
    rows: usize,
    columns: usize,
    blocks: Vec<Q8Block>,
}

impl QuantizedRows {
    /// Quantizes `values`, `rows` rows of `columns` (a multiple of 256), or `None` when the
    /// shape does not fit.
    pub(crate) fn new(values: &[f32], rows: usize, columns: usize) -> Option<Self> {
        if columns == 0 || !columns.is_multiple_of(QK) || values.len() != rows * columns {
            return None;
        }
        let blocks = quantize_rows(values);
        Some(Self {
            rows,
            columns,
            blocks,
        })
    }

    fn row(&self, index: usize) -> &[Q8Block] {
        let blocks = self.columns / QK;
        &self.blocks[index * blocks..(index + 1) * blocks]
    }
}

/// Why a product cannot run.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum KernelError {
    /// The processor lacks AVX-512 F, BW or VNNI.
    #[error("the processor lacks AVX-512 VNNI")]
    Unsupported,
    /// A matrix's columns, an output's length or the activations' shape disagree.
    #[error(
        "a {rows}×{columns} matrix cannot multiply {input_rows}×{input_columns} activations into {output} values"
    )]
    Shape {
        /// The matrix's rows.
        rows: usize,
        /// The matrix's columns.
        columns: usize,
        /// The activations' rows.
        input_rows: usize,
        /// The activations' columns.
        input_columns: usize,
        /// The output's length.
        output: usize,
    },
}

/// An output pointer shared by the threads, each writing its own tiles' values.
#[derive(Clone, Copy)]
struct Output(*mut f32);
// Threads write disjoint parts of the outputs (see `multiply`).
unsafe impl Send for Output {}
unsafe impl Sync for Output {}

/// Multiplies `input` (m × k) by each matrix of `parts` (n × k: output = input × matrixᵀ)
/// into its output (m × n, row-major), on candle's threads, all parts in one hand-out of work
/// (the query, key and value projections of a block, say).
///
/// # Errors
/// [`KernelError::Unsupported`] without AVX-512 VNNI; [`KernelError::Shape`] for a part whose
/// columns or output length does not fit `input`.
pub(crate) fn multiply(
    parts: &mut [(&PackedMatrix, &mut [f32])],
    input: &QuantizedRows,
) -> Result<(), KernelError> {
    if !supported() {
        return Err(KernelError::Unsupported);
    }
    let mut units = Vec::with_capacity(parts.len());
    let mut total = 0;
    for (matrix, output) in parts.iter_mut() {
        if matrix.columns != input.columns || output.len() != input.rows * matrix.rows {
            return Err(KernelError::Shape {
                rows: matrix.rows,
                columns: matrix.columns,
                input_rows: input.rows,
                input_columns: input.columns,
                output: output.len(),
            });
        }
        units.push((total, &**matrix, Output(output.as_mut_ptr())));
        total += matrix.rows / TILE_ROWS;
    }
    let units = &units;
    candle_core::utils::barrier_pool().execute_chunked(total, |range: Range<usize>| {
        for unit in range {
            // The first part starts at 0, so at least one start is at most `unit`.
            let part = units.partition_point(|(start, _, _)| *start <= unit) - 1;
            let (start, matrix, output) = units[part];
            tile_row_product(matrix, unit - start, input, output);
        }
    });
    Ok(())
}

/// Writes the 16 outputs of tile row `tile_row` for every row of `input`.
fn tile_row_product(matrix: &PackedMatrix, tile_row: usize, input: &QuantizedRows, output: Output) {
    let lines = matrix.tile_row(tile_row);
    let mut first = 0;
    while first < input.rows {
        let count = (input.rows - first).min(ROWS_PER_PASS);
        let mut sums = [[0f32; TILE_ROWS]; ROWS_PER_PASS];
        #[cfg(target_arch = "x86_64")]
        // `multiply` checked the features; the tile row and activation rows have the
        // matrix's super-blocks.
        unsafe {
            kernels::tile_row(matrix.format, lines, input, first, count, &mut sums);
        }
        for (offset, values) in sums.iter().take(count).enumerate() {
            let at = (first + offset) * matrix.rows + tile_row * TILE_ROWS;
            // Each (row, tile row) pair is one unit's: no two threads write the same values,
            // and `multiply` checked the output's length.
            unsafe {
                std::ptr::copy_nonoverlapping(values.as_ptr(), output.0.add(at), TILE_ROWS);
            }
        }
        first += count;
    }
}

#[cfg(target_arch = "x86_64")]
#[allow(clippy::needless_range_loop)] // Several arrays indexed by one activation row.
mod kernels {
    use std::arch::x86_64::*;

    use super::{Format, Line, PREFETCH_AHEAD, Q8Block, QuantizedRows, ROWS_PER_PASS, TILE_ROWS};

    /// The sums of tile row `lines` with activation rows `first..first + count` into `sums`.
    ///
    /// # Safety
    /// The processor has AVX-512 F, BW and VNNI; `lines` holds one tile per super-block of
    /// `input`'s rows; `count` is 1..=4 and `first + count` at most `input`'s rows.
    pub(super) unsafe fn tile_row(
        format: Format,
        lines: &[Line],
        input: &QuantizedRows,
        first: usize,
        count: usize,
        sums: &mut [[f32; TILE_ROWS]; ROWS_PER_PASS],
    ) {
        let row = |offset: usize| input.row(first + offset.min(count - 1));
        unsafe {
            match (format, count) {
                (Format::Q4K, 1) => q4k::<1>(lines, [row(0)], sums),
                (Format::Q4K, 2) => q4k::<2>(lines, [row(0), row(1)], sums),
                (Format::Q4K, 3) => q4k::<3>(lines, [row(0), row(1), row(2)], sums),
                (Format::Q4K, _) => q4k::<4>(lines, [row(0), row(1), row(2), row(3)], sums),
                (Format::Q6K, 1) => q6k::<1>(lines, [row(0)], sums),
                (Format::Q6K, 2) => q6k::<2>(lines, [row(0), row(1)], sums),
                (Format::Q6K, 3) => q6k::<3>(lines, [row(0), row(1), row(2)], sums),
                (Format::Q6K, _) => q6k::<4>(lines, [row(0), row(1), row(2), row(3)], sums),
            }
        }
    }

    /// Prefetches the `lines` lines [`PREFETCH_AHEAD`] bytes after `base` (past the end of
    /// the matrix they are ignored: a prefetch never faults).
    #[inline(always)]
    unsafe fn prefetch(base: *const u8, lines: usize) {
        for line in 0..lines {
            let at = base.wrapping_add(PREFETCH_AHEAD + line * 64);
            unsafe { _mm_prefetch::<_MM_HINT_T0>(at.cast()) };
        }
    }

    /// Four activation bytes at `at`, in every lane.
    #[inline(always)]
    unsafe fn broadcast(block: &Q8Block, at: usize) -> __m512i {
        // `at + 4` is at most 256 (the callers' offsets are below 252 + 4).
        unsafe { _mm512_set1_epi32(block.qs.as_ptr().add(at).cast::<i32>().read_unaligned()) }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn q4k<const M: usize>(
        lines: &[Line],
        acts: [&[Q8Block]; M],
        sums: &mut [[f32; TILE_ROWS]; ROWS_PER_PASS],
    ) {
        unsafe {
            let nibble = _mm512_set1_epi8(0x0F);
            let mut acc = [_mm512_setzero_ps(); M];
            for (block, tile) in lines.chunks_exact(super::Q4K_TILE_LINES).enumerate() {
                let base = tile.as_ptr().cast::<u8>();
                prefetch(base, super::Q4K_TILE_LINES);
                let mut scaled = [_mm512_setzero_ps(); M];
                for sub in 0..8 {
                    let mut isum = [_mm512_setzero_si512(); M];
                    for group in 0..4 {
                        let w = _mm512_load_si512(base.add((sub * 4 + group) * 64).cast());
                        let low = _mm512_and_si512(w, nibble);
                        let high = _mm512_and_si512(_mm512_srli_epi16::<4>(w), nibble);
                        for m in 0..M {
                            let a = &acts[m][block];
                            let at = sub * 32 + group * 4;
                            isum[m] = _mm512_dpbusd_epi32(isum[m], low, broadcast(a, at));
                            isum[m] = _mm512_dpbusd_epi32(isum[m], high, broadcast(a, at + 16));
                        }
                    }
                    let scale = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_load_si128(
                        base.add(2048 + sub * 16).cast(),
                    )));
                    for m in 0..M {
                        scaled[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[m]), scale, scaled[m]);
                    }
                }
                let mut mins = [_mm512_setzero_si512(); M];
                for pair in 0..4 {
                    let min =
                        _mm512_cvtepu8_epi16(_mm256_load_si256(base.add(2176 + pair * 32).cast()));
                    for m in 0..M {
                        let sums = _mm512_set1_epi32(acts[m][block].min_pairs[pair]);
                        mins[m] = _mm512_add_epi32(mins[m], _mm512_madd_epi16(min, sums));
                    }
                }
                let d = _mm512_cvtph_ps(_mm256_load_si256(base.add(2304).cast()));
                let dmin = _mm512_cvtph_ps(_mm256_load_si256(base.add(2336).cast()));
                for m in 0..M {
                    let da = _mm512_set1_ps(acts[m][block].d);
                    acc[m] = _mm512_fmadd_ps(scaled[m], _mm512_mul_ps(d, da), acc[m]);
                    acc[m] = _mm512_fnmadd_ps(
                        _mm512_cvtepi32_ps(mins[m]),
                        _mm512_mul_ps(dmin, da),
                        acc[m],
                    );
                }
            }
            for m in 0..M {
                _mm512_storeu_ps(sums[m].as_mut_ptr(), acc[m]);
            }
        }
    }

    /// The high 2 bits of group `group` of a line of high bits, at bits 4..6 of each byte.
    #[inline(always)]
    unsafe fn high_bits(bits: __m512i, group: usize, mask: __m512i) -> __m512i {
        unsafe {
            let shifted = match group {
                0 => _mm512_slli_epi16::<4>(bits),
                1 => _mm512_slli_epi16::<2>(bits),
                2 => bits,
                _ => _mm512_srli_epi16::<2>(bits),
            };
            _mm512_and_si512(shifted, mask)
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn q6k<const M: usize>(
        lines: &[Line],
        acts: [&[Q8Block]; M],
        sums: &mut [[f32; TILE_ROWS]; ROWS_PER_PASS],
    ) {
        unsafe {
            let nibble = _mm512_set1_epi8(0x0F);
            let top = _mm512_set1_epi8(0x30);
            let mut acc = [_mm512_setzero_ps(); M];
            for (block, tile) in lines.chunks_exact(super::Q6K_TILE_LINES).enumerate() {
                let base = tile.as_ptr().cast::<u8>();
                prefetch(base, super::Q6K_TILE_LINES);
                let mut scaled = [_mm512_setzero_ps(); M];
                for chunk in 0..8 {
                    let at = base.add(chunk * super::Q6K_CHUNK_LINES * 64);
                    let bits_low = _mm512_load_si512(at.add(4 * 64).cast());
                    let bits_high = _mm512_load_si512(at.add(5 * 64).cast());
                    let mut isum_low = [_mm512_setzero_si512(); M];
                    let mut isum_high = [_mm512_setzero_si512(); M];
                    for group in 0..4 {
                        let w = _mm512_load_si512(at.add(group * 64).cast());
                        let low = _mm512_or_si512(
                            _mm512_and_si512(w, nibble),
                            high_bits(bits_low, group, top),
                        );
                        let high = _mm512_or_si512(
                            _mm512_and_si512(_mm512_srli_epi16::<4>(w), nibble),
                            high_bits(bits_high, group, top),
                        );
                        for m in 0..M {
                            let a = &acts[m][block];
                            let at = chunk * 32 + group * 4;
                            isum_low[m] = _mm512_dpbusd_epi32(isum_low[m], low, broadcast(a, at));
                            isum_high[m] =
                                _mm512_dpbusd_epi32(isum_high[m], high, broadcast(a, at + 16));
                        }
                    }
                    for (sub, isum) in [(chunk * 2, &isum_low), (chunk * 2 + 1, &isum_high)] {
                        let scale = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_load_si128(
                            base.add(3072 + sub * 16).cast(),
                        )));
                        for m in 0..M {
                            let offset =
                                _mm512_set1_epi32(32 * i32::from(acts[m][block].sums16[sub]));
                            let values = _mm512_cvtepi32_ps(_mm512_sub_epi32(isum[m], offset));
                            scaled[m] = _mm512_fmadd_ps(values, scale, scaled[m]);
                        }
                    }
                }
                let d = _mm512_cvtph_ps(_mm256_load_si256(base.add(3328).cast()));
                for m in 0..M {
                    let da = _mm512_set1_ps(acts[m][block].d);
                    acc[m] = _mm512_fmadd_ps(scaled[m], _mm512_mul_ps(d, da), acc[m]);
                }
            }
            for m in 0..M {
                _mm512_storeu_ps(sums[m].as_mut_ptr(), acc[m]);
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::cell::Cell;
    use std::sync::Arc;

    use candle_core::quantized::{GgmlDType, QMatMul, QTensor, ggml_file};
    use candle_core::{Device, Module, Tensor};

    use super::*;

    thread_local! {
        /// Set by [`without_vnni`]: [`supported`] answers `false` on this thread.
        pub(crate) static VNNI_HIDDEN: Cell<bool> = const { Cell::new(false) };
    }

    /// Runs `body` as on a processor without AVX-512 VNNI (on this thread: the detection the
    /// loader, the quantization and the products consult).
    pub(crate) fn without_vnni<R>(body: impl FnOnce() -> R) -> R {
        VNNI_HIDDEN.with(|hidden| hidden.set(true));
        let result = body();
        VNNI_HIDDEN.with(|hidden| hidden.set(false));
        result
    }

    /// An f16 of random sign and mantissa, exponent 2^-7..2^-1 (the size of real block scales,
    /// never infinite or NaN).
    fn random_f16(rng: &mut fastrand::Rng) -> [u8; 2] {
        let sign = u16::from(rng.bool()) << 15;
        let exponent = rng.u16(8..15) << 10;
        (sign | exponent | rng.u16(0..1024)).to_le_bytes()
    }

    /// A `rows` × `columns` matrix of random `dtype` blocks: every bit of the values, scales and
    /// minimums random, the f16 scales finite.
    pub(crate) fn random_matrix(
        dtype: GgmlDType,
        rows: usize,
        columns: usize,
        seed: u64,
    ) -> QTensor {
        let mut rng = fastrand::Rng::with_seed(seed);
        let blocks = rows * columns / QK;
        let mut data = Vec::new();
        for _ in 0..blocks {
            let start = data.len();
            match dtype {
                GgmlDType::Q4K => {
                    data.extend(random_f16(&mut rng));
                    data.extend(random_f16(&mut rng));
                    data.extend((0..Q4K_BLOCK - 4).map(|_| rng.u8(..)));
                }
                _ => {
                    data.extend((0..Q6K_BLOCK - 2).map(|_| rng.u8(..)));
                    data.extend(random_f16(&mut rng));
                }
            }
            assert_eq!(data.len() - start, format(dtype).block_bytes());
        }
        ggml_file::qtensor_from_ggml(dtype, &data, vec![rows, columns], &Device::Cpu).unwrap()
    }

    /// `rows` × `columns` random activations in -2..2.
    pub(crate) fn random_input(rows: usize, columns: usize, seed: u64) -> Vec<f32> {
        let mut rng = fastrand::Rng::with_seed(seed);
        (0..rows * columns).map(|_| rng.f32() * 4.0 - 2.0).collect()
    }

    fn format(dtype: GgmlDType) -> Format {
        match dtype {
            GgmlDType::Q4K => Format::Q4K,
            _ => Format::Q6K,
        }
    }

    /// `matrix` (Q4_K or Q6_K, a shape the tiles hold) packed.
    pub(crate) fn pack(matrix: &QTensor) -> PackedMatrix {
        let (rows, columns) = matrix.shape().dims2().unwrap();
        let data = matrix.data().unwrap();
        PackedMatrix::pack(format(matrix.dtype()), &data, rows, columns).unwrap()
    }

    /// The packed product of `values` (`inputs` rows) by `matrix`, row-major.
    fn packed_product(matrix: &QTensor, values: &[f32], inputs: usize) -> Vec<f32> {
        let packed = pack(matrix);
        let quantized = QuantizedRows::new(values, inputs, packed.columns).unwrap();
        let mut output = vec![f32::NAN; inputs * packed.rows()];
        multiply(&mut [(&packed, &mut output)], &quantized).unwrap();
        output
    }

    /// candle's own product (`QMatMul`) of `values` (`inputs` rows) by `matrix`, row-major.
    pub(crate) fn candle_product(matrix: &Arc<QTensor>, values: &[f32], inputs: usize) -> Vec<f32> {
        let (_, columns) = matrix.shape().dims2().unwrap();
        let x = Tensor::from_slice(values, (inputs, columns), &Device::Cpu).unwrap();
        QMatMul::from_arc(Arc::clone(matrix))
            .unwrap()
            .forward(&x)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
    }

    /// The largest difference between `got` and `want`, relative to the largest magnitude of
    /// `want`; infinite when a value is not finite or the lengths differ.
    pub(crate) fn relative_error(got: &[f32], want: &[f32]) -> f32 {
        if got.len() != want.len() || !got.iter().chain(want).all(|value| value.is_finite()) {
            return f32::INFINITY;
        }
        let scale = want.iter().fold(0f32, |max, value| max.max(value.abs()));
        got.iter()
            .zip(want)
            .fold(0f32, |max, (a, b)| max.max((a - b).abs()))
            / scale
    }

    /// The matrices of Qwen2.5-Coder-1.5B (query and output, key and value, gate and up,
    /// down), one tile, and a small shape of several tile rows and super-blocks.
    const SHAPES: [(usize, usize); 6] = [
        (1536, 1536),
        (256, 1536),
        (8960, 1536),
        (1536, 8960),
        (16, 256),
        (48, 768),
    ];

    /// At the model's shapes, for random blocks (every bit pattern of values, scales and
    /// minimums), the packed products of one row (decoding), of four (one pass) and of seven
    /// (two passes, one partial) match candle's own products (`QMatMul`: the same 8-bit
    /// activations and integer sums, the f32 sums in another order) to float rounding.
    #[test]
    fn products_match_candles_at_the_models_shapes() {
        if !supported() {
            eprintln!("skipped: the processor lacks AVX-512 VNNI");
            return;
        }
        for (index, (rows, columns)) in SHAPES.into_iter().enumerate() {
            for dtype in [GgmlDType::Q4K, GgmlDType::Q6K] {
                let seed = index as u64 * 2 + u64::from(dtype == GgmlDType::Q6K);
                let matrix = Arc::new(random_matrix(dtype, rows, columns, seed));
                for inputs in [1, 4, 7] {
                    let values = random_input(inputs, columns, seed + 100);
                    let got = packed_product(&matrix, &values, inputs);
                    let want = candle_product(&matrix, &values, inputs);
                    let error = relative_error(&got, &want);
                    assert!(
                        error < 2e-6,
                        "{dtype:?} {rows}×{columns}, {inputs} rows: error {error}"
                    );
                }
            }
        }
    }

    /// Against the exact sums (f64) of candle's dequantized weights times the quantized
    /// activations, the packed products are off by f32 rounding only.
    #[test]
    fn products_are_exact_to_float_rounding() {
        if !supported() {
            eprintln!("skipped: the processor lacks AVX-512 VNNI");
            return;
        }
        for dtype in [GgmlDType::Q4K, GgmlDType::Q6K] {
            let (rows, columns, inputs) = (32, 1024, 2);
            let matrix = random_matrix(dtype, rows, columns, 7);
            let values = random_input(inputs, columns, 8);
            let got = packed_product(&matrix, &values, inputs);
            let weights = matrix
                .dequantize(&Device::Cpu)
                .unwrap()
                .to_vec2::<f32>()
                .unwrap();
            let quantized = QuantizedRows::new(&values, inputs, columns).unwrap();
            let mut want = Vec::new();
            for input in 0..inputs {
                let blocks = quantized.row(input);
                for row in &weights {
                    let sum: f64 = row
                        .iter()
                        .enumerate()
                        .map(|(i, w)| {
                            let block = &blocks[i / QK];
                            f64::from(*w) * f64::from(block.qs[i % QK]) * f64::from(block.d)
                        })
                        .sum();
                    want.push(sum as f32);
                }
            }
            let error = relative_error(&got, &want);
            assert!(error < 1e-6, "{dtype:?}: error {error}");
        }
    }

    /// The activations are quantized as candle's Q8_K (`round(-127 / max × x)`, halves away
    /// from zero, `max` the value of largest magnitude with its sign), the same with the
    /// AVX-512 code and without it, zeros included.
    #[test]
    fn quantization_is_candles_with_and_without_avx512() {
        let mut values = random_input(3, 256, 3);
        values[..256].fill(0.0);
        values[300] = -5.0;
        values[301] = 5.0;
        values[512] = -127.0;
        values[600] = 0.5;
        values[601] = 2.5;
        values[602] = -0.5;
        values[603] = -126.6;
        let fast = QuantizedRows::new(&values, 3, 256).unwrap();
        let portable = without_vnni(|| QuantizedRows::new(&values, 3, 256)).unwrap();
        for (a, b) in fast.blocks.iter().zip(&portable.blocks) {
            assert_eq!(a.qs, b.qs);
            assert_eq!(a.sums16, b.sums16);
            assert_eq!(a.min_pairs, b.min_pairs);
            assert_eq!(a.d.to_bits(), b.d.to_bits());
        }
        let [zero, first, second] = &fast.blocks[..] else {
            unreachable!()
        };
        assert!(zero.qs.iter().all(|q| *q == 0) && zero.d == 0.0 && zero.sums16 == [0; 16]);
        // The maximum maps to -127, and of two equal magnitudes it is the first: -5.
        assert_eq!((first.qs[300 - 256], first.qs[301 - 256]), (-127, 127));
        assert_eq!(first.d, 1.0 / (-127.0f32 / -5.0));
        assert_eq!(second.d, 1.0);
        assert_eq!(second.qs[0], -127);
        assert_eq!(&second.qs[600 - 512..604 - 512], &[1, 3, -1, -127]);
        for block in &fast.blocks {
            for (sum, chunk) in block.sums16.iter().zip(block.qs.chunks_exact(16)) {
                assert_eq!(
                    i32::from(*sum),
                    chunk.iter().map(|q| i32::from(*q)).sum::<i32>()
                );
            }
            for (pair, sums) in block.min_pairs.iter().zip(block.sums16.chunks_exact(4)) {
                assert_eq!(*pair as i16, sums[0] + sums[1]);
                assert_eq!((*pair >> 16) as i16, sums[2] + sums[3]);
            }
        }
    }

    /// Several matrices multiplied in one hand-out of work (the query, key and value
    /// projections; gate and up) give exactly what each gives alone.
    #[test]
    fn one_hand_out_for_several_matrices_equals_separate_products() {
        if !supported() {
            eprintln!("skipped: the processor lacks AVX-512 VNNI");
            return;
        }
        let query = pack(&random_matrix(GgmlDType::Q4K, 1536, 1536, 20));
        let key = pack(&random_matrix(GgmlDType::Q4K, 256, 1536, 21));
        let value = pack(&random_matrix(GgmlDType::Q6K, 256, 1536, 22));
        for inputs in [1, 5] {
            let values = random_input(inputs, 1536, 23);
            let input = QuantizedRows::new(&values, inputs, 1536).unwrap();
            let mut outputs: Vec<Vec<f32>> = [&query, &key, &value]
                .iter()
                .map(|matrix| vec![f32::NAN; inputs * matrix.rows()])
                .collect();
            let [q, k, v] = &mut outputs[..] else {
                unreachable!()
            };
            multiply(&mut [(&query, q), (&key, k), (&value, v)], &input).unwrap();
            for (matrix, fused) in [&query, &key, &value].into_iter().zip(&outputs) {
                let mut alone = vec![f32::NAN; inputs * matrix.rows()];
                multiply(&mut [(matrix, &mut alone)], &input).unwrap();
                assert_eq!(&alone, fused);
            }
        }
    }

    /// Shapes the tiles cannot hold are refused, not multiplied wrongly.
    #[test]
    fn refuses_shapes_that_do_not_fit() {
        let matrix = random_matrix(GgmlDType::Q4K, 32, 512, 1);
        let data = matrix.data().unwrap();
        assert!(PackedMatrix::pack(Format::Q4K, &data, 16, 512).is_none());
        assert!(PackedMatrix::pack(Format::Q4K, &data[..data.len() - 1], 32, 512).is_none());
        let matrix = random_matrix(GgmlDType::Q4K, 40, 512, 1);
        let data = matrix.data().unwrap();
        assert!(PackedMatrix::pack(Format::Q4K, &data, 40, 512).is_none());
        assert!(QuantizedRows::new(&[0.0; 300], 1, 300).is_none());
        assert!(QuantizedRows::new(&[0.0; 512], 1, 256).is_none());
        if !supported() {
            return;
        }
        let packed = pack(&random_matrix(GgmlDType::Q4K, 32, 512, 1));
        let input = QuantizedRows::new(&[0.5; 256], 1, 256).unwrap();
        let mut output = vec![0f32; 32];
        assert!(matches!(
            multiply(&mut [(&packed, &mut output)], &input),
            Err(KernelError::Shape { .. })
        ));
        let input = QuantizedRows::new(&[0.0; 512], 1, 512).unwrap();
        multiply(&mut [(&packed, &mut output)], &input).unwrap();
        assert!(output.iter().all(|value| *value == 0.0));
    }

    /// Without AVX-512 VNNI the products refuse to run (the callers use candle's instead).
    #[test]
    fn products_refuse_to_run_without_vnni() {
        let packed = pack(&random_matrix(GgmlDType::Q6K, 16, 256, 2));
        let input = QuantizedRows::new(&[0.5; 256], 1, 256).unwrap();
        let mut output = vec![0f32; 16];
        without_vnni(|| {
            assert!(!supported());
            assert_eq!(
                multiply(&mut [(&packed, &mut output)], &input),
                Err(KernelError::Unsupported)
            );
        });
    }
}
