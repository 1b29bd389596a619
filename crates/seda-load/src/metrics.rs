//! Metrics: response-time histograms, CDFs and Jain's fairness index.
//!
//! Response times are recorded in microseconds in an HDR histogram (3 significant
//! digits, 1 us .. 1 hour); reports give milliseconds.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Largest recordable response time, in microseconds (one hour); larger values saturate.
pub const MAX_RT_US: u64 = 3_600_000_000;

/// A new response-time histogram with `sigfig` significant digits (1..=5).
pub fn rt_histogram(sigfig: u8) -> Histogram<u64> {
    // 1..MAX_RT_US with 1..=5 digits is always a valid configuration.
    Histogram::new_with_bounds(1, MAX_RT_US, sigfig.clamp(1, 5)).expect("valid histogram bounds")
}

/// Record `us` (clamped into the histogram's range).
pub fn record_us(h: &mut Histogram<u64>, us: u64) {
    h.saturating_record(us.clamp(1, MAX_RT_US));
}

/// Value at quantile `q` in milliseconds; 0 for an empty histogram.
pub fn quantile_ms(h: &Histogram<u64>, q: f64) -> f64 {
    if h.is_empty() {
        return 0.0;
    }
    h.value_at_quantile(q) as f64 / 1000.0
}

/// Jain's fairness index `(sum x)^2 / (n * sum x^2)` (Jain, Chiu, Hawe 1984; SEDA 5.1.3):
/// 1 when every user got the same service, k/n when k users shared it equally and the
/// rest got nothing. `None` when there are no users or nobody got anything.
pub fn jain_index(x: &[u64]) -> Option<f64> {
    if x.is_empty() {
        return None;
    }
    let sum: f64 = x.iter().map(|&v| v as f64).sum();
    let sq: f64 = x.iter().map(|&v| (v as f64) * (v as f64)).sum();
    if sq == 0.0 {
        return None;
    }
    Some(sum * sum / (x.len() as f64 * sq))
}

/// One point of a cumulative distribution: `p` = P(response time <= `rt_ms`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[non_exhaustive]
pub struct CdfPoint {
    /// Response time, ms.
    pub rt_ms: f64,
    /// Fraction of requests at or below `rt_ms`, 0..=1.
    pub p: f64,
}

/// The response-time CDF of a histogram as at most `points` points, spaced evenly on a
/// log scale of response time between the smallest and largest value (the way SEDA
/// Fig. 12b plots it). Empty histogram: no points. The last point is always p = 1.
pub fn cdf(h: &Histogram<u64>, points: usize) -> Vec<CdfPoint> {
    if h.is_empty() || points == 0 {
        return Vec::new();
    }
    let lo = h.min().max(1) as f64;
    let hi = h.max().max(1) as f64;
    let total = h.len() as f64;
    let n = points.max(2);
    let mut out: Vec<CdfPoint> = Vec::with_capacity(n);
    for i in 0..n {
        let x = if hi <= lo {
            hi
        } else {
            lo * (hi / lo).powf(i as f64 / (n - 1) as f64)
        };
        let at_or_below = h.count_between(0, x as u64) as f64;
        let p = if i == n - 1 {
            1.0
        } else {
            (at_or_below / total).min(1.0)
        };
        if let Some(last) = out.last() {
            if last.p == p && i != n - 1 {
                continue;
            }
        }
        out.push(CdfPoint {
            rt_ms: x / 1000.0,
            p,
        });
    }
    out
}

/// P(response time <= `rt_ms`) read off CDF points (step interpolation: the last point
/// at or below `rt_ms`); 0 below the first point.
pub fn cdf_at(points: &[CdfPoint], rt_ms: f64) -> f64 {
    points
        .iter()
        .take_while(|c| c.rt_ms <= rt_ms)
        .last()
        .map_or(0.0, |c| c.p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_is_one_for_equal_service_and_k_over_n_for_starvation() {
        assert_eq!(jain_index(&[5, 5, 5, 5]), Some(1.0));
        let j = jain_index(&[10, 10, 0, 0]).unwrap();
        assert!((j - 0.5).abs() < 1e-12);
        let j = jain_index(&[7, 0, 0, 0, 0, 0, 0, 0]).unwrap();
        assert!((j - 0.125).abs() < 1e-12);
        // (1+2+3)^2 / (3 * 14) = 36/42.
        assert!((jain_index(&[1, 2, 3]).unwrap() - 36.0 / 42.0).abs() < 1e-12);
        assert_eq!(jain_index(&[]), None);
        assert_eq!(jain_index(&[0, 0]), None);
    }

    #[test]
    fn cdf_of_uniform_samples_is_linear() {
        // 1..=1000 ms uniformly: P(rt <= x) = x / 1000 (within HDR's 0.1 % resolution).
        let mut h = rt_histogram(3);
        for ms in 1..=1000u64 {
            record_us(&mut h, ms * 1000);
        }
        let pts = cdf(&h, 200);
        assert_eq!(pts.last().unwrap().p, 1.0);
        assert!(
            pts.windows(2)
                .all(|w| w[0].rt_ms <= w[1].rt_ms && w[0].p <= w[1].p)
        );
        for x in [10.0, 100.0, 250.0, 500.0, 900.0] {
            let p = cdf_at(&pts, x);
            // Log spacing of 200 points over 3 decades: neighbours differ by 3.5 %.
            assert!(
                (p - x / 1000.0).abs() <= 0.04 * x / 1000.0 + 0.002,
                "x={x}: p={p}"
            );
        }
        assert_eq!(cdf_at(&pts, 0.5), 0.0);
        assert_eq!(cdf_at(&pts, 5000.0), 1.0);
    }

    #[test]
    fn cdf_of_two_modes_has_a_step() {
        let mut h = rt_histogram(3);
        for _ in 0..900 {
            record_us(&mut h, 1_000);
        }
        for _ in 0..100 {
            record_us(&mut h, 10_000_000);
        }
        let pts = cdf(&h, 50);
        assert!((cdf_at(&pts, 2.0) - 0.9).abs() < 1e-9);
        assert!((cdf_at(&pts, 9_000.0) - 0.9).abs() < 1e-9);
        assert_eq!(cdf_at(&pts, 10_010.0), 1.0);
        assert!(cdf(&rt_histogram(3), 10).is_empty());
    }

    #[test]
    fn quantiles_in_ms() {
        let mut h = rt_histogram(3);
        for ms in 1..=100u64 {
            record_us(&mut h, ms * 1000);
        }
        assert!((quantile_ms(&h, 0.5) - 50.0).abs() < 0.1);
        assert!((quantile_ms(&h, 0.9) - 90.0).abs() < 0.1);
        assert_eq!(quantile_ms(&rt_histogram(2), 0.5), 0.0);
    }
}
