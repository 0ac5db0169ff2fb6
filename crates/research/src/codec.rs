//! The stored form of an event: a schema version, then the payload in postcard.
//!
//! The ledger keeps the kind beside the bytes, so the bytes hold only the payload and adding an
//! event kind never shifts the encoding of the others. postcard's wire format is specified and
//! stable; the leading version lets a later schema read what an earlier one wrote, by decoding
//! the old shape and upcasting it. Decoding treats the bytes as hostile: it never panics, never
//! allocates more than the input justifies, and refuses trailing bytes so that one payload has
//! exactly one encoding.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::event::{
    AdjudicationAppealed, ConclusionIssued, ConflictResolved, ConflictsAdjudicated,
    DecisionMatrixBuilt, Event, EvidenceAdded, EvidenceRetracted, EvidenceScreened,
    ExplanationRecorded, ExternalToolCalled, SearchRecorded, SubQuestionsExpanded,
    SynthesisRecorded, TaskClosed, TaskOpened,
};

/// The schema version `encode` writes. Version 1 is the first; `decode` reads every version up
/// to this one.
pub const SCHEMA_VERSION: u16 = 1;

/// Why stored bytes could not be read as an event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// Fewer bytes than the version prefix. The record is truncated: treat the log as damaged.
    #[error("event bytes too short for the schema version")]
    TooShort,
    /// A version this build does not know, probably written by a newer one: upgrade to read it.
    #[error("unknown event schema version {version}")]
    UnknownSchemaVersion {
        /// The version found.
        version: u16,
    },
    /// A kind this build does not know: upgrade, or the kind was stored wrongly.
    #[error("unknown event kind `{kind}`")]
    UnknownKind {
        /// The kind given.
        kind: String,
    },
    /// The payload does not decode as its kind: the bytes are damaged or not of that kind.
    #[error("`{kind}` payload is malformed: {reason}")]
    Malformed {
        /// The kind.
        kind: &'static str,
        /// postcard's account of the failure.
        reason: String,
    },
    /// The payload decoded but bytes were left over: the record is not canonical.
    #[error("`{kind}` payload has {count} trailing bytes")]
    TrailingBytes {
        /// The kind.
        kind: &'static str,
        /// How many.
        count: usize,
    },
}

/// Encodes an event for storage: the schema version (two bytes, little endian), then the
/// payload in postcard.
pub fn encode(event: &Event) -> Vec<u8> {
    let mut out = SCHEMA_VERSION.to_le_bytes().to_vec();
    match event {
        Event::TaskOpened(p) => append(&mut out, p),
        Event::SubQuestionsExpanded(p) => append(&mut out, p),
        Event::SearchRecorded(p) => append(&mut out, p),
        Event::EvidenceAdded(p) => append(&mut out, p),
        Event::EvidenceScreened(p) => append(&mut out, p),
        Event::EvidenceRetracted(p) => append(&mut out, p),
        Event::SynthesisRecorded(p) => append(&mut out, p),
        Event::ConflictsAdjudicated(p) => append(&mut out, p),
        Event::ConflictResolved(p) => append(&mut out, p),
        Event::AdjudicationAppealed(p) => append(&mut out, p),
        Event::DecisionMatrixBuilt(p) => append(&mut out, p),
        Event::ConclusionIssued(p) => append(&mut out, p),
        Event::ExplanationRecorded(p) => append(&mut out, p),
        Event::ExternalToolCalled(p) => append(&mut out, p),
        Event::TaskClosed(p) => append(&mut out, p),
    }
    out
}

fn append<T: Serialize>(out: &mut Vec<u8>, payload: &T) {
    // postcard fails only on a full fixed buffer (a Vec grows), a sequence of unknown length
    // (every collection here knows its length) or an error raised by a `Serialize` impl (none of
    // the payload types raises one), so this cannot fail for event payloads.
    let bytes = postcard::to_stdvec(payload);
    debug_assert!(bytes.is_ok(), "event payloads always encode");
    if let Ok(bytes) = bytes {
        out.extend_from_slice(&bytes);
    }
}

/// Decodes stored bytes of the given kind, upcasting older schema versions to the current event.
pub fn decode(kind: &str, bytes: &[u8]) -> Result<Event, DecodeError> {
    let (prefix, body) = match bytes.split_first_chunk::<2>() {
        Some(split) => split,
        None => return Err(DecodeError::TooShort),
    };
    let version = u16::from_le_bytes(*prefix);
    match version {
        1 => decode_v1(kind, body),
        version => Err(DecodeError::UnknownSchemaVersion { version }),
    }
}

/// Version 1, the current schema: payloads decode as they are. When version 2 changes a
/// payload, its v1 shape moves here under a new name and is upcast after decoding.
fn decode_v1(kind: &str, body: &[u8]) -> Result<Event, DecodeError> {
    Ok(match kind {
        "task_opened" => Event::TaskOpened(payload::<TaskOpened>("task_opened", body)?),
        "sub_questions_expanded" => Event::SubQuestionsExpanded(payload::<SubQuestionsExpanded>(
            "sub_questions_expanded",
            body,
        )?),
        "search_recorded" => {
            Event::SearchRecorded(payload::<SearchRecorded>("search_recorded", body)?)
        }
        "evidence_added" => Event::EvidenceAdded(payload::<EvidenceAdded>("evidence_added", body)?),
        "evidence_screened" => {
            Event::EvidenceScreened(payload::<EvidenceScreened>("evidence_screened", body)?)
        }
        "evidence_retracted" => {
            Event::EvidenceRetracted(payload::<EvidenceRetracted>("evidence_retracted", body)?)
        }
        "synthesis_recorded" => {
            Event::SynthesisRecorded(payload::<SynthesisRecorded>("synthesis_recorded", body)?)
        }
        "conflicts_adjudicated" => Event::ConflictsAdjudicated(payload::<ConflictsAdjudicated>(
            "conflicts_adjudicated",
            body,
        )?),
        "conflict_resolved" => {
            Event::ConflictResolved(payload::<ConflictResolved>("conflict_resolved", body)?)
        }
        "adjudication_appealed" => Event::AdjudicationAppealed(payload::<AdjudicationAppealed>(
            "adjudication_appealed",
            body,
        )?),
        "decision_matrix_built" => Event::DecisionMatrixBuilt(payload::<DecisionMatrixBuilt>(
            "decision_matrix_built",
            body,
        )?),
        "conclusion_issued" => {
            Event::ConclusionIssued(payload::<ConclusionIssued>("conclusion_issued", body)?)
        }
        "explanation_recorded" => Event::ExplanationRecorded(payload::<ExplanationRecorded>(
            "explanation_recorded",
            body,
        )?),
        "external_tool_called" => {
            Event::ExternalToolCalled(payload::<ExternalToolCalled>("external_tool_called", body)?)
        }
        "task_closed" => Event::TaskClosed(payload::<TaskClosed>("task_closed", body)?),
        other => {
            return Err(DecodeError::UnknownKind {
                kind: other.chars().take(64).collect(),
            });
        }
    })
}

fn payload<T: DeserializeOwned>(kind: &'static str, body: &[u8]) -> Result<T, DecodeError> {
    let (value, rest) =
        postcard::take_from_bytes::<T>(body).map_err(|e| DecodeError::Malformed {
            kind,
            reason: e.to_string(),
        })?;
    if !rest.is_empty() {
        return Err(DecodeError::TrailingBytes {
            kind,
            count: rest.len(),
        });
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{EVENT_KINDS, TaskClosed};

    #[test]
    fn encoding_starts_with_the_schema_version() {
        let event = Event::TaskClosed(TaskClosed {
            reason: Some("done".into()),
        });
        let bytes = encode(&event);
        assert_eq!(&bytes[..2], &[1, 0]);
        assert_eq!(decode("task_closed", &bytes), Ok(event));
    }

    #[test]
    fn refuses_what_it_cannot_read() {
        assert_eq!(decode("task_closed", &[1]), Err(DecodeError::TooShort));
        assert_eq!(
            decode("task_closed", &[9, 0, 0]),
            Err(DecodeError::UnknownSchemaVersion { version: 9 })
        );
        assert_eq!(
            decode("nonsense", &[1, 0, 0]),
            Err(DecodeError::UnknownKind {
                kind: "nonsense".into()
            })
        );
        assert_eq!(
            decode("task_closed", &[1, 0, 0, 7]),
            Err(DecodeError::TrailingBytes {
                kind: "task_closed",
                count: 1
            })
        );
        assert!(matches!(
            decode("task_closed", &[1, 0, 5]),
            Err(DecodeError::Malformed { .. })
        ));
        for kind in EVENT_KINDS {
            assert!(
                decode(kind, &[1, 0]).is_err(),
                "{kind} decoded from nothing"
            );
        }
    }
}
