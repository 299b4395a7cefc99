//! The query path: the encoder for a few word pieces (a search query is about 14), in plain
//! slices rather than candle tensors, with the four dense layers' weights in f16.
//!
//! At a query's size the f32 encoder is bound by its matrix products, which read the six layers'
//! 42 MB of f32 weights once per query for 14 rows each: more than a 32 MiB L3 holds, and
//! `gemm`'s kernels are made for larger products. Here each dense layer keeps a copy of its
//! weights in f16 (21 MB, derived at load from the f32 safetensors; the f32 ones stay for
//! ingestion's batches), packed in panels of [`PANEL`] outputs so that one AVX-512 kernel reads
//! them once, front to back, converts them to f32 (`vcvtph2ps`) and multiplies them into up to
//! [`ROWS`] word pieces' rows with f32 accumulation. Everything else (embeddings, layer norms,
//! attention, GELU, the residual additions, the activations) stays in f32, and candle's
//! per-operation costs (allocations, layouts, dispatch: about 20 operations a layer) are gone.
//!
//! f16 keeps 11 significant bits: the vectors stay within cosine 0.9999 of the f32 model's
//! (`tests/query_path.rs` checks it over 129 texts; the lowest was 0.9999992), so queries embedded here and chunks
//! ingested by the f32 path remain comparable. The path runs only where the CPU has AVX-512
//! (x86-64 with `avx512f`, detected at run time through `pulp`, which lets this crate use the
//! instructions without `unsafe`); elsewhere every text takes the f32 path.

use candle_core::{Result, Tensor};
use candle_nn::LayerNorm;
use pulp::x86::V4;
use pulp::{Simd, f32x16};
use std::arch::x86_64::__m256i;

use crate::math::{exp, gelu, max, sum};

/// Up to this many word pieces (all the texts of a call together) take this path; longer
/// inputs take the f32 one, whose matrix products are efficient at ingestion's sizes.
pub const MAX_WORD_PIECES: usize = 64;

/// Outputs per weight panel: two 16-lane vectors.
const PANEL: usize = 32;

/// The most word pieces one kernel call multiplies at once: 2 × 8 accumulators, the two
/// converted weight vectors and the broadcast input fit AVX-512's 32 registers.
const ROWS: usize = 8;

/// The encoder's weights for this path.
pub struct QueryPath {
    simd: V4,
    /// The word-piece embeddings, shared with the f32 encoder (nothing is copied).
    word_embeddings: Tensor,
    /// (positions, hidden), with token type 0's embedding already added.
    positions: Vec<f32>,
    embeddings_norm: Norm,
    layers: Vec<Layer>,
    hidden: usize,
    heads: usize,
}

/// What [`QueryPath::new`] takes for one layer: the f32 encoder's tensors.
pub struct LayerWeights<'a> {
    /// Each dense layer's weight transposed, (in, out), and its bias; the query part of
    /// `qkv` already scaled.
    pub qkv: (&'a Tensor, &'a Tensor),
    pub attention_out: (&'a Tensor, &'a Tensor),
    pub attention_norm: &'a LayerNorm,
    pub intermediate: (&'a Tensor, &'a Tensor),
    pub output: (&'a Tensor, &'a Tensor),
    pub output_norm: &'a LayerNorm,
}

struct Layer {
    qkv: Dense,
    attention_out: Dense,
    attention_norm: Norm,
    intermediate: Dense,
    output: Dense,
    output_norm: Norm,
}

/// A dense layer's weights in f16 (as bits), panel by panel: panel `p` holds, for each input
/// `k` in order, the weights of outputs `p × PANEL ..` for that input.
struct Dense {
    panels: Vec<[u16; PANEL]>,
    bias: Vec<f32>,
    inputs: usize,
    outputs: usize,
}

struct Norm {
    weight: Vec<f32>,
    bias: Vec<f32>,
    eps: f32,
}

impl QueryPath {
    /// The path for these weights, or `None` where the CPU has no AVX-512 or a shape does not
    /// fit it (the hidden size and every layer's outputs must be multiples of [`PANEL`]).
    pub fn new(
        word_embeddings: &Tensor,
        position_embeddings: &Tensor,
        token_type: &Tensor,
        embeddings_norm: &LayerNorm,
        layers: &[LayerWeights],
        heads: usize,
        eps: f64,
    ) -> Result<Option<QueryPath>> {
        let Some(simd) = V4::try_new() else {
            return Ok(None);
        };
        let (_, hidden) = position_embeddings.dims2()?;
        let fits = |(w, _): (&Tensor, &Tensor)| -> Result<bool> {
            let (_, outputs) = w.dims2()?;
            Ok(outputs.is_multiple_of(PANEL))
        };
        for l in layers {
            for dense in [l.qkv, l.attention_out, l.intermediate, l.output] {
                if !fits(dense)? {
                    return Ok(None);
                }
            }
        }
        if !hidden.is_multiple_of(heads) {
            return Ok(None);
        }
        let token_type = token_type.to_vec1::<f32>()?;
        let mut positions = position_embeddings.flatten_all()?.to_vec1::<f32>()?;
        for row in positions.chunks_exact_mut(hidden) {
            row.iter_mut().zip(&token_type).for_each(|(p, t)| *p += t);
        }
        let layers = layers
            .iter()
            .map(|l| {
                Ok(Layer {
                    qkv: Dense::new(l.qkv)?,
                    attention_out: Dense::new(l.attention_out)?,
                    attention_norm: Norm::new(l.attention_norm, eps)?,
                    intermediate: Dense::new(l.intermediate)?,
                    output: Dense::new(l.output)?,
                    output_norm: Norm::new(l.output_norm, eps)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(QueryPath {
            simd,
            word_embeddings: word_embeddings.clone(),
            positions,
            embeddings_norm: Norm::new(embeddings_norm, eps)?,
            layers,
            hidden,
            heads,
        }))
    }

    /// As the f32 encoder's `forward`: `ids` are the texts' word pieces one after another
    /// (at most [`MAX_WORD_PIECES`] of them, `lengths` saying how many each text has), and the
    /// result each word piece's last hidden state, (word pieces, hidden).
    pub fn forward(&self, ids: &[u32], lengths: &[usize]) -> Result<Tensor> {
        let hidden = self.hidden;
        let total = ids.len();
        let device = self.word_embeddings.device();
        let words = self
            .word_embeddings
            .index_select(&Tensor::from_slice(ids, total, device)?, 0)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        let mut x = words;
        let mut row = 0;
        for &n in lengths {
            for position in 0..n {
                let at = &self.positions[position * hidden..][..hidden];
                let dst = &mut x[(row + position) * hidden..][..hidden];
                dst.iter_mut().zip(at).for_each(|(x, p)| *x += p);
            }
            row += n;
        }
        self.embeddings_norm.apply(&mut x);
        let simd = self.simd;
        let x = simd.vectorize(
            #[inline(always)]
            || {
                let mut scratch = Scratch::default();
                for layer in &self.layers {
                    layer.forward(simd, &mut x, lengths, self.heads, &mut scratch);
                }
                x
            },
        );
        Tensor::from_vec(x, (total, hidden), device)
    }
}

/// Buffers reused from layer to layer.
#[derive(Default)]
struct Scratch {
    transposed: Vec<f32>,
    qkv: Vec<f32>,
    context: Vec<f32>,
    attended: Vec<f32>,
    inner: Vec<f32>,
    scores: Vec<f32>,
}

impl Layer {
    #[inline(always)]
    fn forward(
        &self,
        simd: V4,
        x: &mut Vec<f32>,
        lengths: &[usize],
        heads: usize,
        s: &mut Scratch,
    ) {
        let hidden = self.attention_out.outputs;
        let total = x.len() / hidden;
        self.qkv.forward(simd, x, &mut s.qkv, &mut s.transposed);
        attention(
            &s.qkv,
            lengths,
            heads,
            hidden,
            &mut s.context,
            &mut s.scores,
        );
        self.attention_out
            .forward(simd, &s.context, &mut s.attended, &mut s.transposed);
        s.attended
            .iter_mut()
            .zip(x.iter())
            .for_each(|(a, x)| *a += x);
        self.attention_norm.apply(&mut s.attended);
        self.intermediate
            .forward(simd, &s.attended, &mut s.inner, &mut s.transposed);
        gelu(&mut s.inner);
        self.output.forward(simd, &s.inner, x, &mut s.transposed);
        x.iter_mut().zip(&s.attended).for_each(|(y, a)| *y += a);
        self.output_norm.apply(x);
        debug_assert_eq!(x.len(), total * hidden);
    }
}

/// Self-attention over `qkv` ((word pieces, 3 × hidden): each row its query, already scaled,
/// key and value, head by head), text by text; writes each word piece's context, (word pieces,
/// hidden), to `context`.
#[inline(always)]
fn attention(
    qkv: &[f32],
    lengths: &[usize],
    heads: usize,
    hidden: usize,
    context: &mut Vec<f32>,
    scores: &mut Vec<f32>,
) {
    let size = hidden / heads;
    let total = qkv.len() / (3 * hidden);
    context.clear();
    context.resize(total * hidden, 0.0);
    let mut start = 0;
    for &n in lengths {
        let row = |i: usize| &qkv[(start + i) * 3 * hidden..][..3 * hidden];
        scores.clear();
        scores.resize(n, 0.0);
        for h in 0..heads {
            let part = |i: usize, which: usize| &row(i)[which * hidden + h * size..][..size];
            for i in 0..n {
                let q = part(i, 0);
                for (j, score) in scores.iter_mut().enumerate() {
                    *score = dot(q, part(j, 1));
                }
                let top = max(scores);
                scores.iter_mut().for_each(|s| *s = exp(*s - top));
                let inverse = 1.0 / sum(scores);
                let out = &mut context[(start + i) * hidden + h * size..][..size];
                for (j, &weight) in scores.iter().enumerate() {
                    let weight = weight * inverse;
                    out.iter_mut()
                        .zip(part(j, 2))
                        .for_each(|(o, v)| *o += weight * v);
                }
            }
        }
        start += n;
    }
}

/// The dot product of two equally long slices, in eight lanes so that it vectorises.
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (a8, a_tail) = a.as_chunks::<8>();
    let (b8, b_tail) = b.as_chunks::<8>();
    for (a, b) in a8.iter().zip(b8) {
        for ((lane, a), b) in lanes.iter_mut().zip(a).zip(b) {
            *lane += a * b;
        }
    }
    let tail: f32 = a_tail.iter().zip(b_tail).map(|(a, b)| a * b).sum();
    lanes.iter().sum::<f32>() + tail
}

impl Dense {
    /// From the transposed f32 weight, (in, out), and the bias.
    fn new((weight_t, bias): (&Tensor, &Tensor)) -> Result<Dense> {
        let (inputs, outputs) = weight_t.dims2()?;
        let weight_t = weight_t.flatten_all()?.to_vec1::<f32>()?;
        let mut panels = vec![[0u16; PANEL]; outputs / PANEL * inputs];
        for (p, panel) in panels.chunks_exact_mut(inputs).enumerate() {
            for (k, lanes) in panel.iter_mut().enumerate() {
                let from = &weight_t[k * outputs + p * PANEL..][..PANEL];
                for (value, &w) in lanes.iter_mut().zip(from) {
                    *value = half::f16::from_f32(w).to_bits();
                }
            }
        }
        Ok(Dense {
            panels,
            bias: bias.to_vec1::<f32>()?,
            inputs,
            outputs,
        })
    }

    /// `y = x Wᵀ + b` for `x` (rows, inputs) row-major; `y` becomes (rows, outputs).
    /// `transposed` is scratch space.
    #[inline(always)]
    fn forward(&self, simd: V4, x: &[f32], y: &mut Vec<f32>, transposed: &mut Vec<f32>) {
        let rows = x.len() / self.inputs;
        y.clear();
        y.resize(rows * self.outputs, 0.0);
        // Each block of up to ROWS rows transposed, (inputs, rows in the block), so that the
        // kernel reads one input's values for all the block's rows side by side.
        transposed.clear();
        transposed.resize(x.len(), 0.0);
        let mut at = 0;
        for first in (0..rows).step_by(ROWS) {
            let count = ROWS.min(rows - first);
            let block = &mut transposed[at..at + count * self.inputs];
            for r in 0..count {
                let row = &x[(first + r) * self.inputs..][..self.inputs];
                for (k, &value) in row.iter().enumerate() {
                    block[k * count + r] = value;
                }
            }
            at += count * self.inputs;
        }
        // Panel by panel (each read from memory once), every block of rows.
        for (p, panel) in self.panels.chunks_exact(self.inputs).enumerate() {
            let bias = &self.bias[p * PANEL..][..PANEL];
            let mut at = 0;
            for first in (0..rows).step_by(ROWS) {
                let count = ROWS.min(rows - first);
                let block = &transposed[at..at + count * self.inputs];
                let y = &mut y[first * self.outputs + p * PANEL..];
                match count {
                    8 => kernel::<8>(simd, panel, block, bias, y, self.outputs),
                    7 => kernel::<7>(simd, panel, block, bias, y, self.outputs),
                    6 => kernel::<6>(simd, panel, block, bias, y, self.outputs),
                    5 => kernel::<5>(simd, panel, block, bias, y, self.outputs),
                    4 => kernel::<4>(simd, panel, block, bias, y, self.outputs),
                    3 => kernel::<3>(simd, panel, block, bias, y, self.outputs),
                    2 => kernel::<2>(simd, panel, block, bias, y, self.outputs),
                    _ => kernel::<1>(simd, panel, block, bias, y, self.outputs),
                }
                at += count * self.inputs;
            }
        }
    }
}

/// One panel times `R` rows: `block` is (inputs, R), the panel (inputs, PANEL) in f16; writes
/// the R × PANEL results plus `bias` into `y`, whose rows are `stride` apart.
#[inline(always)]
fn kernel<const R: usize>(
    simd: V4,
    panel: &[[u16; PANEL]],
    block: &[f32],
    bias: &[f32],
    y: &mut [f32],
    stride: usize,
) {
    let zero = simd.splat_f32s(0.0);
    let mut low = [zero; R];
    let mut high = [zero; R];
    let (inputs, _) = block.as_chunks::<R>();
    for (weights, x) in panel.iter().zip(inputs) {
        let [w_low, w_high]: &[[u16; 16]; 2] = pulp::bytemuck::cast_ref(weights);
        let w_low = to_f32(simd, *w_low);
        let w_high = to_f32(simd, *w_high);
        for r in 0..R {
            let x = simd.splat_f32s(x[r]);
            low[r] = simd.mul_add_f32s(x, w_low, low[r]);
            high[r] = simd.mul_add_f32s(x, w_high, high[r]);
        }
    }
    let (bias_low, bias_high) = bias.split_at(PANEL / 2);
    for r in 0..R {
        let out = &mut y[r * stride..][..PANEL];
        let (out_low, out_high) = out.split_at_mut(PANEL / 2);
        store(low[r], bias_low, out_low);
        store(high[r], bias_high, out_high);
    }
}

/// Sixteen f16 values (as bits) as f32.
#[inline(always)]
fn to_f32(simd: V4, bits: [u16; 16]) -> f32x16 {
    let bits: __m256i = pulp::bytemuck::cast(bits);
    pulp::bytemuck::cast(simd.avx512f._mm512_cvtph_ps(bits))
}

#[inline(always)]
fn store(values: f32x16, bias: &[f32], out: &mut [f32]) {
    let values: [f32; 16] = pulp::bytemuck::cast(values);
    for ((o, v), b) in out.iter_mut().zip(values).zip(bias) {
        *o = v + b;
    }
}

impl Norm {
    fn new(norm: &LayerNorm, eps: f64) -> Result<Norm> {
        let Some(bias) = norm.bias() else {
            candle_core::bail!("a layer norm without a bias");
        };
        Ok(Norm {
            weight: norm.weight().to_vec1::<f32>()?,
            bias: bias.to_vec1::<f32>()?,
            eps: eps as f32,
        })
    }

    /// Normalises each row of `x` in place, as candle's layer norm: mean and variance in f32.
    fn apply(&self, x: &mut [f32]) {
        let width = self.weight.len();
        for row in x.chunks_exact_mut(width) {
            let mean = sum(row) / width as f32;
            row.iter_mut().for_each(|v| *v -= mean);
            let variance = row.iter().map(|v| v * v).sum::<f32>() / width as f32;
            let scale = 1.0 / (variance + self.eps).sqrt();
            for ((v, w), b) in row.iter_mut().zip(&self.weight).zip(&self.bias) {
                *v = *v * scale * w + b;
            }
        }
    }
}
