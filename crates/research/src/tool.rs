//! The tools of the public contract, by name: the one list every front end's table of tools is
//! keyed by, and what a refusal's `pending_actions` and the workflow's next steps point to.
//!
//! Each tool is one line of [`tools!`]: its variant, its MCP name and what it is for. The
//! service's table of tools matches on [`Tool`] exhaustively, so a tool added here cannot be
//! forgotten there.

use serde::{Deserialize, Serialize};

macro_rules! tools {
    ($($(#[doc = $doc:literal])* $variant:ident => $name:literal,)*) => {
        /// A tool a client may call, by its MCP name.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum Tool {
            $($(#[doc = $doc])* $variant,)*
        }

        impl Tool {
            /// Every tool, in the order clients list them.
            pub const ALL: &[Tool] = &[$(Tool::$variant,)*];

            /// The MCP tool name.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Tool::$variant => $name,)*
                }
            }

            /// The tool of that name, if there is one.
            pub fn from_name(name: &str) -> Option<Tool> {
                match name {
                    $($name => Some(Tool::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

tools! {
    /// Open a research task.
    ResearchOpenTask => "research_open_task",
    /// Add sub-questions.
    ResearchExpandSubquestions => "research_expand_subquestions",
    /// Search the sources for evidence.
    RetrievalSearchEvidence => "retrieval_search_evidence",
    /// Add evidence the client found itself.
    RetrievalAddEvidence => "retrieval_add_evidence",
    /// Read an evidence item's full text.
    RetrievalGetSourceDetail => "retrieval_get_source_detail",
    /// List a task's items by status and scope, a page at a time.
    RetrievalListCandidates => "retrieval_list_candidates",
    /// Withdraw an evidence item.
    RetrievalRetractEvidence => "retrieval_retract_evidence",
    /// Adopt or reject candidates.
    SynthesisScreenEvidence => "synthesis_screen_evidence",
    /// Group adopted evidence into viewpoints.
    SynthesisResearchSynthesis => "synthesis_research_synthesis",
    /// Run the conflict rules.
    EvaluationConflictResolution => "evaluation_conflict_resolution",
    /// A person decides a conflict or appeals an automatic adjudication.
    EvaluationResolveConflict => "evaluation_resolve_conflict",
    /// Build the decision matrix.
    EvaluationBuildDecisionMatrix => "evaluation_build_decision_matrix",
    /// Issue a conclusion.
    EvaluationGenerateConclusion => "evaluation_generate_conclusion",
    /// Explain the current conclusion.
    EvaluationExplainReasoning => "evaluation_explain_reasoning",
    /// Read a compact view of a task.
    ResearchSummarizeState => "research_summarize_state",
    /// Close the task.
    ResearchCloseTask => "research_close_task",
    /// Let the service carry a task through its steps in the background.
    ResearchRunPipeline => "research_run_pipeline",
    /// Follow a pipeline job.
    ResearchJobStatus => "research_job_status",
    /// Verify the whole ledger.
    AuditVerify => "audit_verify",
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_serialised_names_and_valid_mcp_names() {
        for &tool in Tool::ALL {
            assert_eq!(
                serde_json::to_value(tool).unwrap(),
                serde_json::json!(tool.name())
            );
            assert_eq!(Tool::from_name(tool.name()), Some(tool));
            let name = tool.name();
            assert!(
                name.len() <= 64 && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            );
        }
        assert_eq!(Tool::from_name("research_open_tasks"), None);
    }
}
