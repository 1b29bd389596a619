//! Per-request overhead of `AdmissionLayer` against no layer and against
//! `tower::limit::ConcurrencyLimit`, measured in the same run.
//!
//! The inner service answers at once (`future::ready`), so each figure is the cost of
//! the middleware itself: `poll_ready`, `call`, one poll of the response future and
//! its drop, driven by hand with a no-op waker (no runtime in the measurement).
//! `1-thread` runs one caller; `2-threads` runs two callers on clones of one service
//! (the policy's lock and the layer's counters are shared, as under a multi-threaded
//! runtime). Prints ns/request and ratios to both baselines at the end.
//!
//! `cargo bench -p seda-tower --bench overhead`

use std::future::{Future, Ready, ready};
use std::hint::black_box;
use std::pin::pin;
use std::sync::{Arc, Barrier};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion};
use seda::admission::{
    MulticlassConfig, MulticlassPolicy, ResponseTimeConfig, ResponseTimePolicy, Unbounded,
};
use seda_tower::AdmissionLayer;
use tower::limit::ConcurrencyLimitLayer;
use tower::{BoxError, Layer, Service};

const CONFIGS: [&str; 5] = [
    "none",
    "concurrency-limit",
    "admission-unbounded",
    "admission-response-time",
    "admission-multiclass",
];
const GROUPS: [&str; 2] = ["1-thread", "2-threads"];

type Inner = tower::util::ServiceFn<fn(u32) -> Ready<Result<u32, BoxError>>>;

fn inner() -> Inner {
    tower::service_fn(|r| ready(Ok(r)))
}

/// A response-time configuration that never refuses here: the rate is pinned far
/// above what one core can offer, so the benchmark measures the bookkeeping (token
/// bucket, p90 window, controller updates), not the shedding.
fn wide_open(target: Duration) -> ResponseTimeConfig {
    let mut cfg = ResponseTimeConfig::with_target(target);
    cfg.rate_max = 1e12;
    cfg.initial_rate = 1e12;
    cfg
}

/// Calls `$bench(group, name, service)` for each configuration, each service by its
/// concrete type: boxing would add an allocation per request to every configuration.
macro_rules! each_config {
    ($bench:ident, $group:expr) => {{
        let target = Duration::from_millis(100);
        $bench($group, CONFIGS[0], inner());
        $bench(
            $group,
            CONFIGS[1],
            ConcurrencyLimitLayer::new(1024).layer(inner()),
        );
        $bench(
            $group,
            CONFIGS[2],
            AdmissionLayer::new(Unbounded).layer(inner()),
        );
        let rt = ResponseTimePolicy::new(wide_open(target)).unwrap();
        $bench($group, CONFIGS[3], AdmissionLayer::new(rt).layer(inner()));
        let cfg = MulticlassConfig::with_target(target)
            .with_base(wide_open(target))
            .class_target(1, target / 2);
        let layer = AdmissionLayer::builder(MulticlassPolicy::new(cfg).unwrap())
            .classify(|r: &u32| (r & 1) as u8)
            .build();
        $bench($group, CONFIGS[4], layer.layer(inner()));
    }};
}

/// One request through `svc`, by hand. Never inlined, so that callgrind can count it.
#[inline(never)]
fn request<S: Service<u32, Response = u32, Error = BoxError>>(svc: &mut S, i: u32) -> u32 {
    let mut cx = Context::from_waker(Waker::noop());
    match svc.poll_ready(&mut cx) {
        Poll::Ready(Ok(())) => {}
        _ => unreachable!("the services here are always ready"),
    }
    match pin!(svc.call(i)).poll(&mut cx) {
        Poll::Ready(Ok(r)) => r,
        _ => unreachable!("the inner service answers at once and nothing is refused"),
    }
}

type Group<'a> = BenchmarkGroup<'a, WallTime>;

fn one_thread<S>(g: &mut Group<'_>, config: &str, mut svc: S)
where
    S: Service<u32, Response = u32, Error = BoxError>,
{
    let mut i = 0u32;
    g.bench_function(BenchmarkId::from_parameter(config), |b| {
        b.iter(|| {
            i = i.wrapping_add(1);
            black_box(request(&mut svc, black_box(i)))
        })
    });
}

fn two_threads<S>(g: &mut Group<'_>, config: &str, svc: S)
where
    S: Service<u32, Response = u32, Error = BoxError> + Clone + Send + 'static,
{
    g.bench_function(BenchmarkId::from_parameter(config), |b| {
        b.iter_custom(|iters| split_over_two(&svc, iters))
    });
}

/// `iters` requests split over two threads on clones of one service; wall time from
/// the common start to the last finish.
fn split_over_two<S>(svc: &S, iters: u64) -> Duration
where
    S: Service<u32, Response = u32, Error = BoxError> + Clone + Send + 'static,
{
    let start = Arc::new(Barrier::new(3));
    let threads: Vec<_> = (0..2u64)
        .map(|t| {
            let (mut svc, start) = (svc.clone(), start.clone());
            let n = iters / 2 + (iters % 2) * t;
            std::thread::spawn(move || {
                start.wait();
                for i in 0..n {
                    black_box(request(&mut svc, i as u32));
                }
            })
        })
        .collect();
    start.wait();
    let t0 = Instant::now();
    for t in threads {
        t.join().expect("bench thread");
    }
    t0.elapsed()
}

fn benches(c: &mut Criterion) {
    let mut g = c.benchmark_group(GROUPS[0]);
    g.warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    each_config!(one_thread, &mut g);
    g.finish();
    let mut g = c.benchmark_group(GROUPS[1]);
    g.warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    each_config!(two_threads, &mut g);
    g.finish();
}

/// Time per request of one benchmark of this run, from criterion's output: the slope
/// of the linear fit where criterion made one (it removes a sample's fixed cost, the
/// thread start-up of `2-threads`), else the median.
fn ns_per_request(group: &str, config: &str) -> Option<f64> {
    let dir = std::env::var("CARGO_TARGET_DIR")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../../target").to_owned());
    let path = format!("{dir}/criterion/{group}/{config}/new/estimates.json");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    v["slope"]["point_estimate"]
        .as_f64()
        .or_else(|| v["median"]["point_estimate"].as_f64())
}

fn summary() {
    println!(
        "\n{:<10} {:<24} {:>12} {:>12} {:>16}",
        "callers", "config", "ns/request", "vs none", "vs conc.-limit"
    );
    for group in GROUPS {
        let none = ns_per_request(group, "none");
        let limit = ns_per_request(group, "concurrency-limit");
        for config in CONFIGS {
            let ns = ns_per_request(group, config);
            let ratio = |base: Option<f64>| match (ns, base) {
                (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
                _ => "-".to_owned(),
            };
            println!(
                "{:<10} {:<24} {:>12} {:>12} {:>16}",
                group,
                config,
                ns.map_or("-".into(), |ns| format!("{ns:.1}")),
                ratio(none),
                ratio(limit)
            );
        }
    }
    println!("(2-threads: wall time per request with two callers sharing one service)");
}

/// `OVERHEAD_ONLY=CONFIG`: runs 1,000,000 requests of one configuration on one thread
/// and exits, for instruction counts that load on the machine does not move:
/// `OVERHEAD_ONLY=admission-unbounded valgrind --tool=callgrind
/// --toggle-collect='overhead::request*' target/release/deps/overhead-*`.
fn only(config: &str) {
    fn run<S: Service<u32, Response = u32, Error = BoxError>>(_: (), name: &str, mut svc: S) {
        if name == std::env::var("OVERHEAD_ONLY").unwrap_or_default() {
            for i in 0..1_000_000u32 {
                black_box(request(&mut svc, i));
            }
            println!("{name}: 1000000 requests");
        }
    }
    assert!(
        CONFIGS.contains(&config),
        "unknown config {config}; one of {CONFIGS:?}"
    );
    each_config!(run, ());
}

fn main() {
    if let Ok(config) = std::env::var("OVERHEAD_ONLY") {
        return only(&config);
    }
    let mut c = Criterion::default().configure_from_args();
    benches(&mut c);
    c.final_summary();
    summary();
}
