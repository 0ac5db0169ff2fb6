//! Prompts — `deep_research`, `review_conflicts`, `audit_verdict` — and the completion of their
//! arguments and of the resource templates' (task ids, versions).
//!
//! The prompts carry what the ledger holds (the conflicts with their divergence summaries, the
//! conclusion card and its explanation) so the person or model reading them starts from the
//! record, not from memory.

use std::collections::HashMap;

use projections::TaskQuery;
use rmcp::ErrorData as McpError;
use rmcp::model::{
    CompleteRequestParams, CompleteResult, CompletionInfo, GetPromptRequestParams, GetPromptResult,
    Prompt, PromptArgument, PromptMessage, Reference, Role,
};
use serde_json::Value;

use crate::bridge::Bridge;
use crate::error::prompt_error;

const DEEP_RESEARCH: &str = "deep_research";
const REVIEW_CONFLICTS: &str = "review_conflicts";
const AUDIT_VERDICT: &str = "audit_verdict";

/// The most completion values in one answer (the protocol's bound).
const COMPLETIONS_MAX: usize = CompletionInfo::MAX_VALUES;

fn argument(name: &str, description: &str, required: bool) -> PromptArgument {
    let mut a = PromptArgument::new(name);
    a.description = Some(description.to_owned());
    a.required = Some(required);
    a
}

pub(crate) fn prompts() -> Vec<Prompt> {
    let mut deep = Prompt::new(
        DEEP_RESEARCH,
        Some(
            "Research a question through the ledger: open a task, gather and screen evidence, and let the service issue and explain the verdict.",
        ),
        Some(vec![
            argument("question", "The research question.", true),
            argument(
                "constraints",
                "Constraints on the research (period, region, kinds of source), one per line.",
                false,
            ),
        ]),
    );
    deep.title = Some("Deep research".into());
    let mut review = Prompt::new(
        REVIEW_CONFLICTS,
        Some(
            "Review a task's conflicts: the pending ones need a person's decision, and automatic adjudications may be appealed.",
        ),
        Some(vec![argument("task_id", "The research task.", true)]),
    );
    review.title = Some("Review conflicts".into());
    let mut audit = Prompt::new(
        AUDIT_VERDICT,
        Some(
            "Audit a task's verdict: check the ledger, the evidence and adjudications it rests on, and its explanation.",
        ),
        Some(vec![argument("task_id", "The research task.", true)]),
    );
    audit.title = Some("Audit a verdict".into());
    vec![deep, review, audit]
}

fn required<'a>(request: &'a GetPromptRequestParams, name: &str) -> Result<&'a str, McpError> {
    request
        .arguments
        .as_ref()
        .and_then(|a| a.get(name))
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| {
            McpError::invalid_params(
                format!(
                    "prompt {} needs the argument {name}",
                    service::echoed(&request.name)
                ),
                None,
            )
        })
}

fn optional<'a>(request: &'a GetPromptRequestParams, name: &str) -> Option<&'a str> {
    request
        .arguments
        .as_ref()
        .and_then(|a| a.get(name))
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

/// `prompts/get`: the prompt named, filled in with its arguments.
pub(crate) fn get(
    bridge: &Bridge,
    request: &GetPromptRequestParams,
) -> Result<GetPromptResult, McpError> {
    match request.name.as_str() {
        DEEP_RESEARCH => deep_research(request),
        REVIEW_CONFLICTS => review_conflicts(bridge, request),
        AUDIT_VERDICT => audit_verdict(bridge, request),
        other => Err(McpError::invalid_params(
            format!(
                "unknown prompt {:?}; prompts/list names the prompts of this server",
                service::echoed(other)
            ),
            None,
        )),
    }
}

/// A prompt of one message, from the user, with its description.
fn asking_the_user(text: String, description: String) -> GetPromptResult {
    GetPromptResult::new(vec![PromptMessage::new_text(Role::User, text)])
        .with_description(description)
}

/// `deep_research`: how to research a question with the tools, step by step.
fn deep_research(request: &GetPromptRequestParams) -> Result<GetPromptResult, McpError> {
    let question = required(request, "question")?;
    let constraints: Vec<&str> = optional(request, "constraints")
        .map(|c| c.lines().map(str::trim).filter(|l| !l.is_empty()).collect())
        .unwrap_or_default();
    let constraints_json = serde_json::to_string(&constraints).unwrap_or_else(|_| "[]".into());
    let text = format!(
        "Research this question with the research-ledger tools, so that every step is recorded and the verdict is the service's, not yours:\n\n\
         Question: {question}\n\
         Constraints: {}\n\n\
         1. Call research_open_task with {{\"question\": {}, \"constraints\": {constraints_json}}}.\n\
         2. If the question has distinct parts, add them with research_expand_subquestions.\n\
         3. Search with retrieval_search_evidence, once for the main question and once per sub-question (or call research_run_pipeline, which searches every scope and stops when screening is due).\n\
         4. Read each candidate (retrieval_get_source_detail when the summary is not enough) and screen it with synthesis_screen_evidence: adopt it with its stance toward the question (supports, opposes, neutral) and the sub-question it answers, or reject it, always with a reason. Add evidence you know of with retrieval_add_evidence.\n\
         5. Call evaluation_conflict_resolution, then evaluation_build_decision_matrix, evaluation_generate_conclusion and evaluation_explain_reasoning (or research_run_pipeline again). A pending conflict is the person's to decide, not yours: when your client supports elicitation the service asks the person itself during evaluation_conflict_resolution; otherwise show the person the conflict (review_conflicts), propose a decision with your reasons if you have one, and record only what the person decides.\n\
         6. Report the conclusion card as the service returned it (stance, confidence, components), cite the evidence ids it used, and give the task_id so the research can be audited.\n\n\
         When a tool refuses with workflow_order, do the pending_actions it lists first. On session_conflict, read the task again (research_summarize_state) before deciding. Use idempotency_key on writes you may retry.",
        if constraints.is_empty() {
            "none".to_owned()
        } else {
            constraints.join("; ")
        },
        serde_json::to_string(question).unwrap_or_default(),
    );
    Ok(asking_the_user(text, format!("Deep research: {question}")))
}

/// `review_conflicts`: a task's conflicts in force, and how a person decides them.
fn review_conflicts(
    bridge: &Bridge,
    request: &GetPromptRequestParams,
) -> Result<GetPromptResult, McpError> {
    let task_id = required(request, "task_id")?;
    let state = bridge
        .service()
        .state(task_id)
        .map_err(|e| prompt_error(&e))?;
    let question = state.task().map(|t| t.question.clone()).unwrap_or_default();
    let mut text = format!(
        "Review the conflicts of research task {task_id} (version {}): {question}\n\n",
        state.version()
    );
    let conflicts: Vec<_> = state
        .conflict_views()
        .into_iter()
        .filter(|c| c.current)
        .collect();
    if conflicts.is_empty() {
        text.push_str("The task has no conflict in force. If the evidence changed since the conflict rules last ran, call evaluation_conflict_resolution first.\n");
    }
    for c in &conflicts {
        let view = serde_json::to_value(c).unwrap_or(Value::Null);
        text.push_str(&format!(
            "## {} — scope {}, tier {}, winner {}\n{}\n",
            c.conflict_id,
            view["scope"].as_str().unwrap_or("the main question"),
            view["tier"].as_str().unwrap_or("?"),
            view["winner"].as_str().unwrap_or("none"),
            serde_json::to_string_pretty(&view).unwrap_or_default()
        ));
        if let Some(d) = state.divergence(&c.conflict_id) {
            text.push_str(&format!(
                "Divergence summary:\n{}\n",
                serde_json::to_string_pretty(&d).unwrap_or_default()
            ));
        }
        text.push('\n');
    }
    text.push_str(
        "A pending conflict is the person's to decide; you may propose. For each pending conflict, read both sides (retrieval_get_source_detail for their texts), tell the person what each side rests on and, if you have one, the decision you propose and why. Record only what the person decides: the winning side (supports or opposes) or both_stand, always with their reason. When your client supports elicitation, evaluation_conflict_resolution asks the person itself and records the answer as the person's. A decision you send with evaluation_resolve_conflict is recorded as the assistant's (decided_by: assistant), and a task opened with conflict_decisions: person refuses it (person_decision_required); the person then decides with a reviewer's token over REST, GraphQL or the command line. An automatic adjudication (tier authority, recency or weight) may be appealed the same way, with a reason. Then rebuild the decision matrix and issue the conclusion again.",
    );
    Ok(asking_the_user(
        text,
        format!("Conflicts of task {task_id}"),
    ))
}

/// `audit_verdict`: a task's conclusion card and explanation, and what to check of them.
fn audit_verdict(
    bridge: &Bridge,
    request: &GetPromptRequestParams,
) -> Result<GetPromptResult, McpError> {
    let task_id = required(request, "task_id")?;
    let service = bridge.service();
    let state = service.state(task_id).map_err(|e| prompt_error(&e))?;
    let Some(card) = state.conclusion_card(None) else {
        return Err(McpError::invalid_params(
            format!("task {task_id} has no conclusion to audit yet"),
            None,
        ));
    };
    let explanation = service
        .explanation(task_id)
        .map_err(|e| prompt_error(&e))?
        .map(|(markdown, _)| markdown)
        .unwrap_or_default();
    let text = format!(
        "Audit the verdict of research task {task_id} (version {}).\n\n\
         The conclusion card, as recorded:\n{}\n\n\
         Its explanation, every line citing a ledger event (seq and hash):\n{explanation}\n\n\
         Check, and report each point as confirmed or not:\n\
         1. audit_verify says the ledger is intact (hash chain, Merkle tree, signed checkpoints).\n\
         2. Every evidence item the card cites is in ledger://tasks/{task_id}/events, adopted, not retracted, with the content hash the card gives (retrieval_get_source_detail shows the text, a page at a time, and its hash).\n\
         3. Every adjudication the card cites follows the rule set the card records (its rules.id): authority gap, then recency gap (under v2 between given dates only, then side weight when enabled), else pending for a person; human decisions carry a reason.\n\
         4. The components and the confidence follow from the evidence by the rules recorded in the card; the stance follows from them.\n\
         5. The card is not stale (stale: false); if it is, say what changed since.\n\
         Do not re-judge the evidence yourself; say where the record and the verdict disagree.",
        state.version(),
        serde_json::to_string_pretty(&card).unwrap_or_default(),
    );
    Ok(asking_the_user(text, format!("Audit of task {task_id}")))
}

/// Task ids that start with `prefix`, the most recently opened first.
fn task_ids(bridge: &Bridge, prefix: &str) -> Result<(Vec<String>, bool), McpError> {
    let projector = bridge.service().projector();
    let scan_max = bridge.options().completion_tasks_scanned_max;
    let mut matches = Vec::new();
    let mut scanned = 0;
    let mut after = None;
    loop {
        let page = projector
            .tasks(&TaskQuery {
                after,
                ..TaskQuery::default()
            })
            .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        scanned += page.tasks.len();
        matches.extend(
            page.tasks
                .into_iter()
                .filter(|t| t.task_id.starts_with(prefix))
                .map(|t| t.task_id),
        );
        match page.next_cursor {
            Some(next) if scanned < scan_max => after = Some(next),
            _ => break,
        }
    }
    matches.reverse();
    let more = matches.len() > COMPLETIONS_MAX;
    matches.truncate(COMPLETIONS_MAX);
    Ok((matches, more))
}

/// Versions of a task that start with `prefix`, the newest first.
fn versions(bridge: &Bridge, task_id: Option<&String>, prefix: &str) -> (Vec<String>, bool) {
    let Some(head) = task_id
        .and_then(|id| bridge.service().state(id).ok())
        .map(|s| s.version())
    else {
        return (Vec::new(), false);
    };
    let mut values: Vec<String> = (1..=head)
        .rev()
        .map(|v| v.to_string())
        .filter(|v| v.starts_with(prefix))
        .collect();
    let more = values.len() > COMPLETIONS_MAX;
    values.truncate(COMPLETIONS_MAX);
    (values, more)
}

pub(crate) fn complete(
    bridge: &Bridge,
    request: &CompleteRequestParams,
) -> Result<CompleteResult, McpError> {
    let argument = &request.argument;
    let context: HashMap<String, String> = request
        .context
        .as_ref()
        .and_then(|c| c.arguments.clone())
        .unwrap_or_default();
    let (values, more) = match (&request.r#ref, argument.name.as_str()) {
        (Reference::Prompt(p), "task_id")
            if p.name == REVIEW_CONFLICTS || p.name == AUDIT_VERDICT =>
        {
            task_ids(bridge, &argument.value)?
        }
        (Reference::Resource(r), "task_id") if r.uri.contains("{task_id}") => {
            task_ids(bridge, &argument.value)?
        }
        (Reference::Resource(r), "version") if r.uri.contains("{version}") => {
            versions(bridge, context.get("task_id"), &argument.value)
        }
        (Reference::Prompt(p), _) if !prompts().iter().any(|q| q.name == p.name) => {
            return Err(McpError::invalid_params(
                format!("unknown prompt {:?}", service::echoed(&p.name)),
                None,
            ));
        }
        _ => (Vec::new(), false),
    };
    let completion = CompletionInfo::with_pagination(values, None, more)
        .map_err(|e| McpError::internal_error(e, None))?;
    Ok(CompleteResult::new(completion))
}
