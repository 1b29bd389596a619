//! SEDA Fig. 11 on loopback: N clients each send bursts of 1,000 packets of 8 KB and
//! wait for the server's 32-byte answer after each burst. The servers, each measured
//! at every N in this invocation:
//! - `seda`: the `seda-io` socket stages handing every read to a counting
//!   application stage through its queue (two threads of its own);
//! - `inline`: the same, with the loops and the application stage in one thread-pool
//!   domain, so a read is handed over by a direct call when the stage is idle
//!   (Welsh's retrospective on SEDA; see `seda::Domain`);
//! - `tpc`: a thread-per-connection `std::net` server written for the comparison
//!   (64 KiB stacks).
//!
//! `seda` and `inline` run once per socket backend of `--io` (default: `epoll,uring`,
//! each row named `seda/epoll`, `inline/uring`, ...), so the backends are compared at
//! every N in the same run, against the same tpc.
//!
//! Throughput is what the server read during the measurement window (bytes and 8 KB
//! packets per second). Beside it, the server process's CPU time per MB read (user +
//! system, every thread, from `/proc/self/stat`), which other processes on a shared
//! machine change much less than throughput, and for seda the split of that CPU by
//! thread (socket loops vs application stage).
//!
//! The load generator is a child process (this program with `--load`) with two mio
//! threads: client and server then each need one file descriptor per connection of
//! their own, so 16,384 connections fit under a 20,000 open-files limit.
//!
//! ```text
//! cargo run --release -p seda-io --example sockets_bench -- \
//!     [--min-clients 1] [--max-clients 4096] [--secs 3] [--warmup 1] [--only seda,inline,tpc]
//!     [--io epoll,uring] [--perf]
//! ```

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use seda_io::IoBackend;

const PACKET: usize = 8 * 1024;
const BURST_PACKETS: usize = 1000;
const BURST: u64 = (PACKET * BURST_PACKETS) as u64;
const ACK: usize = 32;
const CLIENT_THREADS: usize = 2;
/// `listen(2)` backlog of both servers.
const LISTEN_BACKLOG: i32 = 4096;
/// How long the generator may take to open its connections.
const SETUP_LIMIT: Duration = Duration::from_secs(60);

/// The servers, in the order they run at each N.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Seda,
    Inline,
    Tpc,
}

const KINDS: [Kind; 3] = [Kind::Seda, Kind::Inline, Kind::Tpc];

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Seda => "seda",
            Kind::Inline => "inline",
            Kind::Tpc => "tpc",
        }
    }
}

struct Args {
    max_clients: usize,
    secs: f64,
    warmup: f64,
    min_clients: usize,
    kinds: Vec<Kind>,
    /// The socket backends the seda servers run on, each in turn.
    backends: Vec<IoBackend>,
    /// Count the server's syscalls and context switches per MB with `perf stat`.
    perf: bool,
}

enum Mode {
    Bench(Args),
    /// The generator's child process: `--load ADDR N`.
    Load(SocketAddr, usize),
}

fn args() -> Result<Mode, String> {
    let mut a = Args {
        max_clients: 4096,
        secs: 3.0,
        warmup: 1.0,
        min_clients: 1,
        kinds: KINDS.to_vec(),
        backends: vec![IoBackend::Epoll, IoBackend::Uring],
        perf: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        let num = |name: &str, v: String| v.parse::<f64>().map_err(|e| format!("{name}: {e}"));
        match flag.as_str() {
            "--load" => {
                let addr = value("--load")?;
                let n = value("--load")?;
                return Ok(Mode::Load(
                    addr.parse().map_err(|e| format!("--load address: {e}"))?,
                    n.parse().map_err(|e| format!("--load clients: {e}"))?,
                ));
            }
            "--max-clients" => {
                a.max_clients = value("--max-clients")?
                    .parse()
                    .map_err(|e| format!("--max-clients: {e}"))?
            }
            "--min-clients" => {
                a.min_clients = value("--min-clients")?
                    .parse()
                    .map_err(|e| format!("--min-clients: {e}"))?
            }
            "--only" => {
                a.kinds = value("--only")?
                    .split(',')
                    .map(|w| {
                        KINDS.into_iter().find(|k| k.name() == w).ok_or_else(|| {
                            format!("--only: unknown server '{w}' (seda, inline, tpc)")
                        })
                    })
                    .collect::<Result<_, _>>()?
            }
            "--io" => {
                a.backends = value("--io")?
                    .split(',')
                    .map(|w| w.parse::<IoBackend>().map_err(|e| format!("--io: {e}")))
                    .collect::<Result<_, _>>()?
            }
            "--perf" => a.perf = true,
            "--secs" => a.secs = num("--secs", value("--secs")?)?,
            "--warmup" => a.warmup = num("--warmup", value("--warmup")?)?,
            "-h" | "--help" => {
                println!(
                    "sockets_bench [--min-clients N] [--max-clients N] [--secs S] [--warmup S] \
                     [--only seda,inline,tpc] [--io epoll,uring] [--perf]"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument '{other}'")),
        }
    }
    if a.min_clients == 0
        || a.max_clients < a.min_clients
        || !(a.secs.is_finite() && a.secs > 0.0)
        || !(a.warmup.is_finite() && a.warmup >= 0.0)
        || a.kinds.is_empty()
        || a.backends.is_empty()
    {
        return Err(
            "--min-clients must be at least 1 and at most --max-clients, --secs \
                    positive, --warmup not negative, --only and --io not empty"
                .into(),
        );
    }
    Ok(Mode::Bench(a))
}

mod load;
mod servers;

use load::{load_main, start_load, stop_load};
use servers::{Server, seda_server, threaded_server};

/// CPU seconds of a process's threads, grouped by thread name: time on a CPU from
/// `/proc/PID/task/TID/schedstat`, in nanoseconds (the tick-sampled user and system
/// times of `stat` undercount threads that each run a few microseconds at a time,
/// as a thousand thread-per-connection threads do).
fn cpu_by_thread(pid: &str) -> BTreeMap<String, f64> {
    let mut by_name = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return by_name;
    };
    for t in tasks.flatten() {
        let (Ok(name), Ok(sched)) = (
            std::fs::read_to_string(t.path().join("comm")),
            std::fs::read_to_string(t.path().join("schedstat")),
        ) else {
            continue;
        };
        let Some(ns) = sched
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<u64>().ok())
        else {
            continue;
        };
        *by_name.entry(name.trim().to_owned()).or_insert(0.0) += ns as f64 / 1e9;
    }
    by_name
}

/// The server process's CPU by thread name between two samples; threads that exited
/// in between are lost (tpc's threads live as long as their connections).
fn cpu_delta(a: &BTreeMap<String, f64>, b: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    b.iter()
        .map(|(k, v)| (k.clone(), v - a.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v > 0.0)
        .collect()
}

fn load1() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

struct Point {
    mb_per_s: f64,
    /// Server CPU (every thread) per MB read, microseconds.
    us_per_mb: f64,
    /// The generator process's CPU in the window, cores.
    client_cores: f64,
    /// The server's CPU by thread name, in cores.
    threads: BTreeMap<String, f64>,
    /// Connections the generator opened.
    connected: usize,
    /// Connections the server closed at once.
    refused: u64,
    /// `perf stat` counts over the window per MB read, by event (with `--perf`).
    per_mb: Vec<(String, f64)>,
}

/// What `--perf` counts in the server process: CPU, context switches, and the
/// syscalls a socket server makes.
const PERF_EVENTS: &str = "context-switches,syscalls:sys_enter_read,syscalls:sys_enter_recvfrom,\
     syscalls:sys_enter_epoll_wait,syscalls:sys_enter_futex,syscalls:sys_enter_write,\
     syscalls:sys_enter_writev,syscalls:sys_enter_sendto,syscalls:sys_enter_sched_yield,\
     syscalls:sys_enter_io_uring_enter";

/// Starts `perf stat` on this process for `secs`; its CSV comes on stderr.
fn start_perf(secs: f64) -> io::Result<Child> {
    Command::new("perf")
        .args(["stat", "-x", ",", "-e", PERF_EVENTS, "-p"])
        .arg(std::process::id().to_string())
        .args(["--", "sleep", &format!("{secs:.3}")])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
}

/// `perf stat -x,` lines: `count,unit,event,...`; events not counted are left out.
fn parse_perf(csv: &str) -> Vec<(String, f64)> {
    csv.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            let count = f.first()?.parse::<f64>().ok()?;
            let event = f.get(2)?.trim_start_matches("syscalls:sys_enter_");
            Some((event.to_owned(), count))
        })
        .collect()
}

fn measure(server: Box<dyn Server>, clients: usize, a: &Args) -> io::Result<Point> {
    let (child, connected) = match start_load(server.addr(), clients) {
        Ok(c) => c,
        Err(e) => {
            server.stop();
            return Err(e);
        }
    };
    let child_pid = child.id().to_string();
    std::thread::sleep(Duration::from_secs_f64(a.warmup));
    let sample = || {
        let child_cpu: f64 = cpu_by_thread(&child_pid).values().sum();
        (
            Instant::now(),
            server.bytes_read(),
            cpu_by_thread("self"),
            child_cpu,
        )
    };
    let perf = if a.perf {
        start_perf(a.secs)
            .map_err(|e| eprintln!("  perf stat: {e}"))
            .ok()
    } else {
        None
    };
    let (t0, b0, cpu0, c0) = sample();
    std::thread::sleep(Duration::from_secs_f64(a.secs));
    let (t1, b1, cpu1, c1) = sample();
    let refused = server.refused();
    let counts = perf
        .and_then(|p| p.wait_with_output().ok())
        .map(|o| parse_perf(&String::from_utf8_lossy(&o.stderr)))
        .unwrap_or_default();
    stop_load(child);
    server.stop();
    let secs = (t1 - t0).as_secs_f64();
    let bytes = (b1 - b0) as f64;
    let threads = cpu_delta(&cpu0, &cpu1);
    let server_cpu: f64 = threads.values().sum();
    Ok(Point {
        mb_per_s: bytes / secs / 1e6,
        us_per_mb: if bytes > 0.0 {
            server_cpu / (bytes / 1e6) * 1e6
        } else {
            f64::NAN
        },
        client_cores: (c1 - c0) / secs,
        threads: threads.into_iter().map(|(k, v)| (k, v / secs)).collect(),
        connected,
        refused,
        per_mb: counts
            .into_iter()
            .map(|(e, c)| (e, if bytes > 0.0 { c / (bytes / 1e6) } else { 0.0 }))
            .collect(),
    })
}

/// The seda server's CPU split: socket loops vs the rest, cores.
fn split(p: &Point) -> String {
    let loops: f64 = p
        .threads
        .iter()
        .filter(|(k, _)| k.contains("sock-io"))
        .map(|(_, v)| v)
        .sum();
    let app: f64 = p
        .threads
        .iter()
        .filter(|(k, _)| k.contains("bench-app"))
        .map(|(_, v)| v)
        .sum();
    format!("loops {loops:.2} app {app:.2}")
}

fn main() {
    let a = match args() {
        Ok(Mode::Bench(a)) => a,
        Ok(Mode::Load(addr, n)) => {
            let _ = seda_io::raise_fd_limit();
            if let Err(e) = load_main(addr, n) {
                eprintln!("sockets_bench --load: {e}");
                std::process::exit(1);
            }
            return;
        }
        Err(e) => {
            eprintln!("sockets_bench: {e}");
            std::process::exit(2);
        }
    };
    match seda_io::raise_fd_limit() {
        Ok(limit) if (limit as usize) < a.max_clients + 256 => {
            eprintln!(
                "sockets_bench: the open-files limit ({limit}) is too low for {} clients",
                a.max_clients
            );
            std::process::exit(2);
        }
        Ok(_) => {}
        Err(e) => eprintln!("sockets_bench: cannot raise the open-files limit: {e}"),
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "# SEDA Fig. 11 on loopback: bursts of {BURST_PACKETS} x {PACKET} B packets, 32 B answer per burst; \
         {cores} cores shared by the server and a generator process of {CLIENT_THREADS} threads; \
         {:.1} s warm-up, {:.1} s measured",
        a.warmup, a.secs
    );
    println!(
        "# MB/s: read by the server; us/MB: the server process's CPU per MB read; \
         ratio: MB/s / tpc's MB/s; cpu ratio: tpc's us/MB / this one's (> 1: cheaper than tpc)"
    );
    let mut n = a.min_clients;
    while n <= a.max_clients {
        let load = load1();
        // tpc first, so that every row can show its ratio to tpc when printed; the
        // seda servers once per backend.
        let mut order = a.kinds.clone();
        order.sort_by_key(|k| *k != Kind::Tpc);
        let runs: Vec<(Kind, Option<IoBackend>)> = order
            .into_iter()
            .flat_map(|k| match k {
                Kind::Tpc => vec![(k, None)],
                _ => a.backends.iter().map(|b| (k, Some(*b))).collect(),
            })
            .collect();
        let mut tpc = None;
        for (k, backend) in runs {
            let name = match backend {
                Some(b) => format!("{}/{b}", k.name()),
                None => k.name().to_owned(),
            };
            let io = backend.unwrap_or(IoBackend::Auto);
            let r = match k {
                Kind::Seda => seda_server(false, io),
                Kind::Inline => seda_server(true, io),
                Kind::Tpc => threaded_server(),
            }
            .and_then(|s| measure(s, n, &a));
            let p = match r {
                Ok(p) => p,
                Err(e) => {
                    println!("{n:>6} {name:<12} failed: {e} load {load:.1}");
                    continue;
                }
            };
            if k == Kind::Tpc {
                tpc = Some((p.mb_per_s, p.us_per_mb));
            }
            print_row(n, &name, k, &p, tpc, load);
        }
        n *= 4;
    }
}

fn print_row(n: usize, name: &str, k: Kind, p: &Point, tpc: Option<(f64, f64)>, load: f64) {
    let vs = tpc.map_or(String::new(), |(mb, us)| {
        format!(
            " ratio {:.2} cpu ratio {:.2}",
            p.mb_per_s / mb.max(f64::MIN_POSITIVE),
            us / p.us_per_mb
        )
    });
    let mut notes = String::new();
    if p.connected < n {
        notes += &format!(" ONLY {} CONNECTED", p.connected);
    }
    if p.refused > 0 {
        notes += &format!(" REFUSED {} (vm.max_map_count)", p.refused);
    }
    let detail = if k == Kind::Tpc {
        String::new()
    } else {
        format!(" ({})", split(p))
    };
    println!(
        "{n:>6} {name:<12} {:>8.1} MB/s {:>6.0} us/MB server {:.2} cores{detail} \
         client {:.2} cores{vs} load {load:.1}{notes}",
        p.mb_per_s,
        p.us_per_mb,
        p.threads.values().sum::<f64>(),
        p.client_cores,
    );
    if !p.per_mb.is_empty() {
        let list: Vec<String> = p
            .per_mb
            .iter()
            .filter(|(_, c)| *c >= 0.05)
            .map(|(e, c)| format!("{e} {c:.1}"))
            .collect();
        println!("{:>6} {name:<12} per MB: {}", "", list.join(", "));
    }
}
