//! Deterministic simulation: the ledger on the fault-injecting memory backend, checked after
//! every step against a `Vec` model of what must be in the log.
//!
//! Writes fail before anything is written, syncs fail after a random prefix became durable,
//! acknowledgements are lost after everything became durable, and the process "crashes" at
//! random. Whatever happens, every acknowledged event is in the log, nothing else is except
//! whole commits of appends whose outcome was unknown, idempotent retries return what was
//! first written, and the chain verifies. proptest prints the failing seed and steps.

use std::collections::HashMap;
use std::sync::Arc;

use ledger::storage::memory::{Faults, MemoryStorage};
use ledger::{AppendError, Digest, ExpectedVersion, Ledger, Receipt};
use proptest::prelude::*;

use super::{keyed, options, request};

#[derive(Debug, Clone)]
enum Step {
    Append {
        stream: u8,
        /// 0: any version; 1: the right version; 2: a stale one.
        expect: u8,
        events: u8,
        key: Option<u8>,
        variant: u8,
    },
    Crash,
    Verify,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => (0u8..4, 0u8..3, 1u8..4, proptest::option::of(0u8..8), 0u8..2).prop_map(
            |(stream, expect, events, key, variant)| Step::Append { stream, expect, events, key, variant }
        ),
        1 => Just(Step::Crash),
        1 => Just(Step::Verify),
    ]
}

/// What the model knows: the events that must be in the log, in order, by hash, and per key
/// the payload it was first used with and the receipt it got.
#[derive(Default)]
struct Model {
    hashes: Vec<Digest>,
    streams: Vec<String>,
    versions: HashMap<String, u64>,
    keys: HashMap<String, (Vec<u8>, Option<Receipt>)>,
}

struct Sim {
    storage: Arc<MemoryStorage>,
    ledger: Ledger,
    model: Model,
    seed: u64,
}

impl Sim {
    fn new(seed: u64, faults: Faults) -> Sim {
        let storage = Arc::new(MemoryStorage::new(faults, seed));
        let ledger = Ledger::with_storage(storage.clone(), options(seed));
        Sim {
            storage,
            ledger,
            model: Model::default(),
            seed,
        }
    }

    /// A power cut and a restart, then the log is checked against the model. `unknown` is the
    /// append whose outcome was not known when the crash came: it may be there, whole, or not.
    fn crash(&mut self, unknown: Option<(String, u64, Option<String>, Vec<u8>)>) {
        self.ledger.shutdown();
        self.storage = Arc::new(self.storage.crash());
        self.ledger = Ledger::with_storage(self.storage.clone(), options(self.seed ^ 0x5eed));
        let log = self.ledger.read_range(0, usize::MAX).unwrap();
        let known = self.model.hashes.len();
        assert!(
            log.len() >= known,
            "acknowledged events were lost: {} < {known}",
            log.len()
        );
        for (i, hash) in self.model.hashes.iter().enumerate() {
            assert_eq!(log[i].hash, *hash, "acknowledged event {i} changed");
        }
        let extra = &log[known..];
        if let Some((stream, count, key, payload)) = unknown {
            assert!(
                extra.is_empty() || extra.len() as u64 == count,
                "a commit of {count} events left {} behind: not all or nothing",
                extra.len()
            );
            if !extra.is_empty() {
                for e in extra {
                    assert_eq!(e.stream, stream);
                    self.model.hashes.push(e.hash);
                    self.model.streams.push(e.stream.clone());
                }
                *self.model.versions.entry(stream).or_default() += count;
                if let Some(key) = key {
                    self.model.keys.insert(key, (payload, None));
                }
            }
        } else {
            assert!(extra.is_empty(), "events appeared that nobody appended");
        }
        assert!(self.ledger.verify_from_scratch(&mut |_, _| {}).is_intact());
    }

    fn step(&mut self, step: &Step) {
        match *step {
            Step::Crash => self.crash(None),
            Step::Verify => {
                let report = self.ledger.verify();
                assert!(report.is_intact(), "{report:?}");
                assert_eq!(report.size, self.model.hashes.len() as u64);
            }
            Step::Append {
                stream,
                expect,
                events,
                key,
                variant,
            } => {
                let stream = format!("stream-{stream}");
                let current = self.model.versions.get(&stream).copied().unwrap_or(0);
                let expected = match expect {
                    0 => ExpectedVersion::Any,
                    1 => ExpectedVersion::Exact(current),
                    _ => ExpectedVersion::Exact(current + 1),
                };
                let payload = vec![variant; 8];
                let payloads: Vec<&[u8]> = (0..events).map(|_| payload.as_slice()).collect();
                let mut req = request(&stream, expected, &payloads);
                let key = key.map(|k| format!("key-{k}"));
                if let Some(k) = &key {
                    // The fingerprint covers stream and payloads, so the same key with another
                    // stream or variant is another command.
                    req = keyed(req, k);
                }
                let fingerprint_payload = [stream.as_bytes(), &payload, &[events]].concat();
                let prior = key.as_ref().and_then(|k| self.model.keys.get(k).cloned());
                match self.ledger.append(req) {
                    Ok(receipt) => {
                        if let Some((first_payload, first_receipt)) = prior {
                            assert_eq!(
                                first_payload, fingerprint_payload,
                                "a different command was replayed"
                            );
                            assert!(receipt.replayed);
                            if let Some(first) = first_receipt {
                                assert_eq!(receipt.events, first.events);
                            }
                            return;
                        }
                        assert!(!receipt.replayed);
                        assert!(expect != 2, "a stale version was accepted");
                        assert_eq!(receipt.stream_version, current + u64::from(events));
                        for (i, e) in receipt.events.iter().enumerate() {
                            assert_eq!(
                                e.seq,
                                (self.model.hashes.len()) as u64,
                                "event {i} out of place"
                            );
                            self.model.hashes.push(e.hash);
                            self.model.streams.push(stream.clone());
                        }
                        self.model.versions.insert(stream, receipt.stream_version);
                        if let Some(k) = key {
                            self.model
                                .keys
                                .insert(k, (fingerprint_payload, Some(receipt)));
                        }
                    }
                    Err(AppendError::VersionConflict {
                        current: reported, ..
                    }) => {
                        assert!(
                            prior.is_none(),
                            "the key must be checked before the version"
                        );
                        assert_eq!(reported, current);
                        assert!(expect == 2);
                    }
                    Err(AppendError::IdempotencyKeyReused { .. }) => {
                        let (first_payload, _) = prior.expect("reuse refused for an unused key");
                        assert_ne!(first_payload, fingerprint_payload);
                    }
                    Err(AppendError::Storage(_)) => {
                        let count = if prior.is_some() {
                            0
                        } else {
                            u64::from(events)
                        };
                        let unknown = (count > 0 && expect != 2).then_some((
                            stream,
                            count,
                            key,
                            fingerprint_payload,
                        ));
                        self.crash(unknown);
                    }
                    Err(other) => panic!("unexpected refusal: {other:?}"),
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn the_log_matches_its_model_under_faults(seed in any::<u64>(), steps in proptest::collection::vec(step(), 1..80)) {
        let mut sim = Sim::new(seed, Faults {
            write_fails_per_mille: 40,
            sync_fails_per_mille: 40,
            ack_lost_per_mille: 40,
        });
        for step in &steps {
            sim.step(step);
        }
        sim.crash(None);
    }

    #[test]
    fn the_log_matches_its_model_without_faults(seed in any::<u64>(), steps in proptest::collection::vec(step(), 1..80)) {
        let mut sim = Sim::new(seed, Faults::default());
        for step in &steps {
            sim.step(step);
        }
        let log = sim.ledger.read_range(0, usize::MAX).unwrap();
        prop_assert_eq!(log.iter().map(|e| e.hash).collect::<Vec<_>>(), sim.model.hashes.clone());
        for (e, stream) in log.iter().zip(&sim.model.streams) {
            prop_assert_eq!(&e.stream, stream);
        }
    }
}
