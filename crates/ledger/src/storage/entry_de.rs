//! How an entry of the checkpoint log is read.
//!
//! An entry is a JSON object whose `entry` field names its kind, the rest being the fields of
//! that kind. serde's derived reader for such an enum buffers every field of the object before
//! it reads the kind, a copy of each string and hex field of every entry; an open or a
//! verification reads every entry of the log. The log writes `entry` first, so when it is first
//! the rest of the object is read straight into the kind's type. An object with its fields in
//! another order (written by another program) is read whole first, as the derived reader
//! would: on every object the two agree (`tests::read_as_the_derived_reader_does`). The derived
//! reader also took an array whose first element is the kind, which no writer produces and the
//! format does not describe; that is refused.
//!
//! An entry holds exactly the fields of its kind (`docs/ledger-format.md`, *The checkpoint log*;
//! a bundle's checkpoint log is read by this same reader): a field no kind has is refused, for a
//! key introduced as for the signed kinds. No release has written any other field.

use std::fmt;

use ledger_proof::{Checkpoint, Cosignature, KeyRotation, PublicKey, RecoveryStatement, Timestamp};
use serde::de::value::MapAccessDeserializer;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, de::Error as _};

use super::CheckpointEntry;

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum Kind {
    KeyIntroduced,
    Checkpoint,
    Rotation,
    Recovery,
    Cosignature,
}

/// The fields of a `key_introduced` entry (the enum's only variant with fields of its own).
/// Other fields are refused, as the other kinds refuse them; `entry` is named only to refuse it
/// a second time.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyIntroduced {
    public_key: PublicKey,
    tree_size: u64,
    time: Timestamp,
    reason: String,
    origin: String,
    #[serde(default)]
    entry: Option<IgnoredAny>,
}

impl From<KeyIntroduced> for CheckpointEntry {
    fn from(k: KeyIntroduced) -> CheckpointEntry {
        CheckpointEntry::KeyIntroduced {
            public_key: k.public_key,
            tree_size: k.tree_size,
            time: k.time,
            reason: k.reason,
            origin: k.origin,
        }
    }
}

/// The entry of kind `kind` from the rest of its object.
fn entry_of<'de, D: Deserializer<'de>>(kind: Kind, rest: D) -> Result<CheckpointEntry, D::Error> {
    Ok(match kind {
        Kind::KeyIntroduced => {
            let k = KeyIntroduced::deserialize(rest)?;
            if k.entry.is_some() {
                return Err(D::Error::duplicate_field("entry"));
            }
            k.into()
        }
        Kind::Checkpoint => CheckpointEntry::Checkpoint(Checkpoint::deserialize(rest)?),
        Kind::Rotation => CheckpointEntry::Rotation(KeyRotation::deserialize(rest)?),
        Kind::Recovery => CheckpointEntry::Recovery(RecoveryStatement::deserialize(rest)?),
        Kind::Cosignature => CheckpointEntry::Cosignature(Cosignature::deserialize(rest)?),
    })
}

struct EntryVisitor;

impl<'de> Visitor<'de> for EntryVisitor {
    type Value = CheckpointEntry;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a checkpoint log entry: an object naming its kind in `entry`")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<CheckpointEntry, A::Error> {
        let first: Option<String> = map.next_key()?;
        if first.as_deref() == Some("entry") {
            let kind: Kind = map.next_value()?;
            return entry_of(kind, MapAccessDeserializer::new(map));
        }
        let mut object = serde_json::Map::new();
        let mut next = first;
        while let Some(key) = next {
            let value: serde_json::Value = map.next_value()?;
            if object.insert(key.clone(), value).is_some() {
                return Err(A::Error::custom(format_args!("duplicate field `{key}`")));
            }
            next = map.next_key()?;
        }
        let kind = object
            .remove("entry")
            .ok_or_else(|| A::Error::missing_field("entry"))?;
        let kind = Kind::deserialize(kind).map_err(A::Error::custom)?;
        entry_of(kind, serde_json::Value::Object(object)).map_err(A::Error::custom)
    }
}

impl<'de> Deserialize<'de> for CheckpointEntry {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(EntryVisitor)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ledger_proof::{RecoveryAction, RecoveryFacts, SigningKey};
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::*;
    use crate::storage::memory::{Faults, MemoryStorage};
    use crate::{AppendRequest, ExpectedVersion, Ledger, LedgerOptions, NewEvent};

    /// Entries of every kind, as a ledger writes them: a key, checkpoints, a rotation,
    /// cosignatures, and a recovery statement signed by hand. Written once for every case.
    fn entries() -> &'static [CheckpointEntry] {
        static ENTRIES: std::sync::LazyLock<Vec<CheckpointEntry>> =
            std::sync::LazyLock::new(write_entries);
        &ENTRIES
    }

    fn write_entries() -> Vec<CheckpointEntry> {
        let storage = Arc::new(MemoryStorage::new(Faults::default(), 3));
        let ledger = Ledger::with_storage(
            storage,
            LedgerOptions {
                checkpoint_interval: None,
                ..LedgerOptions::default()
            },
        );
        let witness = SigningKey::from_secret_bytes(&[9; 32]);
        for round in 0..3u8 {
            ledger
                .append(AppendRequest {
                    stream: format!("s{round}"),
                    expected: ExpectedVersion::Any,
                    actor: "tester".into(),
                    events: vec![NewEvent {
                        kind: "noted".into(),
                        payload: vec![round],
                        causation: Vec::new(),
                    }],
                    idempotency: None,
                    content: Vec::new(),
                })
                .unwrap();
            let checkpoint = ledger.checkpoint().unwrap();
            ledger
                .record_cosignature(
                    ledger_proof::Cosignature::sign(&witness, "w", &checkpoint, 1_750_000_000)
                        .unwrap(),
                )
                .unwrap();
            if round == 1 {
                ledger.rotate_key().unwrap();
            }
        }
        let mut entries = ledger.checkpoint_entries().unwrap();
        let key = SigningKey::from_secret_bytes(&[5; 32]);
        let recovery = RecoveryFacts {
            action: RecoveryAction::LossAccepted,
            tree_size: 2,
            root: ledger_proof::Digest([7; 32]),
            time: ledger_proof::Timestamp::from_unix_seconds(1_750_000_000).unwrap(),
            claimed_size: 3,
            disowned_entries: vec![4, 5],
            detail: "the log held 3".into(),
            reason: "a disk was replaced".into(),
        };
        entries.push(CheckpointEntry::Recovery(recovery.sign(&key).unwrap()));
        entries
    }

    /// What the two readers make of `text`: equal entries, or both a refusal.
    fn agree(text: &str) -> Result<(), String> {
        let ours = serde_json::from_str::<CheckpointEntry>(text).ok();
        let theirs = serde_json::from_str::<derived::Entry>(text)
            .ok()
            .map(CheckpointEntry::from);
        if ours == theirs {
            Ok(())
        } else {
            Err(format!("{text}\nours: {ours:?}\nderived: {theirs:?}"))
        }
    }

    /// `object`'s fields in the order `order` picks, with `entry` first or not.
    fn reordered(object: &serde_json::Map<String, Value>, order: &[usize]) -> String {
        let fields: Vec<(&String, &Value)> = object.iter().collect();
        let mut picked: Vec<usize> = (0..fields.len()).collect();
        let n = picked.len();
        for (i, &j) in order.iter().enumerate() {
            picked.swap(i % n, j % n);
        }
        let body: Vec<String> = picked
            .into_iter()
            .map(|i| format!("{}:{}", Value::from(fields[i].0.as_str()), fields[i].1))
            .collect();
        format!("{{{}}}", body.join(","))
    }

    #[test]
    fn every_kind_is_read_back_as_written_by_both_readers() {
        let entries = entries();
        for kind in [
            "key_introduced",
            "checkpoint",
            "rotation",
            "recovery",
            "cosignature",
        ] {
            assert!(
                entries
                    .iter()
                    .any(|e| serde_json::to_value(e).unwrap()["entry"] == kind),
                "no {kind} entry"
            );
        }
        for entry in entries {
            let text = serde_json::to_string(entry).unwrap();
            assert!(text.starts_with(r#"{"entry":"#), "{text}");
            assert_eq!(
                &serde_json::from_str::<CheckpointEntry>(&text).unwrap(),
                entry
            );
            agree(&text).unwrap();
            // Every field moved first, and every field given twice, the kind included.
            let Value::Object(object) = serde_json::to_value(entry).unwrap() else {
                panic!("an entry is an object");
            };
            for (i, (name, value)) in object.iter().enumerate() {
                let first = reordered(&object, &[i]);
                assert!(first.starts_with(&format!("{{\"{name}\"")), "{first}");
                agree(&first).unwrap();
                let field = format!("{}:{value}", Value::from(name.as_str()));
                agree(&format!("{{{field},{}", &text[1..])).unwrap();
                agree(&format!("{},{field}}}", &text[..text.len() - 1])).unwrap();
            }
        }
    }

    proptest! {
        #[test]
        fn read_as_the_derived_reader_does(
            pick in any::<prop::sample::Index>(),
            order in prop::collection::vec(any::<usize>(), 0..12),
            change in 0..8u8,
            field in any::<prop::sample::Index>(),
        ) {
            let entry = pick.get(entries());
            let Value::Object(mut object) = serde_json::to_value(entry).unwrap() else {
                panic!("an entry is an object");
            };
            let names: Vec<String> = object.keys().cloned().collect();
            let name = field.get(&names).clone();
            match change {
                // As written, in another order.
                0 | 1 => {}
                // A field missing, unknown, of the wrong type, or a kind that is not one.
                2 => { object.remove(&name); }
                3 => { object.insert("extra".into(), json!(1)); }
                4 => { object.insert(name.clone(), json!([1])); }
                5 => { object.insert("entry".into(), json!("checkpoints")); }
                6 => { object.insert("entry".into(), json!(3)); }
                _ => {}
            }
            let mut text = reordered(&object, &order);
            if change == 7 {
                // A field twice (the kind, or another).
                if let Some(value) = object.get(&name) {
                    text.insert_str(1, &format!("{}:{},", Value::from(name.as_str()), value));
                }
            }
            agree(&text).map_err(TestCaseError::fail)?;
        }
    }
}

/// For tests: the reader serde derives for the same enum (a `key_introduced` entry's fields
/// read into the same struct, which is how the derived reader takes a struct variant's).
#[cfg(test)]
mod derived {
    use super::*;

    #[derive(Deserialize)]
    #[serde(tag = "entry", rename_all = "snake_case")]
    pub(super) enum Entry {
        KeyIntroduced(KeyIntroduced),
        Checkpoint(Checkpoint),
        Rotation(KeyRotation),
        Recovery(RecoveryStatement),
        Cosignature(Cosignature),
    }

    impl From<Entry> for CheckpointEntry {
        fn from(e: Entry) -> CheckpointEntry {
            match e {
                Entry::KeyIntroduced(k) => k.into(),
                Entry::Checkpoint(c) => CheckpointEntry::Checkpoint(c),
                Entry::Rotation(r) => CheckpointEntry::Rotation(r),
                Entry::Recovery(r) => CheckpointEntry::Recovery(r),
                Entry::Cosignature(c) => CheckpointEntry::Cosignature(c),
            }
        }
    }
}
