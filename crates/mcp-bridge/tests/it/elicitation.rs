//! People asked in the 2026-07-28 era: the `requestState` of an `input_required` answer binds
//! the answers a client sends back to the task and the conflicts this server process asked
//! about; nothing else is recorded.

use mcp_bridge::{Bridge, BridgeOptions};
use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, Implementation,
    InputRequiredResult, ProtocolVersion,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RoleClient, RunningService};
use serde_json::{Value, json};
use service::Service;

use super::{arguments, call, service};

/// A 2026-07-28 client that declared form elicitation, connected to `bridge`. The server's
/// side of the session opens with the first request after `server/discover`, so it is left to
/// run on its own.
pub(super) struct Asking {
    client: RunningService<RoleClient, ClientConfig>,
    _server: tokio::task::JoinHandle<()>,
}

impl std::ops::Deref for Asking {
    type Target = RunningService<RoleClient, ClientConfig>;
    fn deref(&self) -> &Self::Target {
        &self.client
    }
}

pub(super) async fn asking_client(bridge: &Bridge) -> Asking {
    let (client_end, server_end) = tokio::io::duplex(1 << 20);
    let bridge = bridge.for_new_session();
    let server = tokio::spawn(async move {
        let running = bridge.serve(server_end).await.unwrap();
        let _ = running.waiting().await;
    });
    let config = ClientConfig::new(
        ClientCapabilities::builder().enable_elicitation().build(),
        Implementation::new("asking-client", "1.0"),
    );
    let lifecycle = ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    let client = config
        .serve_with_lifecycle(client_end, lifecycle)
        .await
        .unwrap();
    Asking {
        client,
        _server: server,
    }
}

/// A bridge that waits 200 ms for a person's answer.
fn impatient_bridge(service: &Service) -> Bridge {
    let options = BridgeOptions {
        elicitation_timeout_ms: 200,
        ..BridgeOptions::default()
    };
    Bridge::new(service.clone(), options)
}

/// Adds to `task_id` two government items of one date on opposite sides of `sub_question`
/// (the main question when `None`), adopted: a conflict the rules leave to a person.
async fn add_even_sides(client: &Asking, task_id: &str, sub_question: Value) {
    let mut ids = Vec::new();
    for (source, stance) in [
        ("tide-office.example.org", "supports"),
        ("coast-review.example.org", "opposes"),
    ] {
        let mut item = json!({
            "task_id": task_id, "source": source, "source_type": "government",
            "publish_date": "2025-06-30", "stance": stance,
            "content": format!("The sea level record of {source} on {sub_question}."),
        });
        if !sub_question.is_null() {
            item["sub_question"] = sub_question.clone();
        }
        let added = call(client, "retrieval_add_evidence", item).await;
        ids.push(added["evidence_id"].clone());
    }
    let decisions: Vec<Value> = ids
        .iter()
        .zip(["supports", "opposes"])
        .map(|(id, stance)| {
            json!({"evidence_id": id, "adopt": true, "stance": stance, "sub_question": sub_question})
        })
        .collect();
    call(
        client,
        "synthesis_screen_evidence",
        json!({"task_id": task_id, "decisions": decisions}),
    )
    .await;
}

/// A task whose main question has one conflict waiting for a person.
async fn task_with_a_pending_conflict(client: &Asking) -> String {
    let opened = call(
        client,
        "research_open_task",
        json!({"question": "Is the global sea level rising?", "research_date": "2026-03-01"}),
    )
    .await;
    let task_id = opened["task_id"].as_str().unwrap().to_owned();
    add_even_sides(client, &task_id, Value::Null).await;
    task_id
}

/// Calls `evaluation_conflict_resolution` on `task_id`, expecting to be asked.
async fn asked(client: &Asking, task_id: &str) -> InputRequiredResult {
    let response = client
        .call_tool_once(
            CallToolRequestParams::new("evaluation_conflict_resolution")
                .with_arguments(arguments(json!({"task_id": task_id}))),
        )
        .await
        .unwrap();
    match response {
        CallToolResponse::InputRequired(result) => result,
        other => panic!("a conflict waits for a person, who is asked: {other:?}"),
    }
}

/// The person's answer to one form: accepted, the supporting side wins.
fn accepted() -> Value {
    json!({"action": "accept", "content": {"outcome": "supports", "reason": "The gauges are longer."}})
}

/// Sends back `answers` (conflict id → answer) for `task_id` with `state`.
async fn answer(
    client: &Asking,
    task_id: &str,
    state: &str,
    answers: &[&str],
) -> Result<CallToolResponse, rmcp::ServiceError> {
    let mut request = CallToolRequestParams::new("evaluation_conflict_resolution")
        .with_arguments(arguments(json!({"task_id": task_id})));
    request.input_responses = Some(
        answers
            .iter()
            .map(|id| ((*id).to_owned(), accepted()))
            .collect(),
    );
    request.request_state = Some(state.to_owned());
    client.call_tool_once(request).await
}

/// The conflicts of `task_id` in force, by id: whether each has a resolution.
fn resolutions(service: &Service, task_id: &str) -> Vec<(String, Value)> {
    let state = service.state(task_id).unwrap();
    let (conflicts, _) = service::conflicts_in_force(&state);
    conflicts
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["conflict_id"].as_str().unwrap().to_owned(),
                c["resolution"].clone(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_to_a_conflict_the_server_did_not_ask_about_records_nothing_even_beside_an_answer_it_asked_for()
 {
    let dir = tempfile::tempdir().unwrap();
    let service = service(dir.path());
    let bridge = Bridge::new(service.clone(), BridgeOptions::default());
    let client = asking_client(&bridge).await;
    let task_id = task_with_a_pending_conflict(&client).await;
    let first = asked(&client, &task_id).await;
    let asked_first: Vec<String> = first.input_requests.unwrap().keys().cloned().collect();
    assert_eq!(asked_first.len(), 1, "{asked_first:?}");

    // A second conflict, on a sub-question, asked about only by a later call.
    let expanded = call(
        &client,
        "research_expand_subquestions",
        json!({"task_id": task_id, "sub_questions": ["Is it rising faster?"]}),
    )
    .await;
    let sub_question = expanded["sub_questions"][0]["id"].clone();
    add_even_sides(&client, &task_id, sub_question).await;
    let second = asked(&client, &task_id).await;
    let asked_second: Vec<String> = second.input_requests.unwrap().keys().cloned().collect();
    assert_eq!(asked_second.len(), 2, "{asked_second:?}");
    let other = asked_second
        .iter()
        .find(|id| !asked_first.contains(id))
        .unwrap();

    // Both answered, with the state of the first question only.
    let state = first.request_state.unwrap();
    let response = answer(&client, &task_id, &state, &[&asked_first[0], other])
        .await
        .unwrap();
    let CallToolResponse::Complete(result) = response else {
        panic!("the answers are recorded at once: {response:?}");
    };
    let out = result.structured_content.unwrap();
    let decided: Vec<(String, Value)> = resolutions(&service, &task_id);
    assert_eq!(decided.len(), 2, "{decided:?}");
    for (id, resolution) in &decided {
        if *id == asked_first[0] {
            assert!(
                !resolution.is_null(),
                "the asked conflict is decided: {decided:?}"
            );
        } else {
            assert!(
                resolution.is_null(),
                "{id} was not asked and stays pending: {decided:?}"
            );
        }
    }
    let entries = out["elicitation"].as_array().unwrap();
    let entry_of = |id: &str| entries.iter().find(|e| e["conflict_id"] == id).unwrap();
    assert_eq!(entry_of(&asked_first[0])["recorded"], true, "{out}");
    assert_eq!(entry_of(other)["recorded"], false, "{out}");
    assert_eq!(entry_of(other)["action"], "no_answer", "{out}");
}

/// Sends one accepted answer to `conflict_id` of `task_id` with `state`, expecting `-32602`;
/// `label` names the case.
async fn refused(client: &Asking, task_id: &str, state: &str, conflict_id: &str, label: &str) {
    match answer(client, task_id, state, &[conflict_id]).await {
        Err(rmcp::ServiceError::McpError(e)) => {
            assert_eq!(e.code.0, -32602, "{label}: {e:?}");
        }
        other => panic!("{label}: a state this server did not issue is refused: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_state_forged_replayed_for_another_task_or_issued_before_a_restart_is_refused_with_invalid_params_and_records_nothing()
 {
    let dir = tempfile::tempdir().unwrap();
    let service = service(dir.path());
    let bridge = Bridge::new(service.clone(), BridgeOptions::default());
    let client = asking_client(&bridge).await;
    let task_id = task_with_a_pending_conflict(&client).await;
    let other_task = task_with_a_pending_conflict(&client).await;
    let first = asked(&client, &task_id).await;
    asked(&client, &other_task).await;
    let conflict_id = first.input_requests.unwrap().keys().next().unwrap().clone();
    let state = first.request_state.unwrap();
    let versions =
        |service: &Service| [&task_id, &other_task].map(|id| service.state(id).unwrap().version());
    let before = versions(&service);

    // One byte of the MAC flipped.
    let mut flipped = state.clone().into_bytes();
    let last = flipped.last_mut().unwrap();
    *last = if *last == b'0' { b'1' } else { b'0' };
    let flipped = String::from_utf8(flipped).unwrap();
    refused(&client, &task_id, &flipped, &conflict_id, "a flipped byte").await;
    // The state of one task replayed with another's task_id.
    refused(&client, &other_task, &state, &conflict_id, "another task").await;
    // The state issued by the server before a restart: the same ledger, a new process key.
    let restarted = Bridge::new(service.clone(), BridgeOptions::default());
    let after_restart = asking_client(&restarted).await;
    refused(&after_restart, &task_id, &state, &conflict_id, "a restart").await;

    assert_eq!(versions(&service), before, "nothing was recorded");
    for (id, resolution) in resolutions(&service, &task_id) {
        assert!(resolution.is_null(), "{id} stays pending");
    }
    // The state as issued is still good for this process: the refusals were the state's.
    answer(&client, &task_id, &state, &[&conflict_id])
        .await
        .unwrap();
    assert_ne!(
        versions(&service)[0],
        before[0],
        "the true answer is recorded"
    );
}

/// A 2025-11-25 client that declared form elicitation and whose person answers only long
/// after the server stopped waiting.
struct LatePerson;

impl rmcp::ClientHandler for LatePerson {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::builder().enable_elicitation().build(),
            Implementation::new("late-client", "1.0"),
        )
    }

    async fn create_elicitation(
        &self,
        _request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        Ok(serde_json::from_value(accepted()).unwrap())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_not_answered_within_the_elicitation_timeout_records_nothing_and_the_conflict_stays_pending()
 {
    let dir = tempfile::tempdir().unwrap();
    let service = service(dir.path());
    let bridge = impatient_bridge(&service);
    let setup = asking_client(&bridge).await;
    let task_id = task_with_a_pending_conflict(&setup).await;
    let (client_end, server_end) = tokio::io::duplex(1 << 20);
    let server = tokio::spawn(bridge.for_new_session().serve(server_end));
    let late = LatePerson.serve(client_end).await.unwrap();
    let _server = server.await.unwrap().unwrap();

    let out = call(
        &late,
        "evaluation_conflict_resolution",
        json!({"task_id": task_id}),
    )
    .await;
    let version = service.state(&task_id).unwrap().version();
    assert_eq!(out["elicitation"][0]["action"], "no_answer", "{out}");
    assert_eq!(out["elicitation"][0]["recorded"], false, "{out}");
    // The answer that comes after the time ran out is not recorded either.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert_eq!(service.state(&task_id).unwrap().version(), version);
    for (id, resolution) in resolutions(&service, &task_id) {
        assert!(resolution.is_null(), "{id} stays pending");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_sent_back_after_the_elicitation_timeout_record_nothing_in_the_2026_era() {
    let dir = tempfile::tempdir().unwrap();
    let service = service(dir.path());
    let bridge = impatient_bridge(&service);
    let client = asking_client(&bridge).await;
    let task_id = task_with_a_pending_conflict(&client).await;
    let first = asked(&client, &task_id).await;
    let conflict_id = first.input_requests.unwrap().keys().next().unwrap().clone();
    let version = service.state(&task_id).unwrap().version();
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;

    let response = answer(
        &client,
        &task_id,
        &first.request_state.unwrap(),
        &[&conflict_id],
    )
    .await
    .unwrap();
    let CallToolResponse::Complete(result) = response else {
        panic!("a late answer is answered at once: {response:?}");
    };
    let out = result.structured_content.unwrap();
    assert_eq!(out["elicitation"][0]["action"], "no_answer", "{out}");
    assert_eq!(out["elicitation"][0]["recorded"], false, "{out}");
    assert_eq!(service.state(&task_id).unwrap().version(), version);
    for (id, resolution) in resolutions(&service, &task_id) {
        assert!(resolution.is_null(), "{id} stays pending");
    }
}
