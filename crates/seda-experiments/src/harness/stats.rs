//! The server's side of a run: `GET /_seda/stats` polled once a second for the
//! bottleneck stage's admission state, controller p90, quality and per-class counts
//! (fields per `shared/contracts/overload.md`), and the per-class split of those
//! counts into per-second rates.
//!
//! The document is [`seda_http::StatsDoc`], the type the server writes it with; every
//! field has a default, so the experiment still runs against a server with fewer
//! fields, and the table says "-".

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::ExperimentError;
use seda_http::StatsDoc;
use seda_http::proto::{ChunkLimits, ChunkedDecoder};
use serde::{Deserialize, Serialize};

/// The stage the bottleneck handler runs in.
pub const BOTTLENECK_STAGE: &str = "handler:bottleneck";

/// Admitted and rejected events of one class, cumulative since the server started.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ClassSample {
    /// The class (0 = lowest).
    pub class: u8,
    /// Events of this class admitted so far.
    pub admitted: u64,
    /// Events of this class rejected so far.
    pub rejected: u64,
}

/// One poll of the bottleneck stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatsSample {
    /// Seconds since the run's load started.
    pub t: f64,
    /// Events waiting in the stage's queue.
    pub queue_len: Option<u64>,
    /// Threads of the stage.
    pub threads: Option<u64>,
    /// Events handled so far.
    pub processed: Option<u64>,
    /// Events rejected by admission control so far.
    pub rejected: Option<u64>,
    /// The stage's p90 response time (controller estimate or last window), ms.
    pub rt_p90_ms: Option<f64>,
    /// Admission policy name.
    pub policy: Option<String>,
    /// Whether admission control is on (off while degradation has quality to give).
    pub admission_enabled: Option<bool>,
    /// Admission rate of rate-based policies, events per second.
    pub admission_rate: Option<f64>,
    /// Limit of limit-based policies (queue length or concurrency).
    pub admission_limit: Option<f64>,
    /// The controller's current p90 estimate, ms.
    pub controller_p90_ms: Option<f64>,
    /// The controller's target, ms.
    pub target_ms: Option<f64>,
    /// Current automatic quality, 0..1 (degradation only).
    pub quality: Option<f64>,
    /// Per-class cumulative counts.
    pub classes: Vec<ClassSample>,
}

/// The sample of stage `stage` in a stats document, or `None` if it has no such stage.
pub fn parse_stage(doc: &StatsDoc, stage: &str, t: f64) -> Option<StatsSample> {
    let s = doc.stage(stage)?;
    let a = &s.admission;
    Some(StatsSample {
        t,
        queue_len: Some(s.queue_len as u64),
        threads: Some(s.threads as u64),
        processed: Some(s.processed),
        rejected: Some(s.rejected),
        rt_p90_ms: s.rt_p90_ms,
        policy: Some(a.policy.clone()),
        admission_enabled: Some(a.enabled || s.admission_enabled),
        admission_rate: a.rate.or(s.admission_rate),
        admission_limit: a.limit,
        controller_p90_ms: a.p90_ms,
        target_ms: a.target_ms.or(s.rt_target_ms),
        quality: s.quality,
        classes: s
            .classes
            .iter()
            .map(|c| ClassSample {
                class: c.class,
                admitted: c.admitted,
                rejected: c.rejected,
            })
            .collect(),
    })
}

/// A response to a one-off GET.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// Status code.
    pub status: u16,
    /// Header lines, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The body (Content-Length bytes, or up to the close).
    pub body: Vec<u8>,
}

/// `GET path` on a new connection with `Connection: close`, bounded by `timeout` for
/// the connect and for each read. The experiments' one response reader (the admin
/// listener's stats, HAProxy's statistics page, probes): a body framed by
/// Content-Length, by the connection's end, or chunked (decoded by seda-http's fuzzed
/// [`ChunkedDecoder`]); at most 16 MiB.
pub fn http_get(
    addr: SocketAddr,
    path: &str,
    timeout: Duration,
) -> Result<Fetched, ExperimentError> {
    let mut s = TcpStream::connect_timeout(&addr, timeout)
        .map_err(|e| ExperimentError::step("connect", e))?;
    s.set_read_timeout(Some(timeout))
        .and_then(|()| s.set_write_timeout(Some(timeout)))
        .map_err(ExperimentError::other)?;
    // One write of the whole request (`write!` on the stream may issue several).
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes())
        .map_err(|e| ExperimentError::step("write", e))?;
    let mut buf = Vec::with_capacity(16 * 1024);
    let mut chunk = [0u8; 16 * 1024];
    let mut head_end = None;
    loop {
        let n = s
            .read(&mut chunk)
            .map_err(|e| ExperimentError::step("read", e))?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if head_end.is_none() {
            head_end = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
        }
        if let Some(h) = head_end {
            let len = content_length(&buf[..h]);
            if len.is_some_and(|l| buf.len() >= h + l) {
                break;
            }
        }
        if buf.len() > 16 << 20 {
            return Err(ExperimentError::run("response larger than 16 MiB"));
        }
    }
    let h = head_end.ok_or_else(|| ExperimentError::run("no complete response head"))?;
    let head = String::from_utf8_lossy(&buf[..h]).to_string();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| {
            ExperimentError::run(format!("not an HTTP response: {:?}", head.lines().next()))
        })?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = buf.split_off(h);
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.to_ascii_lowercase().contains("chunked"));
    if chunked {
        let raw = std::mem::take(&mut body);
        ChunkedDecoder::new(ChunkLimits::new(16 << 20))
            .feed(&raw, |d| body.extend_from_slice(d))
            .map_err(|e| ExperimentError::step(format!("GET {path}"), e))?;
    } else if let Some(l) = content_length(&buf) {
        body.truncate(l);
    }
    Ok(Fetched {
        status,
        headers,
        body,
    })
}

fn content_length(head: &[u8]) -> Option<usize> {
    String::from_utf8_lossy(head)
        .split("\r\n")
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
}

/// One poll: the stage's sample, or why there is none.
pub fn poll_once(addr: SocketAddr, stage: &str, t: f64) -> Result<StatsSample, ExperimentError> {
    let r = http_get(addr, "/_seda/stats", Duration::from_millis(900))?;
    if r.status != 200 {
        return Err(ExperimentError::run(format!(
            "/_seda/stats answered {}",
            r.status
        )));
    }
    let doc: StatsDoc = serde_json::from_slice(&r.body)
        .map_err(|e| ExperimentError::step("/_seda/stats is not a stats document", e))?;
    parse_stage(&doc, stage, t)
        .ok_or_else(|| ExperimentError::run(format!("/_seda/stats has no stage {stage:?}")))
}

/// What a poller collected.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StatsLog {
    /// Samples, about one a second.
    pub samples: Vec<StatsSample>,
    /// Polls that failed (timeout under load, missing stage).
    pub failures: u32,
    /// The last failure's reason.
    pub last_failure: Option<String>,
}

/// A thread polling the stats of one stage once a second until stopped.
#[derive(Debug)]
pub struct StatsPoller {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<StatsLog>,
}

impl StatsPoller {
    /// Start polling `stage` on `addr`; sample times count from `t0`.
    pub fn start(
        addr: SocketAddr,
        stage: &str,
        t0: Instant,
    ) -> Result<StatsPoller, ExperimentError> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let stage = stage.to_string();
        let handle = std::thread::Builder::new()
            .name("seda-stats-poll".into())
            .spawn(move || {
                let mut log = StatsLog::default();
                let mut next = Duration::ZERO;
                while !flag.load(Ordering::Relaxed) {
                    let el = t0.elapsed();
                    if el >= next {
                        match poll_once(addr, &stage, el.as_secs_f64()) {
                            Ok(s) => log.samples.push(s),
                            Err(e) => {
                                log.failures += 1;
                                log.last_failure = Some(e.to_string());
                            }
                        }
                        // Keep the 1 s grid even when a poll was slow.
                        while next <= t0.elapsed() {
                            next += Duration::from_secs(1);
                        }
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                log
            })
            .map_err(|e| ExperimentError::step("cannot start the stats poller", e))?;
        Ok(StatsPoller { stop, handle })
    }

    /// Stop and return what was collected.
    pub fn finish(self) -> StatsLog {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or_default()
    }
}

/// Per-second rates of one class between two polls.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ClassRate {
    /// End of the interval, seconds since the start.
    pub t: f64,
    /// The class.
    pub class: u8,
    /// Admitted per second.
    pub admitted_per_s: f64,
    /// Rejected per second.
    pub rejected_per_s: f64,
    /// rejected / (admitted + rejected) in the interval; `None` without offers.
    pub reject_fraction: Option<f64>,
}

/// Split cumulative per-class counts into per-interval rates, one entry per class and
/// pair of consecutive samples. A class missing from the earlier sample starts at 0; a
/// counter that went backwards (a restarted server) yields no entry.
pub fn class_rates(samples: &[StatsSample]) -> Vec<ClassRate> {
    let mut out = Vec::new();
    for w in samples.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        let dt = b.t - a.t;
        if dt <= 0.0 {
            continue;
        }
        for c in &b.classes {
            let prev = a
                .classes
                .iter()
                .find(|p| p.class == c.class)
                .copied()
                .unwrap_or(ClassSample {
                    class: c.class,
                    admitted: 0,
                    rejected: 0,
                });
            let (Some(adm), Some(rej)) = (
                c.admitted.checked_sub(prev.admitted),
                c.rejected.checked_sub(prev.rejected),
            ) else {
                continue;
            };
            let offered = adm + rej;
            out.push(ClassRate {
                t: b.t,
                class: c.class,
                admitted_per_s: adm as f64 / dt,
                rejected_per_s: rej as f64 / dt,
                reject_fraction: (offered > 0).then(|| rej as f64 / offered as f64),
            });
        }
    }
    out
}

/// Totals of one class over samples with `from <= t <= to` (the last sample at or
/// before `from` is the baseline): (admitted, rejected).
pub fn class_totals(samples: &[StatsSample], class: u8, from: f64, to: f64) -> (u64, u64) {
    let count = |s: &StatsSample| {
        s.classes
            .iter()
            .find(|c| c.class == class)
            .map_or((0, 0), |c| (c.admitted, c.rejected))
    };
    let base = samples
        .iter()
        .rev()
        .find(|s| s.t <= from)
        .map_or((0, 0), count);
    let end = samples.iter().rev().find(|s| s.t <= to).map_or(base, count);
    (end.0.saturating_sub(base.0), end.1.saturating_sub(base.1))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A loopback server that answers one request with `response` and closes.
    fn answer_once(response: &'static [u8]) -> SocketAddr {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            // The whole request head before answering: closing with unread bytes
            // makes the kernel reset the connection, and the client may then lose
            // the answer (CI saw "Connection reset by peer" once).
            let mut req = Vec::new();
            let mut buf = [0u8; 1024];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => req.extend_from_slice(&buf[..n]),
                }
            }
            s.write_all(response).unwrap();
        });
        addr
    }

    #[test]
    fn http_get_reads_chunked_content_length_and_close_delimited_bodies() {
        let t = Duration::from_secs(10);
        let chunked = answer_once(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
              5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nX-Trailer: 1\r\n\r\n",
        );
        let r = http_get(chunked, "/;csv", t).unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, &b"hello, world"[..]));
        let fixed = answer_once(b"HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\n\r\nno!junk");
        let r = http_get(fixed, "/x", t).unwrap();
        assert_eq!((r.status, r.body.as_slice()), (404, &b"no!"[..]));
        let close = answer_once(b"HTTP/1.0 200 OK\r\n\r\nuntil the end");
        assert_eq!(http_get(close, "/", t).unwrap().body, b"until the end");
        let bad = answer_once(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n");
        assert!(http_get(bad, "/", t).is_err());
    }

    fn sample(t: f64, classes: &[(u8, u64, u64)]) -> StatsSample {
        StatsSample {
            t,
            queue_len: None,
            threads: None,
            processed: None,
            rejected: None,
            rt_p90_ms: None,
            policy: None,
            admission_enabled: None,
            admission_rate: None,
            admission_limit: None,
            controller_p90_ms: None,
            target_ms: None,
            quality: None,
            classes: classes
                .iter()
                .map(|&(class, admitted, rejected)| ClassSample {
                    class,
                    admitted,
                    rejected,
                })
                .collect(),
        }
    }

    #[test]
    fn parses_the_contract_fields_and_the_flat_ones() {
        let doc: StatsDoc = serde_json::from_str(
            r#"{"stages":[{"name":"HttpParse","queue_len":1},
            {"name":"handler:bottleneck","queue_len":7,"threads":2,"processed":90,
             "rejected":10,"rt_p90_ms":812.5,
             "admission":{"policy":"response-time","enabled":false,"rate":41.5,
                          "p90_ms":900.0,"target_ms":1000.0},
             "classes":[{"class":0,"admitted":50,"rejected":9},{"class":1,"admitted":40,"rejected":1}],
             "quality":0.25}]}"#,
        )
        .unwrap();
        let s = parse_stage(&doc, BOTTLENECK_STAGE, 3.0).unwrap();
        assert_eq!(s.queue_len, Some(7));
        assert_eq!(s.policy.as_deref(), Some("response-time"));
        assert_eq!(s.admission_enabled, Some(false));
        assert_eq!(s.admission_rate, Some(41.5));
        assert_eq!(s.controller_p90_ms, Some(900.0));
        assert_eq!(s.target_ms, Some(1000.0));
        assert_eq!(s.quality, Some(0.25));
        assert_eq!(s.classes.len(), 2);
        assert_eq!(s.classes[1].admitted, 40);
        assert!(parse_stage(&doc, "nope", 0.0).is_none());
        // A stage without a policy object: the flat runtime fields are used.
        let flat: StatsDoc = serde_json::from_str(
            r#"{"stages":[{"name":"handler:bottleneck","admission_enabled":true,
            "admission_rate":5.0,"rt_target_ms":200.0,"classes":[]}]}"#,
        )
        .unwrap();
        let s = parse_stage(&flat, BOTTLENECK_STAGE, 0.0).unwrap();
        assert_eq!(s.admission_enabled, Some(true));
        assert_eq!(s.admission_rate, Some(5.0));
        assert_eq!(s.target_ms, Some(200.0));
        assert_eq!(s.quality, None);
        assert!(s.classes.is_empty());
    }

    #[test]
    fn class_rates_split_cumulative_counts_per_interval() {
        let s = vec![
            sample(0.0, &[(0, 10, 0)]),
            // Class 1 appears; class 0 gets 20 admitted and 20 rejected in 2 s.
            sample(2.0, &[(0, 30, 20), (1, 5, 0)]),
            sample(3.0, &[(0, 30, 20), (1, 20, 5)]),
        ];
        let r = class_rates(&s);
        assert_eq!(r.len(), 4);
        assert_eq!(
            r[0],
            ClassRate {
                t: 2.0,
                class: 0,
                admitted_per_s: 10.0,
                rejected_per_s: 10.0,
                reject_fraction: Some(0.5)
            }
        );
        assert_eq!((r[1].class, r[1].admitted_per_s), (1, 2.5));
        assert_eq!(r[2].reject_fraction, None, "no offers in the interval");
        assert_eq!(r[3].reject_fraction, Some(0.25));
        // A restarted server (counters went back) yields nothing for that interval.
        let back = vec![sample(0.0, &[(0, 10, 5)]), sample(1.0, &[(0, 3, 0)])];
        assert!(class_rates(&back).is_empty());
    }

    #[test]
    fn class_totals_take_the_window_difference() {
        let s = vec![
            sample(0.5, &[(0, 10, 0)]),
            sample(1.5, &[(0, 20, 5), (1, 4, 0)]),
            sample(2.5, &[(0, 25, 25), (1, 14, 1)]),
            sample(3.5, &[(0, 30, 45), (1, 20, 1)]),
        ];
        assert_eq!(class_totals(&s, 0, 1.5, 3.5), (10, 40));
        assert_eq!(class_totals(&s, 1, 1.0, 2.9), (14, 1));
        assert_eq!(class_totals(&s, 1, 0.0, 0.1), (0, 0));
    }
}
