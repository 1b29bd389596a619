//! The colors experiment end to end on loopback: the sealing server's per-connection
//! state is never entered by two handlers at once, responses arrive complete and in
//! nonce order under every coloring and thread model, overload pauses a client
//! instead of cutting it, bad requests get a sealed refusal, and the experiment
//! machinery writes its results.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use seda::ThreadModel;
use seda_experiments::colors::client::{ClientConfig, ClientReport, LoadClient};
use seda_experiments::colors::proto::{self, HEADER_LEN, HELLO_LEN, ReadRequest};
use seda_experiments::colors::server::{Coloring, ColorsServer, ServerConfig, ServerStats};
use seda_experiments::colors::{BASELINE, ColorsConfig, ColorsResult, PARALLEL};

const FILE_LEN: usize = 1 << 20;
const BLOCK: u32 = 2048;

fn server(coloring: Coloring, model: ThreadModel, workers: usize) -> ColorsServer {
    ColorsServer::start(ServerConfig {
        coloring,
        thread_model: model,
        workers,
        file_len: FILE_LEN,
        max_block: 64 * 1024,
        max_connections: 64,
        ..ServerConfig::default()
    })
    .expect("server starts")
}

/// Runs a verifying client to completion (or a 60 s deadline) against `server`.
fn verified_load(
    server: &ColorsServer,
    connections: usize,
    depth: usize,
    responses: u64,
) -> ClientReport {
    verified_load_dwelling(server, connections, depth, responses, Duration::ZERO)
}

/// As [`verified_load`], the generator sleeping `dwell` whenever a poll finds
/// nothing.
fn verified_load_dwelling(
    server: &ColorsServer,
    connections: usize,
    depth: usize,
    responses: u64,
    dwell: Duration,
) -> ClientReport {
    let client = LoadClient::start(&ClientConfig {
        addr: server.local_addr(),
        connections,
        depth,
        block: BLOCK,
        file_len: FILE_LEN as u64,
        threads: 2,
        responses_per_connection: Some(responses),
        verify: Some(Arc::new(proto::file_content(FILE_LEN, 1))),
        seed: 7,
        dwell,
    })
    .expect("client connects");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !client.finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    client.stop()
}

fn assert_clean(what: &str, report: &ClientReport, stats: &ServerStats, expected: u64) {
    assert_eq!(report.first_error, None, "{what}: {report:?}");
    assert_eq!(report.responses, expected, "{what}: {report:?}");
    assert_eq!(stats.overlaps, 0, "{what}: state entered twice: {stats:?}");
    assert_eq!(stats.responses, expected, "{what}: {stats:?}");
    assert_eq!(stats.shed, 0, "{what}: {stats:?}");
}

/// Eight connections with 16 reads in flight each on two workers: seal events of
/// one connection are queued while others run, so without colors two workers would
/// enter one connection's cipher and nonce counter together (and nonces would
/// reach the client out of order). The server's guarded cells count any such
/// entry; the client authenticates every response under its expected nonce.
#[test]
fn per_connection_state_is_never_entered_by_two_handlers_at_once() {
    for (coloring, model, workers) in [
        (Coloring::PerConnection, ThreadModel::Shared, 2),
        (Coloring::Single, ThreadModel::Shared, 2),
        (Coloring::PerConnection, ThreadModel::PerStage, 2),
        (Coloring::PerConnection, ThreadModel::PerStage, 1),
    ] {
        let s = server(coloring, model, workers);
        let report = verified_load(&s, 8, 16, 200);
        let stats = s.stop();
        assert_clean(
            &format!("{coloring:?} {model} x{workers}"),
            &report,
            &stats,
            8 * 200,
        );
        assert_eq!(stats.connections, 8);
        assert_eq!(stats.bytes_sealed, 8 * 200 * u64::from(BLOCK));
    }
}

/// The experiment's generator batches its wake-ups: a poll that finds nothing is
/// followed by a dwell, not by blocking until the next arrival. It must still see
/// every response, complete and in nonce order, including a connection's last ones
/// (no response may wait for a wake-up that never comes); without a dwell it never
/// sleeps one.
#[test]
fn a_dwelling_generator_still_sees_every_response_in_order() {
    let s = server(Coloring::PerConnection, ThreadModel::Shared, 2);
    let report = verified_load_dwelling(&s, 8, 4, 300, Duration::from_micros(200));
    let stats = s.stop();
    assert_clean("dwell 200 us", &report, &stats, 8 * 300);
    assert!(report.dwells > 0, "the generator never dwelt: {report:?}");
    assert!(report.polls > 0, "{report:?}");
    let s = server(Coloring::PerConnection, ThreadModel::Shared, 2);
    let report = verified_load(&s, 8, 4, 300);
    let stats = s.stop();
    assert_clean("no dwell", &report, &stats, 8 * 300);
    assert_eq!(report.dwells, 0, "{report:?}");
}

#[test]
fn a_client_pipelining_past_the_in_flight_limit_is_paused_not_cut() {
    let s = ColorsServer::start(ServerConfig {
        file_len: FILE_LEN,
        max_in_flight: 8,
        max_connections: 64,
        ..ServerConfig::default()
    })
    .unwrap();
    let report = verified_load(&s, 2, 200, 1000);
    let stats = s.stop();
    assert_clean("paused", &report, &stats, 2 * 1000);
    assert!(
        stats.pauses > 0,
        "recv never paused a connection: {stats:?}"
    );
}

/// Issue 29.6: `seda experiment colors` aborted connections ("queue refused an
/// event") with per-connection colors on 2 shared workers. Its shape without its
/// clock: 16 connections, each with 64 requests outstanding (the server's
/// `max_in_flight`, so the recv stage pauses none of them early), the experiment's
/// server configuration otherwise. Every request of `serve` waits on one color, so
/// the queue holds parked colored events all the time; none may be refused.
#[test]
fn sixteen_connections_with_64_outstanding_each_are_never_refused() {
    let s = ColorsServer::start(ServerConfig {
        coloring: Coloring::PerConnection,
        thread_model: ThreadModel::Shared,
        workers: 2,
        file_len: FILE_LEN,
        max_block: 64 * 1024,
        ..ServerConfig::default()
    })
    .unwrap();
    let report = verified_load(&s, 16, 64, 250);
    // Every response is in, so nothing is queued or held: a queue whose count of
    // held or parked events leaked would creep towards its capacity and, on a long
    // run, refuse. Each stage's count must come back to zero.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let snap = s.snapshot();
        let busy: Vec<_> = snap
            .stages
            .iter()
            .filter(|st| st.queue_len > 0)
            .map(|st| (st.name.clone(), st.queue_len))
            .collect();
        if busy.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "events still counted once idle: {busy:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let stats = s.stop();
    assert_clean("16 x 64 outstanding", &report, &stats, 16 * 250);
    assert_eq!(stats.connections, 16);
}

/// Reads one response from a blocking stream and opens it.
fn response(stream: &mut TcpStream, hello: &[u8; HELLO_LEN], nonce: u64) -> (u8, Vec<u8>) {
    let cipher = proto::open_hello(hello).expect("a hello");
    let mut hb = [0u8; HEADER_LEN];
    stream.read_exact(&mut hb).unwrap();
    let h = proto::Header::decode(&hb).unwrap();
    assert_eq!(h.nonce, nonce);
    let mut body = vec![0u8; h.body_len as usize];
    stream.read_exact(&mut body).unwrap();
    let n = proto::open(&cipher, &h, &mut body).unwrap();
    body.truncate(n);
    (h.status, body)
}

#[test]
fn bad_requests_get_a_sealed_refusal_then_the_connection_closes() {
    let s = server(Coloring::PerConnection, ThreadModel::Shared, 2);
    let past_end = ReadRequest {
        len: 100,
        offset: FILE_LEN as u64 - 10,
    }
    .encode();
    let mut bad_op = ReadRequest { len: 1, offset: 0 }.encode();
    bad_op[0] = 9;
    let too_long = ReadRequest {
        len: 1 << 20,
        offset: 0,
    }
    .encode();
    for (req, says) in [
        (past_end, "past the end"),
        (bad_op, "unknown opcode 9"),
        (too_long, "outside 1..="),
    ] {
        let mut c = TcpStream::connect(s.local_addr()).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut hello = [0u8; HELLO_LEN];
        c.read_exact(&mut hello).unwrap();
        // A good read first: the refusal comes after its answer, in order.
        c.write_all(&ReadRequest { len: 10, offset: 0 }.encode())
            .unwrap();
        c.write_all(&req).unwrap();
        let (status, body) = response(&mut c, &hello, 0);
        assert_eq!((status, body.len()), (proto::STATUS_OK, 10));
        assert_eq!(body, proto::file_content(FILE_LEN, 1)[..10]);
        let (status, body) = response(&mut c, &hello, 1);
        assert_eq!(status, proto::STATUS_BAD_REQUEST);
        let msg = String::from_utf8(body).unwrap();
        assert!(msg.contains(says), "{msg}");
        let mut rest = Vec::new();
        c.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty(), "bytes after a refusal");
    }
    let stats = s.stop();
    assert_eq!(stats.bad_requests, 3);
    assert_eq!(stats.overlaps, 0);
}

#[test]
fn the_quick_experiment_writes_results_with_a_speedup() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = ColorsConfig::new(dir.path().to_path_buf()).quick();
    let mut lines = Vec::new();
    let result = seda_experiments::colors::run(&cfg, &mut |l| lines.push(l.to_owned()))
        .expect("experiment runs");
    assert_eq!(result.runs.len(), 4, "{lines:?}");
    for r in &result.runs {
        assert_eq!(r.client.errors, 0, "{r:?}");
        assert_eq!(r.server.overlaps, 0, "{r:?}");
        assert!(r.responses_per_s > 0.0, "{r:?}");
    }
    assert_eq!(result.cost.len(), 2);
    let json: ColorsResult =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("runs.json")).unwrap())
            .unwrap();
    // The speedup is the runs' own figures: per-connection colors on 2 workers over
    // one color on 1 worker, in the round (one round here), as written.
    let rate = |setup| {
        json.runs
            .iter()
            .find(|r| r.setup == setup && r.round == 0)
            .map(|r| r.responses_per_s)
            .expect("the setup ran")
    };
    let within_round = rate(PARALLEL) / rate(BASELINE);
    assert_eq!(
        json.speedup_by_round.len(),
        1,
        "{:?}",
        json.speedup_by_round
    );
    assert!(
        (json.speedup_by_round[0] - within_round).abs() <= 1e-9 * within_round,
        "speedup of round 1 {} vs the runs' ratio {within_round}",
        json.speedup_by_round[0]
    );
    assert_eq!(
        json.speedup, json.speedup_by_round[0],
        "the median of one round"
    );
    assert_eq!(
        json.speedup, result.speedup,
        "runs.json holds what was measured"
    );
    let raw: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("runs.json")).unwrap())
            .unwrap();
    assert!(raw["speedup"].is_number());
    let table = std::fs::read_to_string(dir.path().join("table.md")).unwrap();
    assert!(
        table.contains("**speedup**") && table.contains("per-connection colors, shared, 2 workers")
    );
    assert!(dir.path().join("throughput.svg").exists());
}
