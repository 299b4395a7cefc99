//! Runs a fixed number of calls at a fixed concurrency and summarises their latencies.
//!
//! Workers share one task (no spawning), which on the bench's single-threaded runtime keeps
//! the client side cheap and identical for every path being compared.

use std::cell::{Cell, RefCell};
use std::time::{Duration, Instant};

use anyhow::bail;
use futures_util::future::join_all;

/// One way of making call `i` (arguments rotate by index). Returns how long the call took,
/// timed by the driver itself so checking the answer is not counted, and the rows it returned.
pub trait Driver {
    async fn call(&self, i: usize) -> anyhow::Result<(Duration, u64)>;
}

/// A summary of one measured run.
#[derive(Debug, Clone, Copy)]
pub struct Stats {
    pub n: usize,
    pub concurrency: usize,
    pub p50: Duration,
    pub p99: Duration,
    pub mean: Duration,
    pub rps: f64,
    pub rows_per_call: f64,
}

impl Stats {
    pub fn to_json(self) -> serde_json::Value {
        serde_json::json!({
            "n": self.n,
            "concurrency": self.concurrency,
            "p50_us": micros(self.p50),
            "p99_us": micros(self.p99),
            "mean_us": micros(self.mean),
            "rps": (self.rps * 10.0).round() / 10.0,
            "rows_per_call": self.rows_per_call,
        })
    }
}

pub fn micros(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e7).round() / 10.0
}

/// Makes `n` calls, `concurrency` at a time, starting at argument index `offset`. Any failed
/// call fails the run (after the rest finish) with the count and the first error.
pub async fn run<D: Driver>(driver: &D, n: usize, concurrency: usize, offset: usize) -> anyhow::Result<Stats> {
    let next = Cell::new(0usize);
    let latencies = RefCell::new(Vec::with_capacity(n));
    let rows = Cell::new(0u64);
    let errors = Cell::new(0usize);
    let first_error = RefCell::new(None);
    let worker = || async {
        loop {
            let i = next.get();
            if i >= n {
                break;
            }
            next.set(i + 1);
            match driver.call(offset + i).await {
                Ok((elapsed, r)) => {
                    latencies.borrow_mut().push(elapsed);
                    rows.set(rows.get() + r);
                }
                Err(e) => {
                    errors.set(errors.get() + 1);
                    first_error.borrow_mut().get_or_insert(e);
                }
            }
        }
    };
    let started = Instant::now();
    join_all((0..concurrency.max(1)).map(|_| worker())).await;
    let wall = started.elapsed();
    if let Some(e) = first_error.into_inner() {
        bail!("{} of {n} calls failed; first: {e:#}", errors.get());
    }
    let mut lat = latencies.into_inner();
    lat.sort_unstable();
    let total: Duration = lat.iter().sum();
    Ok(Stats {
        n,
        concurrency,
        p50: percentile(&lat, 50.0),
        p99: percentile(&lat, 99.0),
        mean: total / u32::try_from(n.max(1)).unwrap_or(u32::MAX),
        rps: n as f64 / wall.as_secs_f64(),
        rows_per_call: rows.get() as f64 / n.max(1) as f64,
    })
}

/// Nearest-rank percentile of sorted samples.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&v, 50.0), Duration::from_millis(50));
        assert_eq!(percentile(&v, 99.0), Duration::from_millis(99));
        assert_eq!(percentile(&v[..1], 99.0), Duration::from_millis(1));
    }
}
