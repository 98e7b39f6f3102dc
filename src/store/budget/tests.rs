use std::sync::Arc;
use std::time::{Duration, Instant};

use super::aimd::Aimd;
use super::{Budget, Class, Limits};

fn limits() -> Limits {
    Limits::default()
}

/// Whether `f` is still waiting after the runtime had a chance to run it.
async fn pending<F: std::future::Future + Unpin>(f: &mut F) -> bool {
    tokio::time::timeout(Duration::from_millis(50), f)
        .await
        .is_err()
}

#[tokio::test]
async fn a_waiting_read_goes_before_lower_classes_that_came_first() {
    let b = Budget::new(Limits {
        concurrency: Some(1),
        ..limits()
    });
    let first = b.acquire(Class::Background, 0).await;
    let mut warm = Box::pin(b.acquire(Class::Background, 0));
    let mut ahead = Box::pin(b.acquire(Class::ReadAhead, 0));
    assert!(pending(&mut warm).await && pending(&mut ahead).await);
    let mut read = Box::pin(b.acquire(Class::Read, 0));
    assert!(pending(&mut read).await, "the one slot is taken");
    drop(first);
    let read = read.await;
    assert!(pending(&mut warm).await && pending(&mut ahead).await);
    drop(read);
    let ahead = ahead.await;
    assert!(pending(&mut warm).await, "read-ahead before a warm");
    drop(ahead);
    warm.await;
    let m = &b.metrics;
    let l = super::BudgetMetrics::label(Class::Background);
    assert_eq!(m.requests.get_or_create(&l).get(), 2);
    assert_eq!(m.waits.get_or_create(&l).get(), 1);
}

#[tokio::test]
async fn lower_classes_leave_room_for_reads() {
    let b = Budget::new(Limits {
        concurrency: Some(4),
        ..limits()
    });
    let mut held = vec![];
    for _ in 0..2 {
        held.push(b.acquire(Class::Background, 0).await);
    }
    let mut third = Box::pin(b.acquire(Class::Background, 0));
    assert!(
        pending(&mut third).await,
        "a warm uses half the concurrency"
    );
    drop(third);
    held.push(b.acquire(Class::ReadAhead, 0).await);
    let mut more = Box::pin(b.acquire(Class::ReadAhead, 0));
    assert!(pending(&mut more).await, "read-ahead uses three quarters");
    drop(more);
    held.push(b.acquire(Class::Read, 0).await);
}

#[tokio::test]
async fn a_request_that_gives_up_leaves_the_queue() {
    let b = Budget::new(Limits {
        concurrency: Some(1),
        ..limits()
    });
    let first = b.acquire(Class::Read, 0).await;
    let mut gives_up = Box::pin(b.acquire(Class::Read, 0));
    assert!(pending(&mut gives_up).await);
    let mut next = Box::pin(b.acquire(Class::Read, 0));
    drop(gives_up);
    drop(first);
    assert!(
        tokio::time::timeout(Duration::from_secs(10), &mut next)
            .await
            .is_ok(),
        "the ticket of a request no longer waiting blocked the queue"
    );
}

#[tokio::test]
async fn bytes_go_no_faster_than_the_budget() {
    let rate = 20 << 20;
    let b = Budget::new(Limits {
        bytes_per_second: Some(rate),
        ..limits()
    });
    let t = Instant::now();
    let (n, each) = (24u64, 256u64 << 10);
    for _ in 0..n {
        drop(b.acquire(Class::Read, each).await);
    }
    // The bucket starts full (a tenth of a second) and the last request may
    // take it into debt: everything past that is paid for in time.
    let free = rate as f64 * 0.1 + each as f64;
    let least = ((n * each) as f64 - free) / rate as f64;
    assert!(
        t.elapsed().as_secs_f64() >= least,
        "{n} x {each} bytes in {:?}, at {rate} bytes/s needs {least} s",
        t.elapsed()
    );
}

#[tokio::test]
async fn requests_go_no_faster_than_the_budget() {
    let b = Budget::new(Limits {
        requests_per_second: Some(100.0),
        ..limits()
    });
    let t = Instant::now();
    for _ in 0..50 {
        drop(b.acquire(Class::Read, 0).await);
    }
    // A tenth of a second's worth goes at once; the other 40 at 100 a second.
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(395), "{took:?}");
}

#[test]
fn a_throttle_sets_the_rate_under_what_the_origin_answered() {
    let mut a = Aimd::new();
    let t0 = Instant::now();
    for i in 0..20 {
        a.succeeded(t0 + Duration::from_millis(i));
    }
    for _ in 0..19 {
        a.throttled(t0 + Duration::from_millis(20), 16);
    }
    assert_eq!(a.window, Some(8.0));
    assert_eq!(a.rate, Some(18.0), "nine tenths of the 20 answered");
    for _ in 0..100 {
        a.succeeded(t0 + Duration::from_millis(30));
    }
    assert_eq!(a.rate, Some(18.0), "a decrease is tried before growing");
    for _ in 0..100 {
        a.succeeded(t0 + Duration::from_secs(3));
    }
    assert!(a.window.unwrap() > 10.0 && a.rate.unwrap() >= 27.0);
}

/// A simulated origin that answers at most `cap` requests a second, and
/// throttles a further share `random` of all requests, against a sender with
/// endless demand. Returns the requests sent in each second.
fn simulate(cap: usize, random: f64, seconds: u32) -> Vec<usize> {
    let mut a = Aimd::new();
    let t0 = Instant::now();
    let step = Duration::from_millis(1);
    let mut answered: std::collections::VecDeque<Instant> = Default::default();
    let mut credit = 0.0;
    let mut sent = vec![0; seconds as usize];
    let mut rng = 12345u64;
    for ms in 0..seconds * 1000 {
        let now = t0 + step * ms;
        // Unbounded at first: a burst of 10 a millisecond.
        credit += a.rate.map_or(10.0, |r| r / 1000.0);
        while credit >= 1.0 {
            credit -= 1.0;
            sent[(ms / 1000) as usize] += 1;
            while answered
                .front()
                .is_some_and(|t| now.duration_since(*t) >= Duration::from_secs(1))
            {
                answered.pop_front();
            }
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let roll = (rng >> 33) as f64 / (1u64 << 31) as f64;
            if answered.len() >= cap || roll < random {
                a.throttled(now, 4);
            } else {
                answered.push_back(now);
                a.succeeded(now);
            }
        }
    }
    sent
}

#[test]
fn a_rate_bound_origin_is_asked_about_its_rate_within_seconds() {
    let sent = simulate(200, 0.0, 30);
    println!("{sent:?}");
    let settled = &sent[10..];
    let mean = settled.iter().sum::<usize>() as f64 / settled.len() as f64;
    assert!(
        (150.0..=200.0).contains(&mean),
        "asked {mean} a second on average of an origin answering 200: {sent:?}"
    );
    assert!(
        settled.iter().all(|&s| s <= 220),
        "a second over 1.1x the origin's rate: {sent:?}"
    );
}

#[test]
fn a_rate_bound_origin_that_also_throttles_at_random_is_asked_about_its_rate() {
    let sent = simulate(200, 0.3, 40);
    println!("{sent:?}");
    let settled = &sent[20..];
    let mean = settled.iter().sum::<usize>() as f64 / settled.len() as f64;
    // It answers at most 200 a second, 70% of what it is asked: anything from
    // 200 to about 290 a second keeps it answering all it will.
    assert!(
        (180.0..=320.0).contains(&mean),
        "asked {mean} a second on average: {sent:?}"
    );
}

#[test]
fn random_throttling_does_not_starve_the_sender() {
    let sent = simulate(usize::MAX, 0.6, 20);
    println!("{sent:?}");
    let last = *sent.last().unwrap();
    assert!(
        last >= 1000,
        "a share throttled whatever the rate shrank the sender to {last} a second: {sent:?}"
    );
}

#[tokio::test]
async fn throttling_bounds_an_unlimited_budget_and_is_counted() {
    let b = Budget::new(limits());
    for _ in 0..20 {
        b.succeeded();
    }
    assert_eq!(b.metrics.window.get(), 0.0, "nothing bounded yet");
    let held: Vec<_> = {
        let mut v = vec![];
        for _ in 0..8 {
            v.push(b.acquire(Class::Read, 0).await);
        }
        v
    };
    b.throttled();
    assert_eq!(b.metrics.throttles.get(), 1);
    assert_eq!(b.metrics.decreases.get(), 1);
    assert_eq!(b.metrics.window.get(), 4.0, "half the 8 out");
    assert_eq!(b.metrics.rate.get(), 18.0, "nine tenths of the 20 answered");
    drop(held);
    assert_eq!(Arc::strong_count(&b), 1, "permits released");
}
