//! Request popularity: Zipf samplers and the SPECweb99 class mix.
//!
//! SPECweb99 static load (as used by SEDA SOSP'01 5.1): a directory is chosen by Zipf
//! (alpha = 1) over directories, a class by the fixed mix 35/50/14/1 %, and a file
//! within the class by Zipf (alpha = 1) over its nine files. SPECweb spreads a class's
//! popularity so that its mean size stays near the class midpoint (mean response about
//! 14 KB); we get the same by giving Zipf rank r to file `CLASS_RANK_ORDER[r]`,
//! middle sizes first.

/// Probability of each of the four classes, in percent (SPECweb96/99).
pub const CLASS_MIX_PERCENT: [u32; 4] = [35, 50, 14, 1];

/// Files per class in a SPECweb99 directory.
pub const FILES_PER_CLASS: usize = 9;

/// Zipf rank (0 = most popular) to file index within a class: middle sizes first.
pub const CLASS_RANK_ORDER: [usize; FILES_PER_CLASS] = [4, 3, 5, 2, 6, 1, 7, 0, 8];

/// A Zipf sampler over `0..n`: P(k) proportional to 1 / (k + 1)^alpha.
///
/// Inverse-CDF by binary search over a precomputed table: O(log n) per sample.
#[derive(Debug, Clone)]
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    /// A sampler over `n` items with exponent `alpha` (> 0). `None` if `n == 0`.
    pub fn new(n: usize, alpha: f64) -> Option<Self> {
        if n == 0 || alpha.is_nan() || alpha <= 0.0 {
            return None;
        }
        let mut cdf = Vec::with_capacity(n);
        let mut acc = 0.0;
        for k in 0..n {
            acc += 1.0 / ((k + 1) as f64).powf(alpha);
            cdf.push(acc);
        }
        for c in &mut cdf {
            *c /= acc;
        }
        Some(Zipf { cdf })
    }

    /// Number of items.
    pub fn len(&self) -> usize {
        self.cdf.len()
    }

    /// Always false: a sampler has at least one item.
    pub fn is_empty(&self) -> bool {
        self.cdf.is_empty()
    }

    /// Probability of item `k`.
    pub fn probability(&self, k: usize) -> f64 {
        match k {
            0 => self.cdf[0],
            k if k < self.cdf.len() => self.cdf[k] - self.cdf[k - 1],
            _ => 0.0,
        }
    }

    /// Draw an item with a uniform number `u` in [0, 1).
    pub fn sample_with(&self, u: f64) -> usize {
        let i = self.cdf.partition_point(|&c| c <= u);
        i.min(self.cdf.len() - 1)
    }

    /// Draw an item.
    pub fn sample(&self, rng: &mut fastrand::Rng) -> usize {
        self.sample_with(rng.f64())
    }
}

/// Draw a class (0..4) from the SPECweb99 mix.
pub fn sample_class(rng: &mut fastrand::Rng) -> usize {
    let mut x = rng.u32(0..100);
    for (class, &p) in CLASS_MIX_PERCENT.iter().enumerate() {
        if x < p {
            return class;
        }
        x -= p;
    }
    CLASS_MIX_PERCENT.len() - 1
}

/// SPECweb99 popularity over a file set of `dirs` directories.
#[derive(Debug, Clone)]
pub struct SpecWebPopularity {
    dirs: Zipf,
    within_class: Zipf,
}

/// One pick: directory, class and file index within the class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilePick {
    /// Directory number (0 = most popular).
    pub dir: usize,
    /// Class 0..4.
    pub class: usize,
    /// File index 0..9 within the class (size = (index + 1) * class unit).
    pub file: usize,
}

impl SpecWebPopularity {
    /// Popularity over `dirs` directories; `None` if `dirs == 0`.
    pub fn new(dirs: usize) -> Option<Self> {
        Some(SpecWebPopularity {
            dirs: Zipf::new(dirs, 1.0)?,
            within_class: Zipf::new(FILES_PER_CLASS, 1.0)?,
        })
    }

    /// Draw a file.
    pub fn sample(&self, rng: &mut fastrand::Rng) -> FilePick {
        let dir = self.dirs.sample(rng);
        let class = sample_class(rng);
        let file = CLASS_RANK_ORDER[self.within_class.sample(rng)];
        FilePick { dir, class, file }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_probabilities_follow_one_over_k() {
        let z = Zipf::new(10, 1.0).unwrap();
        let h: f64 = (1..=10).map(|k| 1.0 / k as f64).sum();
        for k in 0..10 {
            assert!((z.probability(k) - 1.0 / ((k + 1) as f64 * h)).abs() < 1e-12);
        }
        assert_eq!(z.sample_with(0.0), 0);
        assert_eq!(z.sample_with(0.999_999_999), 9);
    }

    #[test]
    fn zipf_samples_match_probabilities_within_tolerance() {
        // 200k draws: the standard error of a frequency p is sqrt(p(1-p)/n) < 0.0012, so a
        // 0.005 absolute tolerance is > 4 sigma for every item.
        let z = Zipf::new(20, 1.0).unwrap();
        let mut rng = fastrand::Rng::with_seed(7);
        let n = 200_000;
        let mut counts = [0u32; 20];
        for _ in 0..n {
            counts[z.sample(&mut rng)] += 1;
        }
        for (k, &c) in counts.iter().enumerate() {
            let f = f64::from(c) / f64::from(n);
            assert!(
                (f - z.probability(k)).abs() < 0.005,
                "item {k}: {f} vs {}",
                z.probability(k)
            );
        }
    }

    #[test]
    fn class_mix_is_35_50_14_1_within_tolerance() {
        let mut rng = fastrand::Rng::with_seed(11);
        let n = 200_000;
        let mut counts = [0u32; 4];
        for _ in 0..n {
            counts[sample_class(&mut rng)] += 1;
        }
        for (class, &c) in counts.iter().enumerate() {
            let f = f64::from(c) / f64::from(n);
            let want = f64::from(CLASS_MIX_PERCENT[class]) / 100.0;
            assert!((f - want).abs() < 0.005, "class {class}: {f} vs {want}");
        }
    }

    #[test]
    fn within_class_mean_size_is_near_midpoint() {
        // Middle-first ranks keep the mean at about 5 units, as SPECweb intends (the
        // smallest-first order would give 9 / H(9) = 3.18 units).
        let z = Zipf::new(FILES_PER_CLASS, 1.0).unwrap();
        let mean: f64 = (0..FILES_PER_CLASS)
            .map(|r| z.probability(r) * (CLASS_RANK_ORDER[r] + 1) as f64)
            .sum();
        assert!((4.5..5.5).contains(&mean), "mean {mean}");
    }

    #[test]
    fn popularity_prefers_low_directories() {
        let p = SpecWebPopularity::new(50).unwrap();
        let mut rng = fastrand::Rng::with_seed(3);
        let mut first = 0;
        for _ in 0..50_000 {
            let pick = p.sample(&mut rng);
            assert!(pick.dir < 50 && pick.class < 4 && pick.file < 9);
            if pick.dir == 0 {
                first += 1;
            }
        }
        // P(dir 0) = 1 / H(50) = 0.2222.
        let f = f64::from(first) / 50_000.0;
        assert!((f - 0.2222).abs() < 0.01, "{f}");
    }

    #[test]
    fn empty_zipf_is_refused() {
        assert!(Zipf::new(0, 1.0).is_none());
        assert!(Zipf::new(3, 0.0).is_none());
        assert!(SpecWebPopularity::new(0).is_none());
    }
}
