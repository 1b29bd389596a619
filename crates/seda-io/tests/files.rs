//! The file helper stage: ordering, completions, residency, overload.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use seda::control::ThreadPoolConfig;
use seda::{Batch, Color, Context, EnqueueError, Meta, Runtime};
use seda_io::{FileConfig, FileHelper, FileOp, FileReply, Refusal, read_resident};

fn pool(min: usize, max: usize) -> FileConfig {
    FileConfig::default().with_pool(
        ThreadPoolConfig::default()
            .with_min_threads(min)
            .with_max_threads(max)
            .with_queue_threshold(1)
            .with_idle_timeout(Duration::from_secs(1))
            .with_interval(Duration::from_millis(50)),
    )
}

fn write_files(dir: &tempfile::TempDir, n: usize, len: usize) -> Vec<PathBuf> {
    (0..n)
        .map(|i| {
            let p = dir.path().join(format!("f{i}"));
            let mut f = std::fs::File::create(&p).unwrap();
            f.write_all(
                &(0..len)
                    .map(|j| ((i * 7 + j) % 251) as u8)
                    .collect::<Vec<_>>(),
            )
            .unwrap();
            p
        })
        .collect()
}

fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    cond()
}

#[test]
fn operations_on_one_file_complete_in_submission_order() {
    let rt = Runtime::builder().build();
    let helper = FileHelper::start(&rt, pool(4, 4)).unwrap();
    rt.start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let paths = write_files(&dir, 4, 64 * 1024);
    // Files 0-1 through path operations, files 2-3 through reads of an open file.
    let open: Vec<Arc<std::fs::File>> = paths
        .iter()
        .map(|p| Arc::new(std::fs::File::open(p).unwrap()))
        .collect();
    let order: Arc<Mutex<Vec<(usize, usize)>>> = Arc::default();
    let inside = Arc::new(AtomicUsize::new(0));
    let max_inside = Arc::new(AtomicUsize::new(0));
    const PER_FILE: usize = 100;
    for seq in 0..PER_FILE {
        for (f, path) in paths.iter().enumerate() {
            let op = match (f, seq % 3) {
                (0 | 1, 0) => FileOp::Stat { path: path.clone() },
                (0 | 1, 1) => FileOp::ReadAll {
                    path: path.clone(),
                    max_len: 1 << 20,
                },
                (0 | 1, _) => FileOp::Open { path: path.clone() },
                _ => FileOp::Read {
                    file: open[f].clone(),
                    offset: (seq * 100) as u64,
                    len: 100,
                },
            };
            let (order, inside, max_inside) = (order.clone(), inside.clone(), max_inside.clone());
            helper
                .submit(op, move |r| {
                    assert!(r.is_ok(), "{r:?}");
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    max_inside.fetch_max(now, Ordering::SeqCst);
                    // Uneven service times: without colors, later operations on the
                    // same file would overtake earlier ones on the other workers.
                    std::thread::sleep(Duration::from_micros(fastrand::u64(0..300)));
                    order.lock().push((f, seq));
                    inside.fetch_sub(1, Ordering::SeqCst);
                })
                .unwrap();
        }
    }
    assert!(wait_for(Duration::from_secs(8), || order.lock().len()
        == 4 * PER_FILE));
    let order = order.lock().clone();
    for f in 0..4 {
        let seqs: Vec<usize> = order
            .iter()
            .filter(|(g, _)| *g == f)
            .map(|(_, s)| *s)
            .collect();
        assert_eq!(
            seqs,
            (0..PER_FILE).collect::<Vec<_>>(),
            "file {f} completed out of order"
        );
    }
    assert!(
        max_inside.load(Ordering::SeqCst) > 1,
        "different files never ran concurrently"
    );
    assert_eq!(helper.stats().completed, 4 * PER_FILE as u64);
    assert!(rt.shutdown(Duration::from_secs(5)).drained);
}

#[derive(Debug)]
enum Done {
    Read {
        offset: u64,
        data: Vec<u8>,
        color: Option<Color>,
    },
    Failed(std::io::ErrorKind),
}

#[test]
fn completions_reach_the_callers_sink_in_order_with_the_callers_metadata() {
    let rt = Runtime::builder().build();
    let got: Arc<Mutex<Vec<Done>>> = Arc::default();
    let g = got.clone();
    let collector = rt
        .stage(
            "collector",
            move |batch: Batch<'_, Done>, cx: &Context<'_>| {
                let mut batch = batch;
                while let Some((ev, meta)) = batch.next_with_meta() {
                    let _ = cx;
                    g.lock().push(match ev {
                        Done::Read { offset, data, .. } => Done::Read {
                            offset,
                            data,
                            color: meta.color(),
                        },
                        other => other,
                    });
                }
            },
        )
        .build()
        .unwrap();
    let helper = FileHelper::start(&rt, pool(3, 3)).unwrap();
    rt.start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = write_files(&dir, 1, 100_000).remove(0);
    let file = Arc::new(std::fs::File::open(&path).unwrap());
    let expected = std::fs::read(&path).unwrap();
    for i in 0..100u64 {
        let op = FileOp::Read {
            file: file.clone(),
            offset: i * 1000,
            len: 1000,
        };
        let meta = Meta::new().with_color(Color::new(42));
        helper
            .submit_to_with(
                op,
                meta,
                &collector,
                move |r| match r {
                    Ok(FileReply::Data(data)) => Done::Read {
                        offset: i * 1000,
                        data,
                        color: None,
                    },
                    Ok(other) => panic!("unexpected reply {other:?}"),
                    Err(e) => Done::Failed(e.kind()),
                },
                |refused| panic!("completion refused: {refused}"),
            )
            .unwrap();
    }
    // A missing file is an error completion, not a panic.
    helper
        .submit_to(
            FileOp::Stat {
                path: dir.path().join("missing"),
            },
            &collector,
            |r| match r {
                Err(e) => Done::Failed(e.kind()),
                Ok(_) => Done::Failed(std::io::ErrorKind::Other),
            },
            |refused| panic!("completion refused: {refused}"),
        )
        .unwrap();
    assert!(wait_for(Duration::from_secs(8), || got.lock().len() == 101));
    let got = got.lock();
    let mut next = 0;
    for d in got.iter() {
        match d {
            Done::Read {
                offset,
                data,
                color,
            } => {
                assert_eq!(*offset, next, "reads completed out of order");
                assert_eq!(
                    &data[..],
                    &expected[*offset as usize..*offset as usize + 1000]
                );
                assert_eq!(
                    *color,
                    Some(Color::new(42)),
                    "completion lost the caller's color"
                );
                next += 1000;
            }
            Done::Failed(kind) => assert_eq!(*kind, std::io::ErrorKind::NotFound),
        }
    }
    assert_eq!(next, 100_000);
    let snap = rt.snapshot();
    assert!(
        snap.edges
            .contains(&("file-helper".to_owned(), "collector".to_owned())),
        "{:?}",
        snap.edges
    );
    rt.shutdown(Duration::from_secs(5));
}

#[test]
fn the_residency_check_returns_data_just_written_and_read() {
    let rt = Runtime::builder().build();
    let helper = FileHelper::start(&rt, FileConfig::default()).unwrap();
    rt.start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = write_files(&dir, 1, 200_000).remove(0);
    let (tx, rx) = mpsc::channel();
    helper
        .submit(
            FileOp::ReadAll {
                path: path.clone(),
                max_len: 1 << 20,
            },
            move |r| {
                let _ = tx.send(r);
            },
        )
        .unwrap();
    let Ok(FileReply::Data(via_helper)) = rx.recv_timeout(Duration::from_secs(5)).unwrap() else {
        panic!("ReadAll failed")
    };
    let f = std::fs::File::open(&path).unwrap();
    let resident = read_resident(&f, 0, 200_000).expect("a file just written and read is resident");
    assert_eq!(resident, via_helper);
    assert_eq!(
        read_resident(&f, 150_000, 100_000).unwrap(),
        &via_helper[150_000..]
    );
    rt.shutdown(Duration::from_secs(5));
}

/// Regression: a completion whose sink stayed full for the helper's patience (1 s)
/// was dropped, so the request behind it was never answered. It must come back.
#[test]
fn a_completion_the_sink_will_not_take_is_handed_back_not_dropped() {
    #[derive(Debug)]
    enum Ev {
        Hold,
        Data(Vec<u8>),
    }
    let rt = Runtime::builder().build();
    let (started_tx, started_rx) = mpsc::channel::<()>();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let (started_tx, release_rx) = (Mutex::new(started_tx), Mutex::new(release_rx));
    // A one-slot sink whose only thread is held by the first event.
    let slow = rt
        .stage("slow", move |batch: Batch<'_, Ev>, _cx: &Context<'_>| {
            for ev in batch {
                if let Ev::Hold = ev {
                    let _ = started_tx.lock().send(());
                    let _ = release_rx.lock().recv_timeout(Duration::from_secs(10));
                }
            }
        })
        .capacity(1)
        .fixed_threads(1)
        .batch(1)
        .build()
        .unwrap();
    let helper = FileHelper::start(&rt, pool(1, 1)).unwrap();
    rt.start().unwrap();
    slow.try_enqueue(Ev::Hold).unwrap();
    started_rx.recv_timeout(Duration::from_secs(5)).unwrap();
    slow.try_enqueue(Ev::Hold).unwrap();
    assert!(slow.try_enqueue(Ev::Hold).is_err(), "the sink is full");

    let dir = tempfile::tempdir().unwrap();
    let path = write_files(&dir, 1, 5000).remove(0);
    let expected = std::fs::read(&path).unwrap();
    let (back_tx, back_rx) = mpsc::channel();
    let t0 = Instant::now();
    helper
        .submit_to(
            FileOp::ReadAll {
                path: path.clone(),
                max_len: 1 << 20,
            },
            &slow,
            |r| {
                Ev::Data(r.map_or_else(
                    |_| Vec::new(),
                    |reply| match reply {
                        FileReply::Data(d) => d,
                        _ => Vec::new(),
                    },
                ))
            },
            move |refused| {
                let full = matches!(refused, EnqueueError::Full(_));
                let _ = back_tx.send((full, refused.into_inner(), Instant::now()));
            },
        )
        .unwrap();
    let (full, ev, at) = back_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the completion came back");
    assert!(full, "refused as Full");
    assert!(matches!(&ev, Ev::Data(d) if *d == expected), "{ev:?}");
    assert!(
        at - t0 >= Duration::from_millis(900),
        "the helper kept offering it for its patience first"
    );
    assert_eq!(helper.stats().completions_undelivered, 1);
    release_tx.send(()).unwrap();
    release_tx.send(()).unwrap();

    // A closed sink hands the completion back at once.
    let other = Runtime::builder().build();
    let gone = other
        .stage("gone", |_batch: Batch<'_, Ev>, _cx: &Context<'_>| {})
        .build()
        .unwrap();
    other.start().unwrap();
    other.shutdown(Duration::from_secs(1));
    let (back_tx, back_rx) = mpsc::channel();
    helper
        .submit_to(
            FileOp::Stat { path },
            &gone,
            |_| Ev::Data(Vec::new()),
            move |refused| {
                let _ = back_tx.send(matches!(refused, EnqueueError::Closed(_)));
            },
        )
        .unwrap();
    let closed = back_rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(closed, "refused as Closed");
    // At once: offered once, not again and again for the patience given a full sink
    // (each offer to a closed stage is counted there).
    assert_eq!(
        other.snapshot().stage("gone").map(|s| s.closed),
        Some(1),
        "the completion was offered to the closed stage more than once"
    );
    assert_eq!(helper.stats().completions_undelivered, 2);
    rt.shutdown(Duration::from_secs(5));
}

#[test]
fn overload_hands_the_operation_back_and_drops_nothing() {
    let rt = Runtime::builder().build();
    let cfg = pool(1, 1).with_capacity(4);
    let helper = FileHelper::start(&rt, cfg).unwrap();
    rt.start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = write_files(&dir, 1, 10).remove(0);
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let done = Arc::new(AtomicUsize::new(0));
    let d = done.clone();
    // The first operation holds the only helper thread.
    helper
        .submit(FileOp::Stat { path: path.clone() }, move |_| {
            let _ = release_rx.recv_timeout(Duration::from_secs(5));
            d.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
    assert!(wait_for(Duration::from_secs(2), || helper.queue_len() == 0));
    let mut accepted = 1;
    let refused = loop {
        let d = done.clone();
        let other = dir.path().join(format!("other{accepted}"));
        match helper.submit(
            FileOp::Stat {
                path: other.clone(),
            },
            move |_| {
                d.fetch_add(1, Ordering::SeqCst);
            },
        ) {
            Ok(()) => accepted += 1,
            Err(e) => break (e, other),
        }
        assert!(accepted < 100, "the bounded queue never filled");
    };
    let (err, path_back) = refused;
    assert_eq!(err.reason, Refusal::Full);
    assert!(
        matches!(&err.op, FileOp::Stat { path } if *path == path_back),
        "{:?}",
        err.op
    );
    assert_eq!(accepted, 5);
    release_tx.send(()).unwrap();
    assert!(wait_for(Duration::from_secs(5), || done
        .load(Ordering::SeqCst)
        == accepted));
    assert_eq!(helper.stats().refused, 1);
    rt.shutdown(Duration::from_secs(5));
}

#[test]
fn the_thread_pool_controller_grows_the_helper_under_load() {
    let rt = Runtime::builder()
        .control_interval(Duration::from_millis(20))
        .build();
    let helper = FileHelper::start(&rt, pool(1, 6)).unwrap();
    rt.start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let paths = write_files(&dir, 50, 10);
    let done = Arc::new(AtomicUsize::new(0));
    for p in &paths {
        let d = done.clone();
        helper
            .submit(FileOp::Stat { path: p.clone() }, move |_| {
                // Stands in for a slow disk.
                std::thread::sleep(Duration::from_millis(20));
                d.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap();
    }
    let mut most = 0;
    assert!(wait_for(Duration::from_secs(8), || {
        let s = rt.snapshot();
        let t = s
            .stages
            .iter()
            .find(|s| s.name == "file-helper")
            .map_or(0, |s| s.threads);
        most = most.max(t);
        done.load(Ordering::SeqCst) == paths.len()
    }));
    assert!(most > 1, "the helper pool never grew (max {most} threads)");
    assert!(most <= 6);
    rt.shutdown(Duration::from_secs(5));
}

#[test]
fn oversized_read_all_is_a_typed_error() {
    let rt = Runtime::builder().build();
    let helper = FileHelper::start(&rt, FileConfig::default()).unwrap();
    rt.start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = write_files(&dir, 1, 5000).remove(0);
    let (tx, rx) = mpsc::channel();
    helper
        .submit(
            FileOp::ReadAll {
                path,
                max_len: 4999,
            },
            move |r| {
                let _ = tx.send(r.map(|_| ()).map_err(|e| e.kind()));
            },
        )
        .unwrap();
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(5)).unwrap(),
        Err(std::io::ErrorKind::FileTooLarge)
    );
    rt.shutdown(Duration::from_secs(5));
}
