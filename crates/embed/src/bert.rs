//! The BERT encoder the built-in model runs: embeddings, then self-attention and feed-forward
//! layers, on candle's CPU tensors. Our own rather than candle-transformers' so that a query
//! costs few tensor operations: Q, K and V are one matrix product (their weights concatenated
//! at load, the attention scale folded into Q), the padding mask becomes one additive bias per
//! batch (none when nothing is padded), activations stay two-dimensional (one matrix product
//! per linear layer, not one per text), and softmax and layer norm are candle-nn's fused ones.

use candle_core::{DType, Module, Result, Tensor};
use candle_nn::{Embedding, LayerNorm, VarBuilder};
use serde::Deserialize;

/// The fields of a BERT `config.json` this encoder reads.
#[derive(Debug, Clone, Deserialize)]
pub struct Config {
    pub hidden_size: usize,
    pub num_attention_heads: usize,
    pub num_hidden_layers: usize,
    pub intermediate_size: usize,
    pub max_position_embeddings: usize,
    pub layer_norm_eps: f64,
    /// Only `gelu` (the exact, erf form) is supported.
    pub hidden_act: String,
}

/// A loaded encoder; its `forward` gives each word piece's last hidden state.
pub struct Bert {
    word_embeddings: Embedding,
    position_embeddings: Tensor,
    /// Token type 0's embedding: every text here is a single segment.
    token_type: Tensor,
    embeddings_norm: LayerNorm,
    layers: Vec<Layer>,
    heads: usize,
    hidden: usize,
}

struct Layer {
    /// Query, key and value in one: `hidden` → `3 × hidden`, query pre-scaled by 1/√head size.
    qkv: Linear,
    attention_out: Linear,
    attention_norm: LayerNorm,
    intermediate: Linear,
    output: Linear,
    output_norm: LayerNorm,
}

impl Bert {
    /// Loads the weights under `embeddings.` and `encoder.` (sentence-transformers' names).
    pub fn load(vb: VarBuilder, config: &Config) -> Result<Bert> {
        if config.hidden_act != "gelu" {
            candle_core::bail!("hidden_act {:?} is not supported", config.hidden_act);
        }
        if !config
            .hidden_size
            .is_multiple_of(config.num_attention_heads)
        {
            candle_core::bail!("hidden_size is not a multiple of num_attention_heads");
        }
        let hidden = config.hidden_size;
        let eps = config.layer_norm_eps;
        let embeddings = vb.pp("embeddings");
        let word_embeddings = candle_nn::embedding(
            // The vocabulary size is whatever the file holds.
            embeddings
                .pp("word_embeddings")
                .get_unchecked("weight")?
                .dim(0)?,
            hidden,
            embeddings.pp("word_embeddings"),
        )?;
        let position_embeddings = embeddings.get(
            (config.max_position_embeddings, hidden),
            "position_embeddings.weight",
        )?;
        let token_type = embeddings
            .get_unchecked("token_type_embeddings.weight")?
            .get(0)?;
        let embeddings_norm = candle_nn::layer_norm(hidden, eps, embeddings.pp("LayerNorm"))?;
        let scale = 1.0 / ((hidden / config.num_attention_heads) as f64).sqrt();
        let layers = (0..config.num_hidden_layers)
            .map(|i| Layer::load(vb.pp(format!("encoder.layer.{i}")), config, scale))
            .collect::<Result<Vec<_>>>()?;
        Ok(Bert {
            word_embeddings,
            position_embeddings,
            token_type,
            embeddings_norm,
            layers,
            heads: config.num_attention_heads,
            hidden,
        })
    }

    /// `ids` is (texts, width), `mask` the same shape with 1 for a real word piece and 0 for
    /// padding, or `None` when no text is padded. Returns (texts, width, hidden).
    pub fn forward(&self, ids: &Tensor, mask: Option<&Tensor>) -> Result<Tensor> {
        let (rows, width) = ids.dims2()?;
        let positions = self.position_embeddings.narrow(0, 0, width)?;
        let x = self
            .word_embeddings
            .forward(&ids.flatten_all()?)? // (rows × width, hidden)
            .reshape((rows, width, self.hidden))?
            .broadcast_add(&positions.broadcast_add(&self.token_type)?)?
            .reshape((rows * width, self.hidden))?;
        let mut x = self.embeddings_norm.forward(&x)?;
        // Padding gets the lowest float added to its scores, so softmax gives it nothing.
        let bias = match mask {
            Some(mask) => Some(
                ((mask.to_dtype(DType::F32)? - 1.0)? * f64::from(f32::MAX))?
                    .reshape((rows, 1, 1, width))?,
            ),
            None => None,
        };
        for layer in &self.layers {
            x = layer.forward(&x, bias.as_ref(), rows, width, self.heads)?;
        }
        x.reshape((rows, width, self.hidden))
    }
}

impl Layer {
    fn load(vb: VarBuilder, config: &Config, scale: f64) -> Result<Layer> {
        let hidden = config.hidden_size;
        let eps = config.layer_norm_eps;
        let part = |name: &str| -> Result<(Tensor, Tensor)> {
            let vb = vb.pp("attention.self").pp(name);
            Ok((vb.get((hidden, hidden), "weight")?, vb.get(hidden, "bias")?))
        };
        let (query_weight, query_bias) = part("query")?;
        let (key_weight, key_bias) = part("key")?;
        let (value_weight, value_bias) = part("value")?;
        let qkv = Linear::new(
            &Tensor::cat(&[(query_weight * scale)?, key_weight, value_weight], 0)?,
            Tensor::cat(&[(query_bias * scale)?, key_bias, value_bias], 0)?,
        )?;
        Ok(Layer {
            qkv,
            attention_out: Linear::load(hidden, hidden, vb.pp("attention.output.dense"))?,
            attention_norm: candle_nn::layer_norm(
                hidden,
                eps,
                vb.pp("attention.output.LayerNorm"),
            )?,
            intermediate: Linear::load(
                hidden,
                config.intermediate_size,
                vb.pp("intermediate.dense"),
            )?,
            output: Linear::load(config.intermediate_size, hidden, vb.pp("output.dense"))?,
            output_norm: candle_nn::layer_norm(hidden, eps, vb.pp("output.LayerNorm"))?,
        })
    }

    /// `x` is (rows × width, hidden).
    fn forward(
        &self,
        x: &Tensor,
        bias: Option<&Tensor>,
        rows: usize,
        width: usize,
        heads: usize,
    ) -> Result<Tensor> {
        let hidden = x.dim(1)?;
        let size = hidden / heads;
        // (rows × width, 3 × hidden) → (3, rows, heads, width, size): one copy for all three.
        let qkv = self
            .qkv
            .forward(x)?
            .reshape((rows, width, 3, heads, size))?
            .permute((2, 0, 3, 1, 4))?
            .contiguous()?;
        let part = |i: usize| qkv.get(i)?.reshape((rows * heads, width, size));
        let (q, k, v) = (part(0)?, part(1)?, part(2)?);
        let scores = q.matmul(&k.t()?)?; // (rows × heads, width, width)
        let scores = match bias {
            Some(bias) => scores
                .reshape((rows, heads, width, width))?
                .broadcast_add(bias)?
                .reshape((rows * heads, width, width))?,
            None => scores,
        };
        let probabilities = candle_nn::ops::softmax_last_dim(&scores)?;
        let context = probabilities
            .matmul(&v)? // (rows × heads, width, size)
            .reshape((rows, heads, width, size))?
            .transpose(1, 2)?
            .contiguous()?
            .reshape((rows * width, hidden))?;
        let attended = self
            .attention_norm
            .forward(&(self.attention_out.forward(&context)? + x)?)?;
        let inner = self.intermediate.forward(&attended)?.gelu_erf()?;
        self.output_norm
            .forward(&(self.output.forward(&inner)? + attended)?)
    }
}

/// A dense layer. The weight is kept transposed, (in, out) row-major, which is the
/// column-major (out, in) matrix the `gemm` kernels read without repacking it.
struct Linear {
    weight_t: Tensor,
    bias: Tensor,
}

/// Up to this many word pieces, a dense layer multiplies weight × inputᵀ rather than
/// input × weightᵀ. With few word pieces the product is dominated by reading the weight, and
/// `gemm` packs a left operand that is not column-major on every call: the weight, kept
/// column-major, is then read once and never copied. For chunk batches of thousands of word
/// pieces the usual order was as fast. Where between the two the crossover lies was not
/// measured.
const FEW_WORD_PIECES: usize = 64;

impl Linear {
    /// `weight` in PyTorch's (out, in) layout.
    fn new(weight: &Tensor, bias: Tensor) -> Result<Linear> {
        Ok(Linear {
            weight_t: weight.t()?.contiguous()?,
            bias,
        })
    }

    fn load(inputs: usize, outputs: usize, vb: VarBuilder) -> Result<Linear> {
        Linear::new(
            &vb.get((outputs, inputs), "weight")?,
            vb.get(outputs, "bias")?,
        )
    }

    /// `x` is (n, in); the result (n, out).
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let product = if x.dim(0)? <= FEW_WORD_PIECES {
            // A transposed view; the bias addition writes it out contiguous.
            self.weight_t.t()?.matmul(&x.t()?)?.t()?
        } else {
            x.matmul(&self.weight_t)?
        };
        product.broadcast_add(&self.bias)
    }
}
