//! Re-derivation for replay audits: given the state before a recorded event, derive the event
//! again and report the first field that differs, bit for bit.
//!
//! Values are compared through a flattening of both events into `(path, value)` pairs in which
//! every f64 carries its bit pattern, so `0.1 + 0.2` and `0.3` differ and a NaN is not silently
//! equal to anything. A relevance that a source or client gave, or `v1`'s IDF coverage, is
//! recorded, never recomputed: it came from a corpus whose statistics have since moved on. A `v2`
//! topicality is re-derived from the statistics recorded with it.

use std::fmt;

use serde::Serialize;
use serde::ser::{
    self, SerializeMap, SerializeSeq, SerializeStruct, SerializeStructVariant, SerializeTuple,
    SerializeTupleStruct, SerializeTupleVariant,
};

use crate::derive::{self, adjudicate, conclude, explain, matrix, synthesis};
use crate::event::{Event, EvidenceAdded, SubQuestion, SubQuestionsExpanded};
use crate::ids::{EvidenceId, SubQuestionId, to_hex};
use crate::state::TaskState;

/// A recorded value that re-derivation does not reproduce.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{kind}` disagrees at `{field}`: recorded {recorded}, re-derived {derived}")]
pub struct Discrepancy {
    /// The event kind.
    pub kind: &'static str,
    /// Path of the first differing field, e.g. `components.recency` or `rows[2].status`.
    pub field: String,
    /// The recorded value (f64 with its bits).
    pub recorded: String,
    /// The re-derived value.
    pub derived: String,
}

/// Re-derives `event` from the state before it and reports the first field that differs.
/// Events that carry nothing derived (screenings, human decisions, …) always pass.
pub fn recheck(state_before: &TaskState, event: &Event) -> Result<(), Discrepancy> {
    let kind = event.kind();
    match event {
        Event::EvidenceAdded(recorded) => evidence_added(kind, state_before, recorded),
        Event::SubQuestionsExpanded(recorded) => {
            let base = state_before.sub_questions().len();
            let expected = SubQuestionsExpanded {
                sub_questions: recorded
                    .sub_questions
                    .iter()
                    .enumerate()
                    .map(|(i, s)| SubQuestion {
                        id: SubQuestionId::nth(base + i + 1),
                        text: s.text.clone(),
                    })
                    .collect(),
            };
            compare(kind, recorded, &expected, "")
        }
        Event::ConflictsAdjudicated(recorded) => {
            compare(kind, recorded, &adjudicate::run(state_before), "")
        }
        Event::DecisionMatrixBuilt(recorded) => {
            compare(kind, recorded, &matrix::matrix(state_before), "")
        }
        Event::ConclusionIssued(recorded) => {
            compare(kind, recorded, &conclude::conclusion(state_before), "")
        }
        Event::SynthesisRecorded(recorded) => {
            compare(kind, recorded, &synthesis::synthesis(state_before), "")
        }
        Event::ExplanationRecorded(recorded) => match explain::explanation(state_before) {
            Some(derived) => compare(kind, recorded, &derived, ""),
            None => Err(Discrepancy {
                kind,
                field: "conclusion_id".into(),
                recorded: recorded.conclusion_id.to_string(),
                derived: "no conclusion to explain".into(),
            }),
        },
        Event::TaskOpened(_)
        | Event::SearchRecorded(_)
        | Event::EvidenceScreened(_)
        | Event::EvidenceRetracted(_)
        | Event::ConflictResolved(_)
        | Event::AdjudicationAppealed(_)
        | Event::ExternalToolCalled(_)
        | Event::TaskClosed(_) => Ok(()),
    }
}

/// An item's scores and id, and a `v2` topicality from the inputs recorded with it.
fn evidence_added(
    kind: &'static str,
    state_before: &TaskState,
    recorded: &EvidenceAdded,
) -> Result<(), Discrepancy> {
    let Some(task) = state_before.task() else {
        return Ok(());
    };
    let scores = derive::evidence_scores(
        &task.rules,
        task.research_date,
        recorded.source_type,
        recorded.citation_count,
        recorded.publish_date,
    );
    let expected_id = EvidenceId::nth(state_before.evidence().len() + 1);
    compare(kind, &recorded.evidence_id, &expected_id, "evidence_id")?;
    compare(kind, &recorded.authority, &scores.authority, "authority")?;
    compare(
        kind,
        &recorded.reliability,
        &scores.reliability,
        "reliability",
    )?;
    compare(kind, &recorded.age_days, &scores.age_days, "age_days")?;
    compare(kind, &recorded.recency, &scores.recency, "recency")?;
    // A `v2` topicality is re-derived from the inputs recorded with it; other bases
    // stay as recorded.
    match (&recorded.relevance_inputs, &task.rules.v2) {
        (Some(inputs), Some(params)) => compare(
            kind,
            &recorded.relevance,
            &crate::rules::v2::topical_relevance(inputs, params),
            "relevance",
        ),
        (Some(_), None) => Err(Discrepancy {
            kind,
            field: "relevance_inputs".into(),
            recorded: "present".into(),
            derived: format!("absent under rule set {}", task.rules.id),
        }),
        (None, _) if recorded.relevance_basis == crate::event::RelevanceBasis::Topicality => {
            Err(Discrepancy {
                kind,
                field: "relevance_inputs".into(),
                recorded: "absent".into(),
                derived: "topicality is computed from recorded inputs".into(),
            })
        }
        (None, _) => Ok(()),
    }
}

fn compare<T: Serialize>(
    kind: &'static str,
    recorded: &T,
    derived: &T,
    root: &str,
) -> Result<(), Discrepancy> {
    let recorded = flatten(recorded, root);
    let derived = flatten(derived, root);
    let mut a = recorded.iter();
    let mut b = derived.iter();
    loop {
        match (a.next(), b.next()) {
            (None, None) => return Ok(()),
            (Some((pa, va)), Some((pb, vb))) if pa == pb && va == vb => continue,
            (Some((pa, va)), Some((pb, vb))) if pa == pb => {
                return Err(Discrepancy {
                    kind,
                    field: pa.clone(),
                    recorded: va.clone(),
                    derived: vb.clone(),
                });
            }
            (Some((pa, va)), Some((pb, vb))) => {
                return Err(Discrepancy {
                    kind,
                    field: pa.clone().min(pb.clone()),
                    recorded: format!("{pa} = {va}"),
                    derived: format!("{pb} = {vb}"),
                });
            }
            (Some((pa, va)), None) => {
                return Err(Discrepancy {
                    kind,
                    field: pa.clone(),
                    recorded: va.clone(),
                    derived: "absent".into(),
                });
            }
            (None, Some((pb, vb))) => {
                return Err(Discrepancy {
                    kind,
                    field: pb.clone(),
                    recorded: "absent".into(),
                    derived: vb.clone(),
                });
            }
        }
    }
}

/// `(path, value)` for every leaf of a value, in serialisation order.
pub(crate) fn flatten<T: Serialize + ?Sized>(value: &T, root: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let result = value.serialize(Flat {
        out: &mut out,
        path: root.to_string(),
    });
    if let Err(error) = result {
        out.push((root.to_string(), format!("<unflattenable: {error}>")));
    }
    out
}

#[derive(Debug)]
pub(crate) struct FlatError(String);

impl fmt::Display for FlatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FlatError {}

impl ser::Error for FlatError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        FlatError(msg.to_string())
    }
}

fn join(path: &str, part: &str) -> String {
    if path.is_empty() {
        part.to_string()
    } else {
        format!("{path}.{part}")
    }
}

struct Flat<'a> {
    out: &'a mut Vec<(String, String)>,
    path: String,
}

impl Flat<'_> {
    fn leaf(self, value: String) -> Result<(), FlatError> {
        self.out.push((self.path, value));
        Ok(())
    }
}

struct Compound<'a> {
    out: &'a mut Vec<(String, String)>,
    path: String,
    index: usize,
    key: Option<String>,
}

impl<'a> Compound<'a> {
    fn new(out: &'a mut Vec<(String, String)>, path: String) -> Self {
        Self {
            out,
            path,
            index: 0,
            key: None,
        }
    }

    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), FlatError> {
        let path = format!("{}[{}]", self.path, self.index);
        self.index += 1;
        value.serialize(Flat {
            out: self.out,
            path,
        })
    }

    fn field<T: Serialize + ?Sized>(&mut self, name: &str, value: &T) -> Result<(), FlatError> {
        self.index += 1;
        value.serialize(Flat {
            out: self.out,
            path: join(&self.path, name),
        })
    }

    fn end_seq(self) -> Result<(), FlatError> {
        if self.index == 0 {
            self.out.push((self.path, "[]".into()));
        }
        Ok(())
    }

    fn end_struct(self) -> Result<(), FlatError> {
        if self.index == 0 {
            self.out.push((self.path, "{}".into()));
        }
        Ok(())
    }
}

impl<'a> ser::Serializer for Flat<'a> {
    type Ok = ();
    type Error = FlatError;
    type SerializeSeq = Compound<'a>;
    type SerializeTuple = Compound<'a>;
    type SerializeTupleStruct = Compound<'a>;
    type SerializeTupleVariant = Compound<'a>;
    type SerializeMap = Compound<'a>;
    type SerializeStruct = Compound<'a>;
    type SerializeStructVariant = Compound<'a>;

    fn serialize_bool(self, v: bool) -> Result<(), FlatError> {
        self.leaf(v.to_string())
    }
    fn serialize_i8(self, v: i8) -> Result<(), FlatError> {
        self.leaf(v.to_string())
    }
    fn serialize_i16(self, v: i16) -> Result<(), FlatError> {
        self.leaf(v.to_string())
    }
    fn serialize_i32(self, v: i32) -> Result<(), FlatError> {
        self.leaf(v.to_string())
    }
    fn serialize_i64(self, v: i64) -> Result<(), FlatError> {
        self.leaf(v.to_string())
    }
    fn serialize_u8(self, v: u8) -> Result<(), FlatError> {
        self.leaf(v.to_string())
    }
    fn serialize_u16(self, v: u16) -> Result<(), FlatError> {
        self.leaf(v.to_string())
    }
    fn serialize_u32(self, v: u32) -> Result<(), FlatError> {
        self.leaf(v.to_string())
    }
    fn serialize_u64(self, v: u64) -> Result<(), FlatError> {
        self.leaf(v.to_string())
    }
    fn serialize_f32(self, v: f32) -> Result<(), FlatError> {
        self.leaf(format!("{v:?} (bits {:#010x})", v.to_bits()))
    }
    fn serialize_f64(self, v: f64) -> Result<(), FlatError> {
        self.leaf(format!("{v:?} (bits {:#018x})", v.to_bits()))
    }
    fn serialize_char(self, v: char) -> Result<(), FlatError> {
        self.leaf(format!("{v:?}"))
    }
    fn serialize_str(self, v: &str) -> Result<(), FlatError> {
        self.leaf(format!("{v:?}"))
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<(), FlatError> {
        self.leaf(to_hex(v))
    }
    fn serialize_none(self) -> Result<(), FlatError> {
        self.leaf("null".into())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), FlatError> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), FlatError> {
        self.leaf("()".into())
    }
    fn serialize_unit_struct(self, name: &'static str) -> Result<(), FlatError> {
        self.leaf(name.into())
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<(), FlatError> {
        self.leaf(variant.into())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<(), FlatError> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), FlatError> {
        let path = join(&self.path, variant);
        value.serialize(Flat {
            out: self.out,
            path,
        })
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Compound<'a>, FlatError> {
        Ok(Compound::new(self.out, self.path))
    }
    fn serialize_tuple(self, _: usize) -> Result<Compound<'a>, FlatError> {
        Ok(Compound::new(self.out, self.path))
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Compound<'a>, FlatError> {
        Ok(Compound::new(self.out, self.path))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Compound<'a>, FlatError> {
        let path = join(&self.path, variant);
        Ok(Compound::new(self.out, path))
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Compound<'a>, FlatError> {
        Ok(Compound::new(self.out, self.path))
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Compound<'a>, FlatError> {
        Ok(Compound::new(self.out, self.path))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Compound<'a>, FlatError> {
        let path = join(&self.path, variant);
        Ok(Compound::new(self.out, path))
    }
    fn is_human_readable(&self) -> bool {
        true
    }
}

impl SerializeSeq for Compound<'_> {
    type Ok = ();
    type Error = FlatError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), FlatError> {
        self.element(value)
    }
    fn end(self) -> Result<(), FlatError> {
        self.end_seq()
    }
}

impl SerializeTuple for Compound<'_> {
    type Ok = ();
    type Error = FlatError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), FlatError> {
        self.element(value)
    }
    fn end(self) -> Result<(), FlatError> {
        self.end_seq()
    }
}

impl SerializeTupleStruct for Compound<'_> {
    type Ok = ();
    type Error = FlatError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), FlatError> {
        self.element(value)
    }
    fn end(self) -> Result<(), FlatError> {
        self.end_seq()
    }
}

impl SerializeTupleVariant for Compound<'_> {
    type Ok = ();
    type Error = FlatError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), FlatError> {
        self.element(value)
    }
    fn end(self) -> Result<(), FlatError> {
        self.end_seq()
    }
}

impl SerializeMap for Compound<'_> {
    type Ok = ();
    type Error = FlatError;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), FlatError> {
        let parts = flatten(key, "");
        self.key = Some(
            parts
                .into_iter()
                .map(|(_, v)| v)
                .collect::<Vec<_>>()
                .join(","),
        );
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), FlatError> {
        let key = self.key.take().unwrap_or_default();
        let path = format!("{}[{key}]", self.path);
        self.index += 1;
        value.serialize(Flat {
            out: self.out,
            path,
        })
    }
    fn end(self) -> Result<(), FlatError> {
        self.end_struct()
    }
}

impl SerializeStruct for Compound<'_> {
    type Ok = ();
    type Error = FlatError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), FlatError> {
        self.field(key, value)
    }
    fn end(self) -> Result<(), FlatError> {
        self.end_struct()
    }
}

impl SerializeStructVariant for Compound<'_> {
    type Ok = ();
    type Error = FlatError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), FlatError> {
        self.field(key, value)
    }
    fn end(self) -> Result<(), FlatError> {
        self.end_struct()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Sample {
        a: f64,
        b: Vec<Option<u8>>,
        c: Inner,
    }

    #[derive(Serialize)]
    struct Inner {
        d: &'static str,
    }

    #[test]
    fn flattening_names_every_leaf_and_keeps_float_bits() {
        let sample = Sample {
            a: 0.1 + 0.2,
            b: vec![Some(1), None],
            c: Inner { d: "x" },
        };
        let flat = flatten(&sample, "");
        assert_eq!(
            flat,
            vec![
                (
                    "a".to_string(),
                    "0.30000000000000004 (bits 0x3fd3333333333334)".to_string()
                ),
                ("b[0]".to_string(), "1".to_string()),
                ("b[1]".to_string(), "null".to_string()),
                ("c.d".to_string(), "\"x\"".to_string()),
            ]
        );
    }

    #[test]
    fn compare_reports_the_first_difference() {
        let one = Sample {
            a: 0.3,
            b: vec![],
            c: Inner { d: "x" },
        };
        let two = Sample {
            a: 0.1 + 0.2,
            b: vec![],
            c: Inner { d: "x" },
        };
        let error = compare("test", &one, &two, "").unwrap_err();
        assert_eq!(error.field, "a");
        assert!(compare("test", &one, &one, "").is_ok());
    }
}
