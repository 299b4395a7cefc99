//! The BERT encoder the built-in model runs: embeddings, then self-attention and feed-forward
//! layers, on candle's CPU tensors. Our own rather than candle-transformers' so that a batch
//! costs little beyond its arithmetic: its texts are packed one after another with no padding
//! (a dense layer is one matrix product over every word piece of the batch; attention runs per
//! text over its own length, so no mask is needed and no padded word piece is ever computed), Q,
//! K and V are one matrix product (their weights concatenated at load, the attention scale
//! folded into Q), and GELU is a vectorisable erf of our own. Calls of up to 64 word pieces (a
//! query) run the same encoder with f16 weights instead, where the CPU has AVX-512 (`query`).

use candle_core::{CpuStorage, InplaceOp1, InplaceOp2, Layout, Module, Result, Tensor};
use candle_nn::{Embedding, LayerNorm, VarBuilder};
use rayon::prelude::*;
use serde::Deserialize;

use crate::math::{exp, gelu, max, sum};

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
    /// The f16 path for a few word pieces (a query), where the CPU has it (see `query`).
    #[cfg(target_arch = "x86_64")]
    query: Option<crate::query::QueryPath>,
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
    /// Loads the weights under `embeddings.` and `encoder.` (sentence-transformers' names);
    /// with `query_path`, also the f16 copy for short inputs where the CPU can run it.
    pub fn load(vb: VarBuilder, config: &Config, query_path: bool) -> Result<Bert> {
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
        #[cfg(target_arch = "x86_64")]
        let query = if query_path {
            let weights: Vec<_> = layers
                .iter()
                .map(|l| crate::query::LayerWeights {
                    qkv: (&l.qkv.weight_t, &l.qkv.bias),
                    attention_out: (&l.attention_out.weight_t, &l.attention_out.bias),
                    attention_norm: &l.attention_norm,
                    intermediate: (&l.intermediate.weight_t, &l.intermediate.bias),
                    output: (&l.output.weight_t, &l.output.bias),
                    output_norm: &l.output_norm,
                })
                .collect();
            crate::query::QueryPath::new(
                word_embeddings.embeddings(),
                &position_embeddings,
                &token_type,
                &embeddings_norm,
                &weights,
                config.num_attention_heads,
                eps,
            )?
        } else {
            None
        };
        #[cfg(not(target_arch = "x86_64"))]
        let _ = query_path;
        Ok(Bert {
            word_embeddings,
            position_embeddings,
            token_type,
            embeddings_norm,
            layers,
            heads: config.num_attention_heads,
            #[cfg(target_arch = "x86_64")]
            query,
        })
    }

    /// Whether short inputs take the f16 query path.
    pub fn has_query_path(&self) -> bool {
        #[cfg(target_arch = "x86_64")]
        return self.query.is_some();
        #[cfg(not(target_arch = "x86_64"))]
        false
    }

    /// `ids` is every text's word pieces, one text after another, and `lengths` how many
    /// each has (they sum to `ids.len()`). Returns each word piece's last hidden state,
    /// (word pieces, hidden), in the same order.
    pub fn forward(&self, ids: &[u32], lengths: &[usize]) -> Result<Tensor> {
        let total = ids.len();
        #[cfg(target_arch = "x86_64")]
        if let Some(query) = &self.query
            && total <= crate::query::MAX_WORD_PIECES
            && lengths.iter().sum::<usize>() == total
        {
            return query.forward(ids, lengths);
        }
        let positions: Vec<u32> = lengths
            .iter()
            .flat_map(|&n| 0..u32::try_from(n).unwrap_or(u32::MAX))
            .collect();
        if positions.len() != total {
            candle_core::bail!(
                "{total} word pieces but lengths that sum to {}",
                positions.len()
            );
        }
        let device = self.position_embeddings.device();
        let ids = Tensor::from_vec(ids.to_vec(), total, device)?;
        let positions = Tensor::from_vec(positions, total, device)?;
        let x = self
            .word_embeddings
            .forward(&ids)? // (word pieces, hidden)
            .add(&self.position_embeddings.index_select(&positions, 0)?)?
            .broadcast_add(&self.token_type)?;
        let mut x = self.embeddings_norm.forward(&x)?;
        for layer in &self.layers {
            x = layer.forward(&x, lengths, self.heads)?;
        }
        Ok(x)
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

    /// `x` is (word pieces, hidden), the texts of `lengths` one after another.
    fn forward(&self, x: &Tensor, lengths: &[usize], heads: usize) -> Result<Tensor> {
        let (total, hidden) = x.dims2()?;
        let size = hidden / heads;
        // (word pieces, 3 × hidden) → (3, heads, word pieces, size): one copy for all three, after
        // which a text's query, key or value is a narrow view with contiguous rows.
        let qkv = self
            .qkv
            .forward(x, false)?
            .reshape((total, 3, heads, size))?
            .permute((1, 2, 0, 3))?
            .contiguous()?;
        let (q, k, v) = (qkv.get(0)?, qkv.get(1)?, qkv.get(2)?);
        let mut contexts = Vec::with_capacity(lengths.len());
        let mut start = 0;
        for &n in lengths {
            let text = |t: &Tensor| t.narrow(1, start, n);
            let scores = text(&q)?.matmul(&text(&k)?.t()?)?; // (heads, n, n)
            scores.inplace_op1(&Softmax)?; // now the attention weights
            // (heads, n, size) → (n, heads, size): `cat` below writes it out in that order.
            contexts.push(scores.matmul(&text(&v)?)?.transpose(0, 1)?);
            start += n;
        }
        let context = Tensor::cat(&contexts, 0)?.reshape((total, hidden))?;
        // Each sum below is written into the fresh product it starts from, not a third tensor.
        let attended = self.attention_out.forward(&context, false)?;
        attended.inplace_op2(x, &Add)?;
        let attended = self.attention_norm.forward(&attended)?;
        let inner = self.intermediate.forward(&attended, true)?;
        let output = self.output.forward(&inner, false)?;
        output.inplace_op2(&attended, &Add)?;
        self.output_norm.forward(&output)
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

    /// `x` is (n, in); the result (n, out), through GELU if `gelu`.
    fn forward(&self, x: &Tensor, gelu: bool) -> Result<Tensor> {
        if x.dim(0)? <= FEW_WORD_PIECES {
            // A transposed view; the bias addition writes it out contiguous.
            let y = self
                .weight_t
                .t()?
                .matmul(&x.t()?)?
                .t()?
                .broadcast_add(&self.bias)?;
            if gelu {
                y.inplace_op1(&GeluErf)?;
            }
            Ok(y)
        } else {
            // The bias (and GELU) added in place, in one pass over the fresh product.
            let y = x.matmul(&self.weight_t)?;
            y.inplace_op2(&self.bias, &AddBias { gelu })?;
            Ok(y)
        }
    }
}

/// GELU in its exact form, x·(1 + erf(x/√2))/2, in place, with `math::erf` instead of
/// libm's: candle's `gelu_erf` calls libm's scalar `erff` per value (6% of a query's time) into
/// a new tensor, and the intermediate layer has 1,536 values per word piece.
struct GeluErf;

/// Softmax over the last dimension, in place, with `math::exp` instead of libm's: on
/// ingestion batches, libm's `expf` called once per attention score was 11% of the time.
struct Softmax;

/// `y += bias` row by row, then GELU if `gelu`, in place.
struct AddBias {
    gelu: bool,
}

/// `y += x` element by element, in place.
struct Add;

/// Below this many values one thread does it all: starting another costs more than it saves.
const PARALLEL_MIN: usize = 64 * 1024;

impl InplaceOp1 for GeluErf {
    fn name(&self) -> &'static str {
        "gelu-erf-fast"
    }

    fn cpu_fwd(&self, storage: &mut CpuStorage, layout: &Layout) -> Result<()> {
        in_parallel(contiguous_f32(storage, layout)?, 1, |_, values| {
            gelu(values)
        });
        Ok(())
    }
}

impl InplaceOp2 for AddBias {
    fn name(&self) -> &'static str {
        "add-bias"
    }

    fn cpu_fwd(
        &self,
        y: &mut CpuStorage,
        y_at: &Layout,
        b: &CpuStorage,
        b_at: &Layout,
    ) -> Result<()> {
        let bias = contiguous_f32_ref(b, b_at)?;
        let width = bias.len();
        if y_at.shape().dims().last() != Some(&width) {
            candle_core::bail!("a bias of {width} for rows of {:?}", y_at.shape());
        }
        in_parallel(contiguous_f32(y, y_at)?, width, |_, rows| {
            for row in rows.chunks_exact_mut(width) {
                row.iter_mut().zip(bias).for_each(|(y, b)| *y += b);
                if self.gelu {
                    gelu(row);
                }
            }
        });
        Ok(())
    }
}

impl InplaceOp2 for Add {
    fn name(&self) -> &'static str {
        "add"
    }

    fn cpu_fwd(
        &self,
        y: &mut CpuStorage,
        y_at: &Layout,
        x: &CpuStorage,
        x_at: &Layout,
    ) -> Result<()> {
        let x = contiguous_f32_ref(x, x_at)?;
        if y_at.shape() != x_at.shape() {
            candle_core::bail!("adding {:?} to {:?}", x_at.shape(), y_at.shape());
        }
        in_parallel(contiguous_f32(y, y_at)?, 1, |start, part| {
            part.iter_mut().zip(&x[start..]).for_each(|(y, x)| *y += x);
        });
        Ok(())
    }
}

impl InplaceOp1 for Softmax {
    fn name(&self) -> &'static str {
        "softmax-fast"
    }

    fn cpu_fwd(&self, storage: &mut CpuStorage, layout: &Layout) -> Result<()> {
        let width = layout.shape().dims().last().copied().unwrap_or(1).max(1);
        in_parallel(contiguous_f32(storage, layout)?, width, |_, rows| {
            for row in rows.chunks_exact_mut(width) {
                let max = max(row);
                row.iter_mut().for_each(|x| *x = exp(*x - max));
                let inverse = 1.0 / sum(row);
                row.iter_mut().for_each(|x| *x *= inverse);
            }
        });
        Ok(())
    }
}

/// The values of a contiguous f32 tensor, to overwrite.
fn contiguous_f32<'a>(storage: &'a mut CpuStorage, layout: &Layout) -> Result<&'a mut [f32]> {
    let CpuStorage::F32(values) = storage else {
        candle_core::bail!("f32 tensors only");
    };
    let Some((from, to)) = layout.contiguous_offsets() else {
        candle_core::bail!("contiguous tensors only");
    };
    Ok(&mut values[from..to])
}

/// The values of a contiguous f32 tensor, to read.
fn contiguous_f32_ref<'a>(storage: &'a CpuStorage, layout: &Layout) -> Result<&'a [f32]> {
    let CpuStorage::F32(values) = storage else {
        candle_core::bail!("f32 tensors only");
    };
    let Some((from, to)) = layout.contiguous_offsets() else {
        candle_core::bail!("contiguous tensors only");
    };
    Ok(&values[from..to])
}

/// Runs `f` over `values` cut into parts of whole `unit`s on rayon's pool (the threads candle's
/// matrix products run on), or whole on this thread when they are few; `f` gets each part with
/// its offset in `values`. Not candle's own element-wise pool: its idle worker spins for up to
/// 25,000 pauses between operations, and on ingestion batches a third of the CPU samples were
/// those spins, taking a core from the matrix products on two.
fn in_parallel(values: &mut [f32], unit: usize, f: impl Fn(usize, &mut [f32]) + Sync) {
    let threads = rayon::current_num_threads().max(1);
    if threads == 1 || values.len() < PARALLEL_MIN {
        f(0, values);
        return;
    }
    // A few parts per thread, so one slowed by other work on the machine is helped out.
    let part = values.len().div_ceil(threads * 4).div_ceil(unit) * unit;
    values
        .par_chunks_mut(part)
        .enumerate()
        .for_each(|(i, values)| f(i * part, values));
}
