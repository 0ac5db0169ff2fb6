//! How records with a part only rule set `v2` has are serialised.
//!
//! Four records gained an optional part with `v2`: [`crate::rules::RuleSet::v2`],
//! [`crate::event::EvidenceAdded::relevance_inputs`], [`crate::event::Adjudication::v2`] and
//! [`crate::event::ConclusionIssued::v2`], each their last field. People read the JSON view,
//! where a `v1` record must look as it always did, so there an absent part is left out. The
//! binary form (postcard, not self-describing) always holds the part, absent or not, so that a
//! task state, which holds these records, decodes field for field. The stored form of events is
//! the codec's business: it writes events without `v2` parts in their version 1 shape
//! ([`crate::codec`]). The same holds for the part schema version 3 added, who decided a
//! conflict ([`crate::event::ConflictResolved::decided_by`]), and for the one version 4 added,
//! the cap on the query's part of relevance ([`crate::rules::V2Parameters::query_cap`]).

/// Implements `Serialize` for a struct whose last field, `$part`, is a `v2` part: every field in
/// declaration order, then the part, which a human-readable format leaves out when it is `None`.
macro_rules! serialize_with_v2_part {
    ($ty:ty, $name:literal, [$($field:ident),* $(,)?], $part:ident) => {
        impl serde::Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeStruct as _;
                let show = !(serializer.is_human_readable() && self.$part.is_none());
                let fields = [$(stringify!($field)),*].len() + usize::from(show);
                let mut out = serializer.serialize_struct($name, fields)?;
                $(out.serialize_field(stringify!($field), &self.$field)?;)*
                if show {
                    out.serialize_field(stringify!($part), &self.$part)?;
                } else {
                    out.skip_field(stringify!($part))?;
                }
                out.end()
            }
        }
    };
}

pub(crate) use serialize_with_v2_part;
