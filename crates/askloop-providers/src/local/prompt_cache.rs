//! The prompt cache on disk: the keys and values of a prompt's complete 64-token blocks, kept
//! beside the model file (`<model file>.prompt-cache`) so that a new process does not process
//! again what an earlier one did. Every run of an agent starts with the same instructions and
//! tool list (616 tokens for the built-in agent on Qwen2.5, of which the first 576 are complete
//! blocks before the user's message), so a second `askloop run` processes only the tail.
//!
//! The idea is llama.cpp's prompt cache (`--prompt-cache`); the file is a
//! [safetensors](https://huggingface.co/docs/safetensors) file written by candle: `tokens` (u32,
//! the blocks' token ids), `identity` (u8, the text that ties it to one model file: format
//! version, the file's size and modification time, the model's shape), and `key.{block}` /
//! `value.{block}` (f32, `[1, kv_heads, tokens, head_dim]`) per transformer block. Reusing a
//! block changes no number: a block's keys and values depend only on the tokens up to its end
//! and are computed the same way in every process (see `generate::prefill`).
//!
//! The cache is an optimisation only: a missing, unreadable, foreign or malformed file is
//! ignored (logged at debug) and replaced by the next process that processes a prompt; a file
//! that cannot be written is logged at debug and the call goes on. Writes are atomic (a
//! temporary file renamed into place), so concurrent processes never see half a file.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};

use crate::local::config::LlamaConfig;
use crate::local::files::modified_ns;
use crate::local::kv_cache::KvCache;

/// The version of the file's layout, part of its identity.
const FORMAT: &str = "askloop-prompt-cache/1";

/// Positions kept at most (about 57 MB for Qwen2.5-1.5B, 57,344 bytes per position).
pub(crate) const MAX_POSITIONS: usize = 1024;

/// Where the prompt cache of the model file `model` is kept: `<model file>.prompt-cache`, beside
/// it. Removing the file is always safe: the next call processes its prompt in full and writes
/// it again.
pub fn prompt_cache_path(model: &Path) -> PathBuf {
    let mut name = model.file_name().unwrap_or_default().to_os_string();
    name.push(".prompt-cache");
    model.with_file_name(name)
}

/// The prompt cache of one model file.
pub(crate) struct PromptCache {
    path: PathBuf,
    identity: String,
}

impl PromptCache {
    /// The cache beside `model` for a model of shape `config`, or `None` when the model file's
    /// size or modification time cannot be read (then nothing is cached).
    pub(crate) fn beside(model: &Path, config: &LlamaConfig) -> Option<Self> {
        Self::at(prompt_cache_path(model), model, config)
    }

    /// A cache kept at `path` for the model file `model` of shape `config`; `None` as for
    /// [`PromptCache::beside`].
    pub(crate) fn at(path: PathBuf, model: &Path, config: &LlamaConfig) -> Option<Self> {
        let metadata = std::fs::metadata(model).ok()?;
        let modified = modified_ns(&metadata)?;
        Some(Self {
            path,
            identity: format!(
                "{FORMAT}\nsize {}\nmodified_ns {modified}\nblocks {} kv_heads {} head_dim {}\n",
                metadata.len(),
                config.layers,
                config.kv_heads,
                config.head_dim
            ),
        })
    }

    /// The file.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The stored tokens and their keys and values, or `None` when there is no usable file.
    /// `config` is the model's shape: every tensor must have it.
    pub(crate) fn load(&self, config: &LlamaConfig) -> Option<(Vec<u32>, KvCache)> {
        match self.read(config) {
            Ok(stored) => Some(stored),
            Err(reason) => {
                tracing::debug!(path = %self.path.display(), reason, "local model: no prompt cache used");
                None
            }
        }
    }

    fn read(&self, config: &LlamaConfig) -> Result<(Vec<u32>, KvCache), String> {
        if !self.path.exists() {
            return Err("no file".to_owned());
        }
        let mut tensors =
            candle_core::safetensors::load(&self.path, &Device::Cpu).map_err(|e| e.to_string())?;
        let mut take = |name: &str| tensors.remove(name).ok_or_else(|| format!("no {name}"));
        let identity = take("identity")?
            .to_vec1::<u8>()
            .map_err(|e| e.to_string())?;
        if identity != self.identity.as_bytes() {
            return Err("written for another model file".to_owned());
        }
        let tokens = take("tokens")?
            .to_vec1::<u32>()
            .map_err(|e| e.to_string())?;
        let len = tokens.len();
        if len == 0 || len > MAX_POSITIONS {
            return Err(format!("{len} positions"));
        }
        let shape = [1, config.kv_heads, len, config.head_dim];
        let mut blocks = Vec::with_capacity(config.layers);
        for block in 0..config.layers {
            let mut part = |kind: &str| -> Result<Tensor, String> {
                let tensor = take(&format!("{kind}.{block}"))?;
                if tensor.dims() != shape || tensor.dtype() != DType::F32 {
                    return Err(format!(
                        "{kind}.{block} is {:?} {:?}",
                        tensor.dtype(),
                        tensor.dims()
                    ));
                }
                Ok(tensor)
            };
            blocks.push((part("key")?, part("value")?));
        }
        Ok((tokens, KvCache::from_blocks(blocks, len)))
    }

    /// Stores the first `tokens.len()` positions of `cache` (at most [`MAX_POSITIONS`]),
    /// replacing the file atomically. Failures are logged at debug and otherwise ignored.
    pub(crate) fn store(&self, tokens: &[u32], cache: &KvCache) {
        let len = tokens.len().min(MAX_POSITIONS);
        let written = (|| -> Result<(), String> {
            // First, so that a folder that cannot be written costs nothing more.
            let dir = self.path.parent().unwrap_or_else(|| Path::new("."));
            let file = tempfile::NamedTempFile::new_in(dir).map_err(|e| e.to_string())?;
            let blocks = cache
                .prefix(len)
                .map_err(|e| e.to_string())?
                .ok_or("the cache holds fewer positions")?;
            let mut tensors: HashMap<String, Tensor> = HashMap::with_capacity(2 * blocks.len() + 2);
            let bytes = |data: &[u8]| Tensor::new(data, &Device::Cpu).map_err(|e| e.to_string());
            tensors.insert("identity".to_owned(), bytes(self.identity.as_bytes())?);
            tensors.insert(
                "tokens".to_owned(),
                Tensor::new(&tokens[..len], &Device::Cpu).map_err(|e| e.to_string())?,
            );
            for (block, (key, value)) in blocks.into_iter().enumerate() {
                let contiguous = |t: Tensor| t.contiguous().map_err(|e| e.to_string());
                tensors.insert(format!("key.{block}"), contiguous(key)?);
                tensors.insert(format!("value.{block}"), contiguous(value)?);
            }
            candle_core::safetensors::save(&tensors, file.path()).map_err(|e| e.to_string())?;
            file.persist(&self.path)
                .map_err(|error| error.error.to_string())?;
            Ok(())
        })();
        match written {
            Ok(()) => {
                tracing::debug!(path = %self.path.display(), positions = len, "local model: prompt cache stored")
            }
            Err(reason) => {
                tracing::debug!(path = %self.path.display(), reason, "local model: prompt cache not stored")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> LlamaConfig {
        LlamaConfig {
            layers: 2,
            hidden: 8,
            heads: 2,
            kv_heads: 1,
            head_dim: 4,
            rope_base: 10_000.0,
            rms_eps: 1e-5,
            context_length: 256,
        }
    }

    /// A cache of `len` positions with distinct values.
    fn cache(config: &LlamaConfig, len: usize) -> KvCache {
        let blocks = (0..config.layers)
            .map(|block| {
                let make = |offset: f32| {
                    let count = config.kv_heads * len * config.head_dim;
                    let data: Vec<f32> = (0..count)
                        .map(|i| offset + block as f32 * 1000.0 + i as f32)
                        .collect();
                    Tensor::from_vec(
                        data,
                        (1, config.kv_heads, len, config.head_dim),
                        &Device::Cpu,
                    )
                    .unwrap()
                };
                (make(0.5), make(-0.25))
            })
            .collect();
        KvCache::from_blocks(blocks, len)
    }

    fn model_file(dir: &Path) -> PathBuf {
        let path = dir.join("model.gguf");
        std::fs::write(&path, b"not really a model").unwrap();
        path
    }

    fn values(cache: &KvCache, len: usize) -> Vec<Vec<f32>> {
        cache
            .prefix(len)
            .unwrap()
            .unwrap()
            .into_iter()
            .flat_map(|(key, value)| [key, value])
            .map(|t| t.flatten_all().unwrap().to_vec1::<f32>().unwrap())
            .collect()
    }

    #[test]
    fn stored_blocks_come_back_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let model = model_file(dir.path());
        let config = config();
        let store = PromptCache::beside(&model, &config).unwrap();
        assert_eq!(store.path(), dir.path().join("model.gguf.prompt-cache"));
        assert!(store.load(&config).is_none(), "no file yet");

        // 5 positions held, the first 3 stored.
        let full = cache(&config, 5);
        store.store(&[7, 8, 9], &full);
        let (tokens, loaded) = store.load(&config).unwrap();
        assert_eq!(tokens, [7, 8, 9]);
        assert_eq!(loaded.len(), 3);
        assert_eq!(values(&loaded, 3), values(&full, 3));
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        assert_eq!(leftovers.len(), 2, "no temporary file left: {leftovers:?}");
    }

    #[test]
    fn a_file_of_another_model_or_shape_or_garbage_is_ignored_and_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let model = model_file(dir.path());
        let config = config();
        let store = PromptCache::beside(&model, &config).unwrap();
        store.store(&[1, 2], &cache(&config, 2));

        // Another shape of model.
        let mut other = config.clone();
        other.kv_heads = 2;
        assert!(
            PromptCache::beside(&model, &other)
                .unwrap()
                .load(&other)
                .is_none()
        );
        // The model file changed (size and modification time).
        std::fs::write(&model, b"another model, longer than the first").unwrap();
        let changed = PromptCache::beside(&model, &config).unwrap();
        assert!(changed.load(&config).is_none());
        // Garbage, and a file cut short.
        std::fs::write(changed.path(), b"\x10\0\0\0\0\0\0\0{garbage").unwrap();
        assert!(changed.load(&config).is_none());
        changed.store(&[1, 2], &cache(&config, 2));
        let bytes = std::fs::read(changed.path()).unwrap();
        std::fs::write(changed.path(), &bytes[..bytes.len() - 3]).unwrap();
        assert!(changed.load(&config).is_none());
        // The next store replaces it.
        changed.store(&[4, 5, 6], &cache(&config, 3));
        assert_eq!(changed.load(&config).unwrap().0, [4, 5, 6]);
    }

    #[test]
    fn a_cache_shorter_than_the_tokens_is_not_stored() {
        let dir = tempfile::tempdir().unwrap();
        let model = model_file(dir.path());
        let config = config();
        let store = PromptCache::beside(&model, &config).unwrap();
        store.store(&[1, 2, 3], &cache(&config, 2));
        assert!(!store.path().exists());
    }
}
