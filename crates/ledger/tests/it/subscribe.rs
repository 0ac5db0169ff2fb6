//! Subscriptions deliver every event, in order, to live readers, slow ones included.

use std::sync::Arc;

use ledger::storage::memory::{Faults, MemoryStorage};
use ledger::{ExpectedVersion, Ledger, LedgerOptions, Limits};

use super::{open, options, request};

#[test]
fn a_subscriber_gets_the_past_then_the_present_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = open(dir.path());
    for i in 0..5u8 {
        ledger
            .append(request("t", ExpectedVersion::Any, &[&[i]]))
            .unwrap();
    }
    let mut sub = ledger.subscribe(2);
    let writer = {
        let ledger = ledger.clone();
        std::thread::spawn(move || {
            for i in 5..50u8 {
                ledger
                    .append(request("u", ExpectedVersion::Any, &[&[i]]))
                    .unwrap();
            }
        })
    };
    let mut seen = Vec::new();
    while seen.len() < 48 {
        seen.push(sub.next_blocking().unwrap().seq);
    }
    writer.join().unwrap();
    assert_eq!(seen, (2..50).collect::<Vec<_>>());
    assert!(sub.try_next().unwrap().is_none());
}

#[test]
fn a_slow_subscriber_catches_up_from_storage_and_misses_nothing() {
    // A live buffer of 4 events, and a reader that waits until 300 were appended.
    let storage = Arc::new(MemoryStorage::new(Faults::default(), 9));
    let ledger = Ledger::with_storage(
        storage,
        LedgerOptions {
            limits: Limits {
                subscription_buffer_events: 4,
                ..Limits::default()
            },
            ..options(9)
        },
    );
    let mut sub = ledger.subscribe(0);
    for i in 0..300u32 {
        ledger
            .append(request("t", ExpectedVersion::Any, &[&i.to_le_bytes()]))
            .unwrap();
    }
    let mut seen = Vec::new();
    while let Some(event) = sub.try_next().unwrap() {
        seen.push(event.seq);
    }
    assert_eq!(seen, (0..300).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_subscriber_follows_async_appends() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = open(dir.path());
    let mut sub = ledger.subscribe(0);
    let writer = {
        let ledger = ledger.clone();
        tokio::spawn(async move {
            for i in 0..100u8 {
                ledger
                    .append_async(request("t", ExpectedVersion::Exact(u64::from(i)), &[&[i]]))
                    .await
                    .unwrap();
            }
        })
    };
    for expected in 0..100u64 {
        let event = tokio::time::timeout(std::time::Duration::from_secs(10), sub.next())
            .await
            .expect("an event arrives")
            .unwrap();
        assert_eq!(event.seq, expected);
        assert_eq!(event.stream_version, expected + 1);
    }
    writer.await.unwrap();
}
