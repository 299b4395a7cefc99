//! The element-wise math of the encoder, shared by its f32 path (`bert`) and its query path
//! (`query`): GELU, and e^x, erf, max and sum written so that their loops vectorise.

/// GELU in its exact form, x·(1 + erf(x/√2))/2, in place.
pub(crate) fn gelu(values: &mut [f32]) {
    for x in values {
        *x = 0.5 * *x * (1.0 + erf(*x * std::f32::consts::FRAC_1_SQRT_2));
    }
}

/// The largest of `values` (-∞ for none), in eight lanes so that it vectorises.
pub(crate) fn max(values: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; 8];
    let mut chunks = values.chunks_exact(8);
    for chunk in &mut chunks {
        for (lane, &x) in lanes.iter_mut().zip(chunk) {
            *lane = lane.max(x);
        }
    }
    let tail = chunks.remainder().iter().copied();
    lanes
        .into_iter()
        .chain(tail)
        .fold(f32::NEG_INFINITY, f32::max)
}

/// The sum of `values`, in eight lanes so that it vectorises.
pub(crate) fn sum(values: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let mut chunks = values.chunks_exact(8);
    for chunk in &mut chunks {
        for (lane, &x) in lanes.iter_mut().zip(chunk) {
            *lane += x;
        }
    }
    lanes.iter().sum::<f32>() + chunks.remainder().iter().sum::<f32>()
}

/// e^x for f32: x = n·ln 2 + r with |r| ≤ ln 2 / 2, e^r by its Taylor polynomial to r⁷ (relative
/// error under 2e-7 there), times 2^n put straight into the exponent bits. No branches and no
/// calls, so the loops that call it vectorise. Inputs under -87 (e^x below f32's normal range: a
/// softmax weight that small is zero for our purposes) give about 1.6e-38.
pub(crate) fn exp(x: f32) -> f32 {
    // 1.5 × 2^23: adding it rounds to an integer held in the low mantissa bits.
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.0, 88.0);
    let shifted = x * std::f32::consts::LOG2_E + ROUND;
    let n = shifted - ROUND;
    let r = x - n * 0.693_145_75 - n * 1.428_606_8e-6;
    let mut p = 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    let n_bits = shifted.to_bits().wrapping_sub(ROUND.to_bits());
    f32::from_bits(p.to_bits().wrapping_add(n_bits << 23))
}

/// erf for f32 as a ratio of two polynomials in x² (Eigen's and XLA's `erf` for float, within
/// a few units in the last place of the true value on [-4, 4], ±1 beyond). No branches and no
/// calls, so the compiler vectorises the loop in [`gelu`].
fn erf(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let mut p = x2 * -2.726_142_3e-10 + 2.770_681_4e-8;
    p = x2 * p + -2.101_024e-6;
    p = x2 * p + -5.692_506_4e-5;
    p = x2 * p + -7.349_906e-4;
    p = x2 * p + -2.954_6e-3;
    p = x2 * p + -1.609_603_3e-2;
    let mut q = x2 * -1.456_607_2e-5 + -2.133_740_5e-4;
    q = x2 * q + -1.682_827e-3;
    q = x2 * q + -7.373_329e-3;
    q = x2 * q + -1.426_473_9e-2;
    x * p / q
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fast_exp_agrees_with_libm_to_a_millionth_of_its_value() {
        let mut worst = 0f64;
        for i in -870_000..=880_000 {
            let x = i as f32 / 10_000.0;
            let exact = f64::from(x.exp());
            worst = worst.max((f64::from(exp(x)) - exact).abs() / exact);
        }
        assert!(worst < 1e-6, "worst relative difference {worst}");
    }

    #[test]
    fn the_fast_erf_agrees_with_libm_to_a_millionth() {
        let mut worst = 0f64;
        for i in -80_000..=80_000 {
            let x = i as f32 / 10_000.0;
            let exact = f64::from(candle_core::cpu::erf::erf_f32(x));
            worst = worst.max((f64::from(erf(x)) - exact).abs());
        }
        assert!(worst < 1e-6, "worst difference {worst}");
    }
}
