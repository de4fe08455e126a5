//! The feed on its own: order through refusals, per-request waiting, a closed sink.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use super::*;

/// A sink that refuses while `gate` is shut (and waits in `line` until it opens), writing what
/// it takes to `got`; `closed`: it takes nothing, ever.
#[derive(Clone, Default)]
struct Gated {
    got: Arc<Mutex<Vec<Vec<u8>>>>,
    open: Arc<(Mutex<bool>, Condvar)>,
    /// Refuse every `refuse`th offer even when open (0: never).
    refuse: usize,
    offers: Arc<AtomicUsize>,
    closed: Arc<AtomicBool>,
}

impl Gated {
    fn set_open(&self, open: bool) {
        *lock(&self.open.0) = open;
        self.open.1.notify_all();
    }
}

impl LineSink for Gated {
    fn line(&mut self, line: Vec<u8>) {
        if self.closed.load(Ordering::SeqCst) {
            return;
        }
        let mut open = lock(&self.open.0);
        while !*open {
            open = self.open.1.wait(open).unwrap_or_else(|p| p.into_inner());
        }
        lock(&self.got).push(line);
    }

    fn offer(&mut self, line: Vec<u8>) -> Offer {
        if self.closed.load(Ordering::SeqCst) {
            return Offer::Closed;
        }
        let n = self.offers.fetch_add(1, Ordering::SeqCst) + 1;
        if !*lock(&self.open.0) || (self.refuse > 0 && n.is_multiple_of(self.refuse)) {
            return Offer::Full(line);
        }
        lock(&self.got).push(line);
        Offer::Taken
    }

    fn closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }
}

fn feed(sink: &Gated) -> (Feed, Arc<AtomicU64>) {
    let lost = Arc::new(AtomicU64::new(0));
    let counted = lost.clone();
    let f = Feed::start(
        Box::new(sink.clone()),
        Box::new(move |n| {
            counted.fetch_add(n, Ordering::SeqCst);
        }),
    )
    .expect("feed thread");
    (f, lost)
}

async fn until(what: &str, mut ok: impl FnMut() -> bool) {
    for _ in 0..500 {
        if ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("not within 5 s: {what}");
}

#[test]
fn lines_reach_the_sink_in_the_order_queued_through_refusals() {
    // Four "requests" on four threads queue lines under one lock (the tracker's), which
    // defines the order; the sink refuses every seventh offer, so the feed's thread keeps
    // taking over and handing back.
    let sink = Gated {
        refuse: 7,
        ..Gated::default()
    };
    sink.set_open(true);
    let (f, lost) = feed(&sink);
    let f = Arc::new(f);
    let built = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..4)
        .map(|r| {
            let (f, built) = (f.clone(), built.clone());
            std::thread::spawn(move || {
                let backlog = Backlog::new();
                for i in 0..500 {
                    let line = format!("{r}:{i}").into_bytes();
                    {
                        let mut order = lock(&built);
                        order.push(line.clone());
                        f.push(std::iter::once(line), &backlog);
                    }
                    f.pump();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("thread");
    }
    let want = lock(&built).clone();
    for _ in 0..500 {
        if lock(&sink.got).len() == want.len() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        *lock(&sink.got),
        want,
        "the sink sees the order lines were queued in"
    );
    assert_eq!(f.waiting_bytes(), 0);
    assert_eq!(lost.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_over_its_bound_waits_and_another_does_not() {
    let sink = Gated::default(); // shut: the engine takes nothing
    let (f, _) = feed(&sink);
    let f = Arc::new(f);
    let (a, b) = (Backlog::new(), Backlog::new());
    let big = vec![b'x'; 64 << 10];
    f.push(
        std::iter::repeat_n(big, REQUEST_BACKLOG_BYTES / (64 << 10) + 1),
        &a,
    );
    f.pump();
    f.push(std::iter::once(b"b".to_vec()), &b);
    f.pump();
    assert!(f.must_wait(&a), "A's lines are over the bound");
    assert!(
        !f.must_wait(&b),
        "B's are not, though they queue behind A's"
    );
    let waiting = {
        let (f, a) = (f.clone(), a.clone());
        tokio::spawn(async move { f.ready(&a).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !waiting.is_finished(),
        "A waits while the engine takes nothing"
    );
    sink.set_open(true);
    tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("A goes on once the engine takes its lines")
        .expect("task");
    until("everything taken", || f.waiting_bytes() == 0).await;
    assert_eq!(lock(&sink.got).last().map(Vec::as_slice), Some(&b"b"[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_sink_loses_lines_and_nobody_waits_for_it() {
    let sink = Gated::default();
    sink.closed.store(true, Ordering::SeqCst);
    let (f, lost) = feed(&sink);
    let a = Backlog::new();
    let big = vec![b'x'; 64 << 10];
    f.push(std::iter::repeat_n(big, 8), &a);
    f.pump();
    assert!(!f.must_wait(&a));
    tokio::time::timeout(Duration::from_secs(5), f.ready(&a))
        .await
        .expect("nobody waits for a closed engine");
    assert_eq!(f.lost(), 8);
    assert_eq!(lost.load(Ordering::SeqCst), 8);
    assert!(lock(&sink.got).is_empty());
}

#[test]
fn lines_queued_when_the_proxy_goes_are_still_delivered() {
    let sink = Gated::default();
    let (f, _) = feed(&sink);
    let a = Backlog::new();
    f.push((0..3).map(|i| vec![i]), &a);
    f.pump(); // refused: the feed's thread waits for the sink
    drop(f);
    sink.set_open(true);
    for _ in 0..500 {
        if lock(&sink.got).len() == 3 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(*lock(&sink.got), vec![vec![0], vec![1], vec![2]]);
}
