//! [`KvCache`]: the keys and values of every position a model processed so far, per block.

use candle_core::Tensor;

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
