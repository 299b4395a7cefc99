//! The built-in embedder: all-MiniLM-L6-v2, a 6-layer BERT, run on the CPU with candle, as
//! sentence-transformers runs it: word pieces truncated at 256, mean pooling over the attention
//! mask, then L2 normalisation. No network, no native libraries: the files come from a
//! directory (`scripts/model install`, or a Lambda layer).

use std::path::Path;
use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
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
    /// most texts run in one forward pass.
    pub fn load(dir: &Path, batch: usize) -> Result<BuiltIn, EmbedError> {
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
        // Each batch is padded here to its own longest text, not to the file's fixed 128.
        tokenizer.with_padding(None);
        // Read whole rather than memory-mapped: mapping is `unsafe` in candle, which this
        // workspace forbids, and the 87 MiB file reads in tens of milliseconds.
        let weights = read("model.safetensors")?;
        let vb = VarBuilder::from_buffered_safetensors(weights, DType::F32, &Device::Cpu)
            .map_err(|e| fail(format!("model.safetensors: {e}")))?;
        let bert = Bert::load(vb, &config).map_err(|e| fail(format!("model.safetensors: {e}")))?;
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
    /// for a while: call it from a blocking thread). Texts are sorted by length before being
    /// batched, so a batch pads little.
    pub fn embed_blocking(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let model = &self.inner;
        let inputs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let encodings = model
            .tokenizer
            .encode_batch_fast(inputs, true)
            .map_err(|e| EmbedError::Inference(format!("tokenizing: {e}")))?;
        let mut order: Vec<usize> = (0..encodings.len()).collect();
        order.sort_by_key(|&i| encodings[i].get_ids().len());
        let mut vectors = vec![Vec::new(); encodings.len()];
        for batch in order.chunks(model.batch) {
            let batch_encodings: Vec<&Encoding> = batch.iter().map(|&i| &encodings[i]).collect();
            let embedded = model
                .forward(&batch_encodings)
                .map_err(|e| EmbedError::Inference(e.to_string()))?;
            for (&i, vector) in batch.iter().zip(embedded) {
                vectors[i] = vector;
            }
        }
        Ok(vectors)
    }
}

impl Model {
    /// The pooled, normalised vectors of one batch, padded to its longest text.
    fn forward(&self, encodings: &[&Encoding]) -> candle_core::Result<Vec<Vec<f32>>> {
        let rows = encodings.len();
        let width = encodings
            .iter()
            .map(|e| e.get_ids().len())
            .max()
            .unwrap_or(0);
        let mut ids = Vec::with_capacity(rows * width);
        let mut mask = Vec::with_capacity(rows * width);
        for encoding in encodings {
            let own = encoding.get_ids();
            ids.extend_from_slice(own);
            ids.extend(std::iter::repeat_n(0u32, width - own.len()));
            mask.extend(std::iter::repeat_n(1u32, own.len()));
            mask.extend(std::iter::repeat_n(0u32, width - own.len()));
        }
        let padded = encodings.iter().any(|e| e.get_ids().len() < width);
        let ids = Tensor::from_vec(ids, (rows, width), &Device::Cpu)?;
        let mask = Tensor::from_vec(mask, (rows, width), &Device::Cpu)?;
        let hidden = self.bert.forward(&ids, padded.then_some(&mask))?; // (rows, width, 384)
        // Mean over the real word pieces only: padding must not pull the average.
        let mask = mask.to_dtype(DType::F32)?.unsqueeze(2)?; // (rows, width, 1)
        let summed = hidden.broadcast_mul(&mask)?.sum(1)?; // (rows, 384)
        let counts = mask.sum(1)?; // (rows, 1)
        let mean = summed.broadcast_div(&counts)?;
        // As torch's F.normalize: divide by the norm, kept away from zero.
        let norms = mean
            .sqr()?
            .sum_keepdim(1)?
            .sqrt()?
            .clamp(1e-12f32, f32::MAX)?;
        mean.broadcast_div(&norms)?.to_vec2::<f32>()
    }
}
