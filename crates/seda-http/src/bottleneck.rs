//! The bottleneck handler: a dynamic page that costs a known amount of CPU (SEDA
//! 5.1.4, Fig. 13; the "quality knob" service of USITS'03 4.5, Figs. 12-13).
//!
//! Each request opens a data file (64 KiB written at start-up into a temporary
//! directory), reads the first `q * 64 KiB` of it and runs `passes` Fletcher-style
//! checksum passes over what it read, then answers `200` with an 8 KB `text/html` page
//! that names the checksum. `passes` is calibrated at start-up so that a full-quality
//! request costs about the requested service time on this machine (the best of three
//! timed runs). The work done is proportional to the quality `q` in `[0, 1]`.
//!
//! - `?q=F` asks for quality `F` (`0.0..=1.0`; anything else is a `400`).
//! - Every response carries `X-Seda-Quality: <q, two decimals>`.
//!
//! # Automatic degradation (USITS'03 3.4)
//! With [`Bottleneck::degrade`] the stage runs a [`QualityController`] on the hooks
//! SEDA gives it: once per sampling `period` (default 1 s, the stats window), the
//! handler reads its stage's p90 estimate and steps the controller:
//! `quality *= 0.8` while p90 > target; `quality += 0.02` while p90 < 0.8 * target;
//! quality in `[0.05, 1]`. In the paper's order admission control starts **off**; the
//! controller switches it **on** after 3 samples at the lowest quality still over
//! target, and off again once quality is back at full (unless its config says never:
//! degradation alone). With `with_admission` (the default policy's) admission control
//! stays on and a sample in which the stage refused counts as over target. A request's
//! quality is `min(?q, automatic quality)`. The overload action `degrade` answers a
//! refused request with the quality-0 page at once.

use std::fs::File;
use std::io::{Read, Write as _};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use seda::control::{QualityConfig, QualityController};

use crate::handler::{Handler, HandlerContext, HandlerRegistration, Request, Response};
use crate::proto::Status;

/// Size of the data file read by each request.
const DATA_BYTES: usize = 64 * 1024;
/// Size of every page the handler returns.
const PAGE_BYTES: usize = 8 * 1024;
/// Quality-controller sampling period by default (SEDA's stats window).
pub const DEFAULT_SAMPLE_PERIOD: Duration = Duration::from_secs(1);

/// The bottleneck handler. See the module docs.
#[derive(Debug)]
pub struct Bottleneck {
    /// Keeps the data file's directory alive as long as the handler.
    _dir: tempfile::TempDir,
    data: PathBuf,
    service_time: Duration,
    passes: u64,
    degrade: Option<Degrader>,
}

#[derive(Debug)]
struct Degrader {
    /// The controller, the last sample's time and the stage's refusals then.
    ctl: Mutex<(QualityController, Option<Instant>, u64)>,
    period: Duration,
    /// Current automatic quality, `f64` bits.
    quality: AtomicU64,
    /// Whether the controller switches the stage's admission control.
    drives_admission: bool,
}

/// One checksum pass: Fletcher-64-style sums over little-endian words. Serial on
/// purpose (`b` depends on `a`), so that the compiler cannot fold passes together.
fn checksum_pass(data: &[u8], sums: &mut (u64, u64)) {
    let (mut a, mut b) = *sums;
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        let mut x = [0u8; 8];
        x.copy_from_slice(w);
        a = a.wrapping_add(u64::from_le_bytes(x));
        b = b.wrapping_add(a);
    }
    for &byte in words.remainder() {
        a = a.wrapping_add(u64::from(byte));
        b = b.wrapping_add(a);
    }
    *sums = (a, b);
}

fn checksum(data: &[u8], passes: u64) -> u64 {
    let mut sums = (1u64, 0u64);
    for _ in 0..passes {
        checksum_pass(std::hint::black_box(data), &mut sums);
    }
    sums.0 ^ sums.1.rotate_left(32)
}

/// A `q` query parameter that is not a number in `0..=1` (the 400's text).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("q must be a number in 0..1, got `{0}`")]
pub(crate) struct BadQuality(String);

/// Parses the `q` query parameter: `None` when absent, an error unless `0..=1`.
pub(crate) fn parse_quality(v: Option<&str>) -> Result<Option<f64>, BadQuality> {
    let Some(v) = v else { return Ok(None) };
    match v.trim().parse::<f64>() {
        Ok(q) if (0.0..=1.0).contains(&q) => Ok(Some(q)),
        _ => Err(BadQuality(v.to_owned())),
    }
}

impl Bottleneck {
    /// Writes the data file and calibrates the work to about `service_time` per
    /// full-quality request. Takes a few times 20 ms.
    pub fn calibrate(service_time: Duration) -> std::io::Result<Bottleneck> {
        let (dir, data, bytes) = Self::data_file(service_time)?;
        // Time doubling batches of passes until one takes 20 ms; keep the fastest of
        // three rounds (the least disturbed by other load on the machine).
        let mut best = f64::INFINITY;
        for _ in 0..3 {
            let mut n = 1u64;
            loop {
                let t = Instant::now();
                std::hint::black_box(checksum(&bytes, n));
                let el = t.elapsed();
                if el >= Duration::from_millis(20) || n >= 1 << 30 {
                    best = best.min(el.as_secs_f64() / n as f64);
                    break;
                }
                n *= 2;
            }
        }
        let passes = (service_time.as_secs_f64() / best).round().max(1.0) as u64;
        Ok(Bottleneck {
            _dir: dir,
            data,
            service_time,
            passes,
            degrade: None,
        })
    }

    /// The handler with a given work per full-quality request instead of a
    /// calibration: `passes` checksum passes (what [`Bottleneck::passes`] of an
    /// earlier calibration returned), so that several servers do the same work.
    pub fn with_passes(service_time: Duration, passes: u64) -> std::io::Result<Bottleneck> {
        if passes == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "bottleneck passes must be at least 1",
            ));
        }
        let (dir, data, _) = Self::data_file(service_time)?;
        Ok(Bottleneck {
            _dir: dir,
            data,
            service_time,
            passes,
            degrade: None,
        })
    }

    /// Writes the data file the handler reads.
    fn data_file(
        service_time: Duration,
    ) -> std::io::Result<(tempfile::TempDir, std::path::PathBuf, Vec<u8>)> {
        if service_time.is_zero() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "bottleneck service time must be positive",
            ));
        }
        let dir = tempfile::Builder::new()
            .prefix("seda-bottleneck")
            .tempdir()?;
        let data = dir.path().join("data.bin");
        let bytes: Vec<u8> = (0..DATA_BYTES as u64)
            .map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8)
            .collect();
        File::create(&data)?.write_all(&bytes)?;
        Ok((dir, data, bytes))
    }

    /// Runs with automatic quality (see the module docs); `period` is how often the
    /// controller samples the stage's p90.
    pub fn degrade(
        mut self,
        cfg: QualityConfig,
        period: Duration,
    ) -> Result<Bottleneck, seda::control::ConfigError> {
        let drives_admission = cfg.reenable_after.is_some() || cfg.with_admission;
        let ctl = QualityController::new(cfg)?;
        let q = ctl.decision().quality;
        self.degrade = Some(Degrader {
            ctl: Mutex::new((ctl, None, 0)),
            period: period.max(Duration::from_millis(1)),
            quality: AtomicU64::new(q.to_bits()),
            drives_admission,
        });
        Ok(self)
    }

    /// Checksum passes of a full-quality request (the calibration result).
    pub fn passes(&self) -> u64 {
        self.passes
    }

    /// The service time the calibration aimed at.
    pub fn service_time(&self) -> Duration {
        self.service_time
    }

    /// Mounts the handler at `/bottleneck` (stage `handler:bottleneck`).
    pub fn registration(self) -> HandlerRegistration {
        HandlerRegistration::new("/bottleneck", self)
    }

    /// Current automatic quality (1.0 without degradation).
    fn auto_quality(&self) -> f64 {
        self.degrade
            .as_ref()
            .map_or(1.0, |d| f64::from_bits(d.quality.load(Relaxed)))
    }

    /// Steps the quality controller if a sampling period has passed.
    fn sample(&self, cx: &HandlerContext<'_>) {
        let Some(d) = &self.degrade else { return };
        let now = Instant::now();
        let mut g = d.ctl.lock();
        let (ctl, last, refused_then) = &mut *g;
        let refused_now = cx.rejected();
        match last {
            Some(t) if now.saturating_duration_since(*t) < d.period => return,
            None => {
                *last = Some(now);
                *refused_then = refused_now;
                return;
            }
            Some(t) => *t = now,
        }
        let refused = refused_now > *refused_then;
        *refused_then = refused_now;
        let decision = ctl.step_refusing(cx.p90(), refused);
        d.quality.store(decision.quality.to_bits(), Relaxed);
        if d.drives_admission && cx.admission_enabled() != decision.admission {
            cx.set_admission_enabled(decision.admission);
        }
    }

    /// Bytes of the data file a request at quality `q` checksums (`passes` times):
    /// the work is proportional to it.
    fn bytes_for(q: f64) -> usize {
        ((q * DATA_BYTES as f64).ceil() as usize).min(DATA_BYTES)
    }

    /// The work of one request at quality `q`: open, read `q` of the file, checksum.
    fn work(&self, q: f64) -> std::io::Result<u64> {
        let n = Self::bytes_for(q);
        let mut buf = vec![0u8; n];
        File::open(&self.data)?.read_exact(&mut buf)?;
        Ok(if n == 0 {
            0
        } else {
            checksum(&buf, self.passes)
        })
    }

    fn page(q: f64, sum: u64) -> Response {
        let mut body = format!(
            "<!DOCTYPE html>\n<html><head><title>bottleneck</title></head><body>\n\
             <h1>bottleneck</h1>\n<p>quality {q:.2}, checksum {sum:016x}</p>\n<pre>\n"
        );
        let tail = "</pre></body></html>\n";
        let filler = "The quick brown fox jumps over the lazy dog. 0123456789\n";
        while body.len() + tail.len() < PAGE_BYTES {
            let room = PAGE_BYTES - tail.len() - body.len();
            body.push_str(&filler[..room.min(filler.len())]);
        }
        body.push_str(tail);
        debug_assert_eq!(body.len(), PAGE_BYTES);
        Response::ok("text/html; charset=utf-8", body)
            .with_header("X-Seda-Quality", &format!("{q:.2}"))
            .with_header("Cache-Control", "no-store")
    }
}

impl Handler for Bottleneck {
    fn init(&self, cx: &HandlerContext<'_>) {
        // The paper's order: admission control waits for the lowest quality; with
        // `with_admission` it is on from the start.
        if let Some(d) = self.degrade.as_ref().filter(|d| d.drives_admission) {
            cx.set_admission_enabled(d.ctl.lock().0.decision().admission);
        }
    }

    fn handle(&self, req: &Request, cx: &HandlerContext<'_>) -> Response {
        let asked = match parse_quality(req.query_param("q").as_deref()) {
            Ok(q) => q.unwrap_or(1.0),
            Err(e) => {
                return Response::text(Status::BAD_REQUEST, format!("400 Bad Request: {e}\n"));
            }
        };
        self.sample(cx);
        let q = asked.min(self.auto_quality());
        match self.work(q) {
            Ok(sum) => Self::page(q, sum),
            Err(e) => Response::text(
                Status::INTERNAL_SERVER_ERROR,
                format!("500 Internal Server Error: bottleneck data file: {e}\n"),
            ),
        }
    }

    fn degrade(&self, _req: &Request) -> Response {
        Self::page(0.0, 0)
    }

    fn quality(&self) -> Option<f64> {
        self.degrade.as_ref().map(|_| self.auto_quality())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quality_parameter_parsing() {
        assert_eq!(parse_quality(None), Ok(None));
        assert_eq!(parse_quality(Some("0")), Ok(Some(0.0)));
        assert_eq!(parse_quality(Some("0.25")), Ok(Some(0.25)));
        assert_eq!(parse_quality(Some("1")), Ok(Some(1.0)));
        assert_eq!(parse_quality(Some("1.0")), Ok(Some(1.0)));
        for bad in ["", "1.01", "-0.1", "NaN", "inf", "half", "0.5x"] {
            let e = parse_quality(Some(bad)).unwrap_err();
            assert_eq!(e, BadQuality(bad.to_owned()));
            assert!(e.to_string().contains("0..1"), "{bad}: {e}");
        }
    }

    #[test]
    fn pages_are_8k_and_name_their_quality() {
        for q in [0.0, 0.333, 1.0] {
            let r = Bottleneck::page(q, 7);
            assert_eq!(r.body.len(), PAGE_BYTES);
            let hq = r
                .headers
                .iter()
                .find(|(n, _)| n == "X-Seda-Quality")
                .map(|(_, v)| v.clone());
            assert_eq!(hq, Some(format!("{q:.2}")));
        }
    }

    #[test]
    fn work_scales_with_quality() {
        let b = Bottleneck::calibrate(Duration::from_millis(5)).unwrap();
        assert!(b.passes() >= 1);
        let full = b.work(1.0).unwrap();
        assert_eq!(full, b.work(1.0).unwrap(), "deterministic");
        assert_ne!(full, b.work(0.5).unwrap());
        assert_eq!(b.work(0.0).unwrap(), 0);
        // The work is `passes` checksums of `bytes_for(q)` bytes: counted, not timed.
        let bytes: Vec<usize> = [0.0, 0.25, 0.5, 1.0, 2.0]
            .iter()
            .map(|&q| Bottleneck::bytes_for(q))
            .collect();
        assert_eq!(
            bytes,
            [0, DATA_BYTES / 4, DATA_BYTES / 2, DATA_BYTES, DATA_BYTES]
        );
    }
}
