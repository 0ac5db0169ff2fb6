//! The closed vocabularies of the research domain as GraphQL enums.
//!
//! Each mirrors a domain enum value for value (`remote`), so a value added to the domain and
//! not here fails to compile instead of being shown wrongly. Values are in GraphQL's upper case
//! (`EVIDENCE_INSUFFICIENT`); the tools' snake_case names (`evidence_insufficient`) are what the
//! domain's `name()` gives, and what mutations send on to the tools.

use async_graphql::Enum;

/// The overall status of a task.
#[derive(Enum, Debug, Clone, Copy, PartialEq, Eq)]
#[graphql(remote = "service::research::TaskStatus")]
pub(crate) enum TaskStatus {
    /// No conclusion yet.
    Active,
    /// The current conclusion stands.
    Concluded,
    /// A conclusion exists but its inputs changed since.
    Stale,
    /// Closed; nothing can be written.
    Closed,
}

/// The verdict of a conclusion.
#[derive(Enum, Debug, Clone, Copy, PartialEq, Eq)]
#[graphql(remote = "service::research::rules::Verdict")]
pub(crate) enum Verdict {
    /// The evidence supports the question's claim.
    Supportive,
    /// The evidence opposes it.
    Opposing,
    /// The evidence is divided, or a conflict awaits a person.
    Uncertain,
    /// Too little evidence, or none that takes a side.
    EvidenceInsufficient,
}

/// Which clause of the stance rule gave a verdict.
#[derive(Enum, Debug, Clone, Copy, PartialEq, Eq)]
#[graphql(remote = "service::research::rules::VerdictRule")]
pub(crate) enum VerdictRule {
    /// No item used takes a side.
    NoSideTaken,
    /// Confidence did not reach the floor.
    BelowConfidenceFloor,
    /// A conflict awaits a person.
    PendingConflict,
    /// More items support, and consistency reaches its threshold.
    SupportsPrevail,
    /// More items oppose, and consistency reaches its threshold.
    OpposesPrevail,
    /// Neither side prevails clearly.
    Divided,
    /// Rule set v2: the larger side has too few items or too little combined relevance.
    TooLittleSidedEvidence,
}

/// An item's position toward the main question.
#[derive(Enum, Debug, Clone, Copy, PartialEq, Eq)]
#[graphql(remote = "service::research::rules::Stance")]
pub(crate) enum Stance {
    /// It supports the question's claim.
    Supports,
    /// It opposes it.
    Opposes,
    /// It takes no side.
    Neutral,
}

/// How strictly a task's workflow is enforced.
#[derive(Enum, Debug, Clone, Copy, PartialEq, Eq)]
#[graphql(remote = "service::research::rules::Mode")]
pub(crate) enum Mode {
    /// Every step through the tools, in order.
    ToolConstrained,
    /// Free order; generating a conclusion runs the conflict rules and builds the matrix itself.
    AgentLed,
}

/// The kind of publisher, which decides an item's authority.
#[derive(Enum, Debug, Clone, Copy, PartialEq, Eq)]
#[graphql(remote = "service::research::rules::SourceType")]
pub(crate) enum SourceType {
    /// Measurements or records at first hand.
    PrimaryData,
    /// A government publication.
    Government,
    /// A peer-reviewed paper.
    AcademicPaper,
    /// A report of an institution.
    InstitutionalReport,
    /// Original news reporting.
    NewsOriginal,
    /// News reprinted from elsewhere.
    NewsReprint,
    /// A blog post.
    Blog,
    /// A social media post.
    Social,
    /// Anything else.
    Other,
}

/// How an item's relevance was obtained; recorded, never recomputed.
#[derive(Enum, Debug, Clone, Copy, PartialEq, Eq)]
#[graphql(remote = "service::research::event::RelevanceBasis")]
pub(crate) enum RelevanceBasis {
    /// The source scored it.
    ScoredBySource,
    /// The client gave it.
    GivenByClient,
    /// IDF-weighted coverage of the question's terms.
    IdfCoverage,
    /// Rule set v2 topicality, from the inputs recorded with the item.
    Topicality,
}

/// An item's status: recorded, or `OVERRULED` (adopted but on the losing side of its scope's
/// current adjudication).
#[derive(Enum, Debug, Clone, Copy, PartialEq, Eq)]
#[graphql(remote = "service::research::event::EvidenceStatus")]
pub(crate) enum EvidenceStatus {
    /// Not screened yet.
    Candidate,
    /// Screened in.
    Adopted,
    /// Screened out.
    Rejected,
    /// Withdrawn.
    Retracted,
    /// Adopted but losing its scope's conflict.
    Overruled,
}

/// How a conflict was decided.
#[derive(Enum, Debug, Clone, Copy, PartialEq, Eq)]
#[graphql(remote = "service::research::event::Tier")]
pub(crate) enum Tier {
    /// The authority gap reached its threshold.
    Authority,
    /// Else the gap between the latest publish dates reached its threshold.
    Recency,
    /// Else it waits for a person.
    Pending,
    /// A person decided it.
    Human,
    /// Rule set v2, when enabled: one side's weight reached the set multiple of the other's.
    Weight,
}

/// A side of a conflict.
#[derive(Enum, Debug, Clone, Copy, PartialEq, Eq)]
#[graphql(remote = "service::research::event::Side")]
pub(crate) enum Side {
    /// The items that support.
    Supports,
    /// The items that oppose.
    Opposes,
}

/// What a person decided on a conflict.
#[derive(Enum, Debug, Clone, Copy, PartialEq, Eq)]
#[graphql(remote = "service::research::event::HumanOutcome")]
pub(crate) enum HumanOutcome {
    /// The supporting side wins.
    Supports,
    /// The opposing side wins.
    Opposes,
    /// Neither side is overruled.
    BothStand,
}

/// Whether a human decision resolved a pending conflict or appealed an automatic adjudication.
#[derive(Enum, Debug, Clone, Copy, PartialEq, Eq)]
#[graphql(remote = "service::research::state::HumanDecisionKind")]
pub(crate) enum HumanDecisionKind {
    /// On a pending conflict.
    Resolution,
    /// On an automatic adjudication.
    Appeal,
}

/// How one node of a why-graph explains another.
#[derive(Enum, Debug, Clone, Copy, PartialEq, Eq)]
#[graphql(remote = "service::projections::EdgeKind")]
pub(crate) enum EdgeKind {
    /// Conclusion → one of its components.
    Component,
    /// Component → an item it was computed from.
    Input,
    /// Conclusion → an adjudication in force when it was issued.
    Adjudication,
    /// Adjudication → an item of the winning side, which counted.
    Upheld,
    /// Adjudication → an item of the losing side, which therefore did not count.
    Overruled,
    /// Adjudication decided "both stand" → an item of either side, which counted.
    Stands,
    /// Pending adjudication → an item of either side, which counted while a person is awaited.
    Pending,
    /// Adjudication → a human decision on it.
    DecidedBy,
    /// Adjudication → the older adjudication of the same scope it replaced.
    Supersedes,
}
