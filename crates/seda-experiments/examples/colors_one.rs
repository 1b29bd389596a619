//! One setup of the colors experiment's sealing server and its load generator, for
//! profiles (`perf record`) and instruction counts (callgrind) of one setup alone:
//!
//! ```text
//! cargo build --release -p seda-experiments --example colors_one
//! perf record -e cpu-clock -g target/release/examples/colors_one per-connection 2 5s
//! valgrind --tool=callgrind target/release/examples/colors_one single 1 2000
//! ```
//!
//! Arguments: coloring (`single` or `per-connection`), shared workers, and either a
//! duration (`5s`: run that long) or a count (`2000`: every connection stops after
//! that many responses). Optional: the socket backend (`auto`, `epoll`, `uring`) and
//! the generator's dwell in microseconds (default the experiment's) and the reads
//! outstanding per connection (default 4, the experiment's). Prints responses, responses/s and the CPU per response of each
//! thread (the figures are meaningless under callgrind; its counts are not).

use std::time::{Duration, Instant};

use seda::ThreadModel;
use seda_experiments::colors::client::{CLIENT_THREAD, ClientConfig, DEFAULT_DWELL, LoadClient};
use seda_experiments::colors::cpu::CpuSample;
use seda_experiments::colors::server::{Coloring, ColorsServer, ServerConfig};
use seda_io::IoBackend;

type Error = Box<dyn std::error::Error + Send + Sync>;

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (coloring, workers, amount, io, dwell, depth) = match args.as_slice() {
        [c, w, a] => (c, w, a, "auto", None, None),
        [c, w, a, io] => (c, w, a, io.as_str(), None, None),
        [c, w, a, io, d] => (c, w, a, io.as_str(), Some(d), None),
        [c, w, a, io, d, depth] => (c, w, a, io.as_str(), Some(d), Some(depth)),
        _ => {
            return Err(
                "usage: colors_one single|per-connection WORKERS 5s|COUNT [IO [DWELL_US [DEPTH]]]"
                    .into(),
            );
        }
    };
    let depth: usize = match depth {
        Some(d) => d.parse().map_err(|e| format!("depth: {e}"))?,
        None => 4,
    };
    let dwell = match dwell {
        Some(d) => Duration::from_micros(d.parse().map_err(|e| format!("dwell: {e}"))?),
        None => DEFAULT_DWELL,
    };
    let coloring = match coloring.as_str() {
        "single" => Coloring::Single,
        "per-connection" => Coloring::PerConnection,
        other => {
            return Err(format!("coloring must be single or per-connection, got {other}").into());
        }
    };
    let workers: usize = workers.parse().map_err(|e| format!("workers: {e}"))?;
    let (duration, count) = match amount.strip_suffix('s') {
        Some(s) => (Some(Duration::from_secs_f64(s.parse()?)), None),
        None => (None, Some(amount.parse::<u64>()?)),
    };
    let io: IoBackend = io.parse().map_err(|e| format!("io: {e}"))?;
    let (connections, block, file_len) = (16, 16 * 1024u32, 64usize << 20);
    let server = ColorsServer::start(ServerConfig {
        coloring,
        thread_model: ThreadModel::Shared,
        workers,
        file_len,
        max_block: block,
        io,
        ..ServerConfig::default()
    })?;
    let cpu0 = CpuSample::now(CLIENT_THREAD);
    let t0 = Instant::now();
    let client = LoadClient::start(&ClientConfig {
        addr: server.local_addr(),
        connections,
        depth,
        block,
        file_len: file_len as u64,
        threads: 1,
        responses_per_connection: count,
        verify: None,
        seed: 1,
        dwell,
    })?;
    match duration {
        Some(d) => std::thread::sleep(d),
        None => {
            while !client.finished() {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
    let (cpu1, secs) = (CpuSample::now(CLIENT_THREAD), t0.elapsed().as_secs_f64());
    let report = client.stop();
    let backend = server.backend();
    let stats = server.stop();
    if let Some(e) = report.first_error {
        return Err(format!("the load generator failed: {e}").into());
    }
    let n = report.responses as f64;
    println!(
        "{} responses, {:.0}/s, backend {}, overlaps {}",
        report.responses,
        n / secs,
        backend.as_str(),
        stats.overlaps
    );
    println!(
        "client: {:.1} us/response, {:.2} polls and {:.2} dwells per response",
        (cpu1.client - cpu0.client) / n * 1e6,
        report.polls as f64 / n,
        report.dwells as f64 / n
    );
    let mut threads: Vec<(String, f64)> = cpu1
        .server_threads
        .iter()
        .map(|(tid, (name, s))| {
            let before = cpu0.server_threads.get(tid).map_or(0.0, |(_, b)| *b);
            (name.clone(), s - before)
        })
        .filter(|(_, s)| *s > 0.0)
        .collect();
    threads.sort_by(|a, b| b.1.total_cmp(&a.1));
    for (name, s) in threads {
        println!("{name}: {:.1} us/response", s / n * 1e6);
    }
    println!(
        "server: {:.1} us/response",
        (cpu1.server - cpu0.server) / n * 1e6
    );
    Ok(())
}
