//! The built-in embedder: all-MiniLM-L6-v2, a 6-layer BERT, run on the CPU with candle, as
//! sentence-transformers runs it: word pieces truncated at 256, mean pooling over the attention
//! mask, then L2 normalisation. No network, no native libraries: the files come from a
//! directory (`scripts/model install`, or a Lambda layer).

use std::path::Path;
use std::sync::Arc;

use candle_core::{DType, Device};
use candle_nn::VarBuilder;
use tokenizers::{Encoding, Tokenizer, TruncationParams};

use crate::bert::{Bert, Config};
use crate::{BUILT_IN_MODEL, EmbedError};

/// sentence-transformers' `max_seq_length` for this model (its `sentence_bert_config.json`),
/// counting `[CLS]` and `[SEP]`. The `tokenizer.json` shipped with it says 128, which is not
/// what the model's reference vectors use.
const MAX_WORD_PIECES: usize = 256;

const MODEL_ID: &str = "all-MiniLM-L6-v2@384";
const DIMS: usize = 384;

/// The loaded model; cheap to clone (the weights are shared).
#[derive(Clone)]
pub struct BuiltIn {
    inner: Arc<Model>,
}

struct Model {
    bert: Bert,
    tokenizer: Tokenizer,
    batch: usize,
}

impl BuiltIn {
    /// Loads `model.safetensors`, `config.json` and `tokenizer.json` from `dir`. `batch` is the
    /// most texts run in one forward pass. Where the CPU has AVX-512, calls of up to 64 word
    /// pieces (a query) run with f16 weights (see `query.rs`: within cosine 0.9999 of f32).
    pub fn load(dir: &Path, batch: usize) -> Result<BuiltIn, EmbedError> {
        Self::load_with(dir, batch, true)
    }

    /// As [`BuiltIn::load`], but every call runs the f32 model: the reference the f16 query
    /// path is checked against.
    pub fn load_f32(dir: &Path, batch: usize) -> Result<BuiltIn, EmbedError> {
        Self::load_with(dir, batch, false)
    }

    /// Whether short calls take the f16 query path (the CPU has AVX-512).
    pub fn has_query_path(&self) -> bool {
        self.inner.bert.has_query_path()
    }

    fn load_with(dir: &Path, batch: usize, query_path: bool) -> Result<BuiltIn, EmbedError> {
        let fail = |problem: String| EmbedError::Model {
            dir: dir.to_owned(),
            problem,
        };
        let read = |name: &str| {
            std::fs::read(dir.join(name)).map_err(|e| fail(format!("reading {name}: {e}")))
        };
        let config: Config = serde_json::from_slice(&read("config.json")?)
            .map_err(|e| fail(format!("config.json: {e}")))?;
        if config.hidden_size != DIMS {
            return Err(fail(format!(
                "config.json says {} dimensions, not {BUILT_IN_MODEL}'s {DIMS}",
                config.hidden_size
            )));
        }
        let mut tokenizer = Tokenizer::from_bytes(read("tokenizer.json")?)
            .map_err(|e| fail(format!("tokenizer.json: {e}")))?;
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: MAX_WORD_PIECES,
                ..TruncationParams::default()
            }))
            .map_err(|e| fail(format!("tokenizer.json: {e}")))?;
        // Texts are packed unpadded (see `bert`), not padded to the file's fixed 128.
        tokenizer.with_padding(None);
        // Read whole rather than memory-mapped: mapping is `unsafe` in candle, which this
        // workspace forbids, and the 87 MiB file reads in tens of milliseconds.
        let weights = read("model.safetensors")?;
        let vb = VarBuilder::from_buffered_safetensors(weights, DType::F32, &Device::Cpu)
            .map_err(|e| fail(format!("model.safetensors: {e}")))?;
        let bert = Bert::load(vb, &config, query_path)
            .map_err(|e| fail(format!("model.safetensors: {e}")))?;
        Ok(BuiltIn {
            inner: Arc::new(Model {
                bert,
                tokenizer,
                batch: batch.max(1),
            }),
        })
    }

    pub fn model_id(&self) -> &str {
        MODEL_ID
    }

    pub fn dims(&self) -> usize {
        DIMS
    }

    /// One unit-length vector per text, in order, computed on this thread (it takes the CPU
    /// for a while: call it from a blocking thread).
    pub fn embed_blocking(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let model = &self.inner;
        let inputs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let encodings = model
            .tokenizer
            .encode_batch_fast(inputs, true)
            .map_err(|e| EmbedError::Inference(format!("tokenizing: {e}")))?;
        let mut vectors = Vec::with_capacity(encodings.len());
        for batch in encodings.chunks(model.batch) {
            let batch: Vec<&Encoding> = batch.iter().collect();
            vectors.extend(
                model
                    .forward(&batch)
                    .map_err(|e| EmbedError::Inference(e.to_string()))?,
            );
        }
        Ok(vectors)
    }
}

impl Model {
    /// The pooled, normalised vectors of one batch, its texts packed without padding.
    fn forward(&self, encodings: &[&Encoding]) -> candle_core::Result<Vec<Vec<f32>>> {
        let lengths: Vec<usize> = encodings.iter().map(|e| e.get_ids().len()).collect();
        let ids: Vec<u32> = encodings
            .iter()
            .flat_map(|e| e.get_ids().iter().copied())
            .collect();
        let hidden = self.bert.forward(&ids, &lengths)?; // (word pieces, 384)
        let hidden = hidden.flatten_all()?.to_vec1::<f32>()?;
        let mut rows = hidden.chunks_exact(DIMS);
        let mut vectors = Vec::with_capacity(lengths.len());
        for &n in &lengths {
            // Mean over the text's word pieces, then as torch's F.normalize: divide by the
            // norm, kept away from zero.
            let mut mean = vec![0f32; DIMS];
            for row in rows.by_ref().take(n) {
                for (m, x) in mean.iter_mut().zip(row) {
                    *m += x;
                }
            }
            let count = n.max(1) as f32;
            mean.iter_mut().for_each(|m| *m /= count);
            let norm = mean.iter().map(|m| m * m).sum::<f32>().sqrt().max(1e-12);
            mean.iter_mut().for_each(|m| *m /= norm);
            vectors.push(mean);
        }
        Ok(vectors)
    }
}
