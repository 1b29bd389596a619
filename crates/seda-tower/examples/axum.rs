//! An axum service with p90-targeted load shedding for two classes of users.
//!
//! `/slow` stands for a backend with a fixed capacity: 4 requests at a time, 40 ms
//! each (100 requests/s); past that, requests queue and response times grow. `/` is
//! fast. Requests carry their class in `x-class` (`1` for paying users, anything else
//! is class 0). The layer holds class 1's p90 under 200 ms and class 0's under 500 ms,
//! cutting class 0 first (USITS'03 3.3); a refused request gets `503` with
//! `Retry-After: 1`. `/_admission` shows the layer's counters and the controller's
//! state as JSON.
//!
//! ```text
//! cargo run --release -p seda-tower --example axum            # serve on 127.0.0.1:3000
//! curl -H 'x-class: 1' localhost:3000/slow; curl localhost:3000/_admission
//! cargo run --release -p seda-tower --example axum -- --demo  # load itself for 20 s
//! ```
//!
//! `--demo` serves on a free loopback port and offers each class 80 requests/s to
//! `/slow` (160/s against a capacity of 100/s) for 20 s, printing what each class got
//! every second, then exits.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use seda::admission::{MulticlassConfig, MulticlassPolicy};
use seda_tower::{AdmissionHandle, AdmissionLayer, ClassHeader, ServiceUnavailable};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

const DEMO_RATE: u32 = 80; // per class, per second
const DEMO_SECS: u32 = 20;

#[derive(Clone)]
struct App {
    backend: Arc<Semaphore>,
    admission: AdmissionHandle,
}

async fn slow(State(app): State<App>) -> &'static str {
    // A closed semaphore would be a bug of this example; the permit is never refused.
    let _slot = app.backend.acquire().await.expect("backend semaphore open");
    tokio::time::sleep(Duration::from_millis(40)).await;
    "slow page\n"
}

async fn stats(State(app): State<App>) -> String {
    serde_json::to_string_pretty(&app.admission.stats()).unwrap_or_else(|e| e.to_string())
}

fn app() -> Router {
    let cfg = MulticlassConfig::with_target(Duration::from_millis(500))
        .class_target(1, Duration::from_millis(200));
    let policy = MulticlassPolicy::new(cfg).expect("valid controller settings");
    let layer = AdmissionLayer::builder(policy)
        .classify(ClassHeader::new("x-class").max_class(1))
        .reject_with(ServiceUnavailable)
        .retry_after(Duration::from_secs(1))
        .build();
    let state = App {
        backend: Arc::new(Semaphore::new(4)),
        admission: layer.handle(),
    };
    let shed = Router::new()
        .route("/", get(|| async { "hello\n" }))
        .route("/slow", get(slow))
        .layer(layer);
    // The stats route stays outside the layer: it must answer during overload.
    Router::new()
        .route("/_admission", get(stats))
        .merge(shed)
        .with_state(state)
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let demo = std::env::args().any(|a| a == "--demo");
    let addr = if demo {
        "127.0.0.1:0"
    } else {
        "127.0.0.1:3000"
    };
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let server = tokio::spawn(async move { axum::serve(listener, app()).await });
    if !demo {
        println!("serving on http://{local} (/, /slow, /_admission); Ctrl-C stops");
        tokio::signal::ctrl_c().await?;
        return Ok(());
    }
    run_demo(local).await;
    server.abort();
    Ok(())
}

/// Per-class tallies of one second.
#[derive(Default)]
struct Tally {
    ok: [AtomicU64; 2],
    shed: [AtomicU64; 2],
    failed: [AtomicU64; 2],
}

async fn run_demo(addr: std::net::SocketAddr) {
    let tally = Arc::new(Tally::default());
    let printer = {
        let tally = tally.clone();
        tokio::spawn(async move {
            println!("second  class-0 ok/503   class-1 ok/503   (offered {DEMO_RATE}/s each)");
            let mut every = tokio::time::interval(Duration::from_secs(1));
            every.tick().await;
            for s in 1..=DEMO_SECS {
                every.tick().await;
                let take = |a: &[AtomicU64; 2], c: usize| a[c].swap(0, Ordering::Relaxed);
                let (ok0, shed0) = (take(&tally.ok, 0), take(&tally.shed, 0));
                let (ok1, shed1) = (take(&tally.ok, 1), take(&tally.shed, 1));
                let failed = take(&tally.failed, 0) + take(&tally.failed, 1);
                let note = if failed > 0 {
                    format!("  ({failed} failed)")
                } else {
                    String::new()
                };
                println!("{s:>6}  {ok0:>7}/{shed0:<7}  {ok1:>7}/{shed1:<7}{note}");
            }
        })
    };
    let gap = Duration::from_secs(1) / (2 * DEMO_RATE);
    let mut every = tokio::time::interval(gap);
    let mut tasks = Vec::new();
    for i in 0..2 * DEMO_RATE * DEMO_SECS {
        every.tick().await;
        let class = (i % 2) as usize;
        let tally = tally.clone();
        tasks.push(tokio::spawn(async move {
            match get_status(addr, class).await {
                Ok(200) => tally.ok[class].fetch_add(1, Ordering::Relaxed),
                Ok(503) => tally.shed[class].fetch_add(1, Ordering::Relaxed),
                _ => tally.failed[class].fetch_add(1, Ordering::Relaxed),
            };
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let _ = printer.await;
    let stats = get_body(addr, "/_admission")
        .await
        .unwrap_or_else(|e| e.to_string());
    println!("\n/_admission after the run:\n{stats}");
}

/// One `GET /slow` on its own connection; the response's status code.
async fn get_status(addr: std::net::SocketAddr, class: usize) -> std::io::Result<u16> {
    let text = request(addr, &format!("/slow\r\nx-class: {class}")).await?;
    text.get(9..12)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line in {text:?}")))
}

async fn get_body(addr: std::net::SocketAddr, path: &str) -> std::io::Result<String> {
    let text = request(addr, path).await?;
    Ok(text
        .split_once("\r\n\r\n")
        .map_or(text.clone(), |(_, b)| b.to_owned()))
}

/// Sends `GET {target}` (which may carry extra header lines) and reads to the end.
async fn request(addr: std::net::SocketAddr, target: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect(addr).await?;
    let (path, extra) = target
        .split_once("\r\n")
        .map_or((target, ""), |(p, h)| (p, h));
    let extra = if extra.is_empty() {
        String::new()
    } else {
        format!("{extra}\r\n")
    };
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nhost: demo\r\n{extra}connection: close\r\n\r\n").as_bytes(),
    )
    .await?;
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut buf))
        .await
        .map_err(|_| std::io::Error::other("response timed out"))??;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}
