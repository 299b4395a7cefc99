//! Runs a fixed number of calls at a fixed concurrency and summarises their latencies.
//!
//! Workers share one task (no spawning), which on the bench's single-threaded runtime keeps
//! the client side cheap and identical for every path being compared.

use std::cell::{Cell, RefCell};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures_util::future::join_all;
use serde_json::Value;

/// POSTs `body` to `url`, timed from sending to the last byte of the answer, which must be a
/// 2xx with a JSON body; anything else fails the run.
pub async fn post_json(
    http: &reqwest::Client,
    url: &str,
    body: String,
) -> anyhow::Result<(Duration, Value)> {
    post_json_as(http, url, None, body).await
}

/// [`post_json`] with this request's own `Authorization` instead of the client's default.
pub async fn post_json_as(
    http: &reqwest::Client,
    url: &str,
    authorization: Option<&reqwest::header::HeaderValue>,
    body: String,
) -> anyhow::Result<(Duration, Value)> {
    let mut request = http.post(url).body(body);
    if let Some(authorization) = authorization {
        request = request.header(reqwest::header::AUTHORIZATION, authorization);
    }
    let started = Instant::now();
    let response = request.send().await?;
    let status = response.status();
    let bytes = response.bytes().await?;
    let elapsed = started.elapsed();
    if !status.is_success() {
        bail!("HTTP {status}: {}", String::from_utf8_lossy(&bytes));
    }
    let value = serde_json::from_slice(&bytes)
        .with_context(|| format!("response is not JSON: {}", String::from_utf8_lossy(&bytes)))?;
    Ok((elapsed, value))
}

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
pub async fn run<D: Driver>(
    driver: &D,
    n: usize,
    concurrency: usize,
    offset: usize,
) -> anyhow::Result<Stats> {
    let next = Cell::new(0usize);
    let tally = RefCell::new(Tally::new(n));
    let worker = || async {
        loop {
            let i = next.get();
            if i >= n {
                break;
            }
            next.set(i + 1);
            let outcome = driver.call(offset + i).await;
            tally.borrow_mut().record(outcome);
        }
    };
    let started = Instant::now();
    join_all((0..concurrency.max(1)).map(|_| worker())).await;
    let wall = started.elapsed();
    tally.into_inner().stats(concurrency, Some(wall))
}

/// One call at a time over several drivers: call `i` goes to every driver with the same
/// arguments, the order rotating, so drift (caches, other load) hits all of them alike and
/// none always runs on the caches another has just warmed. Throughput is 1 / mean latency.
/// Also returns each driver's latencies in call order, for paired comparisons.
pub async fn interleaved<D: Driver>(
    drivers: &[D],
    n: usize,
) -> anyhow::Result<Vec<(Stats, Vec<Duration>)>> {
    let mut tallies: Vec<Tally> = drivers.iter().map(|_| Tally::new(n)).collect();
    for i in 0..n {
        for k in 0..drivers.len() {
            let d = (i + k) % drivers.len();
            let outcome = drivers[d].call(i).await;
            tallies[d].record(outcome);
        }
    }
    tallies
        .into_iter()
        .map(|t| {
            let in_order = t.latencies.clone();
            Ok((t.stats(1, None)?, in_order))
        })
        .collect()
}

/// Latencies and failures of one run.
struct Tally {
    latencies: Vec<Duration>,
    rows: u64,
    errors: usize,
    first_error: Option<anyhow::Error>,
}

impl Tally {
    fn new(n: usize) -> Self {
        Self {
            latencies: Vec::with_capacity(n),
            rows: 0,
            errors: 0,
            first_error: None,
        }
    }

    fn record(&mut self, outcome: anyhow::Result<(Duration, u64)>) {
        match outcome {
            Ok((elapsed, rows)) => {
                self.latencies.push(elapsed);
                self.rows += rows;
            }
            Err(e) => {
                self.errors += 1;
                self.first_error.get_or_insert(e);
            }
        }
    }

    /// `wall`: the run's elapsed time, for throughput; `None` means calls ran back to back.
    fn stats(mut self, concurrency: usize, wall: Option<Duration>) -> anyhow::Result<Stats> {
        let n = self.latencies.len() + self.errors;
        if let Some(e) = self.first_error {
            bail!("{} of {n} calls failed; first: {e:#}", self.errors);
        }
        self.latencies.sort_unstable();
        let total: Duration = self.latencies.iter().sum();
        let wall = wall.unwrap_or(total);
        Ok(Stats {
            n,
            concurrency,
            p50: percentile(&self.latencies, 50.0),
            p99: percentile(&self.latencies, 99.0),
            mean: total / u32::try_from(n.max(1)).unwrap_or(u32::MAX),
            rps: n as f64 / wall.as_secs_f64().max(1e-9),
            rows_per_call: self.rows as f64 / n.max(1) as f64,
        })
    }
}

/// The median of `a[i] - b[i]` in microseconds: the typical extra cost of `a` on the same call,
/// insensitive to drift that moves both alike.
pub fn paired_median_us(a: &[Duration], b: &[Duration]) -> f64 {
    let mut d: Vec<f64> = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x.as_secs_f64() - y.as_secs_f64()) * 1e6)
        .collect();
    if d.is_empty() {
        return 0.0;
    }
    d.sort_unstable_by(f64::total_cmp);
    d[(d.len() - 1) / 2]
}

/// Nearest-rank percentile of sorted samples.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// A duration in milliseconds, for the reports.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
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

    #[test]
    fn paired_median_is_the_median_of_differences() {
        let ms = |v: &[u64]| {
            v.iter()
                .map(|&m| Duration::from_millis(m))
                .collect::<Vec<_>>()
        };
        let d = paired_median_us(&ms(&[10, 50, 12]), &ms(&[9, 48, 12]));
        assert!((d - 1000.0).abs() < 1e-6, "{d}");
    }
}
