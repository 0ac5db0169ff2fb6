//! Tools by contract: checking contracts, calling a real HTTP server, and every way a reply can
//! break its contract.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Map, Value, json};
use sources::contracts::call::{self, TaskContext};
use sources::contracts::{
    CallError, Contract, ContractLimits, EndpointAllowList, Registry, TagDictionary, check_dir,
};

use test_support::LegacyApi;

pub(crate) fn kb_contract(endpoint: &str, timeout_ms: u64) -> String {
    format!(
        r#"name: kb_search
description: Searches the team's knowledge base for evidence on a question.
endpoint: {endpoint}
method: POST
contract_version: "2.1"
timeout_ms: {timeout_ms}
input_schema:
  query:
    type: string
    description: The question, unchanged.
    semantic_tag: search_query
  top_k:
    type: integer
    default: 3
    min: 1
    max: 10
    semantic_tag: result_limit
output_schema:
  results:
    type: array
    items:
      type: object
      properties:
        id: {{ type: string, semantic_tag: result_id }}
        text: {{ type: string, semantic_tag: evidence_content }}
        url: {{ type: string, semantic_tag: source_url }}
        publisher: {{ type: string, semantic_tag: publisher }}
        date: {{ type: string, semantic_tag: publish_date }}
        type: {{ type: string, semantic_tag: source_type }}
        stance: {{ type: string, semantic_tag: evidence_stance }}
        score: {{ type: number, semantic_tag: relevance_score }}
"#
    )
}

fn contract(text: &str) -> Contract {
    let c = Contract::parse(text, None).unwrap();
    let problems = c.problems(&TagDictionary::default(), &ContractLimits::default(), None);
    assert!(problems.is_empty(), "{problems:?}");
    c
}

fn args(value: Value) -> Map<String, Value> {
    value.as_object().unwrap().clone()
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

#[test]
fn contracts_check_reports_every_problem_with_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let ok = kb_contract("http://127.0.0.1:9/search", 2000);
    write(dir.path(), "kb.yaml", &ok);
    let bad_cases = [
        (
            "unknown-tag.yaml",
            ok.replace("semantic_tag: publisher", "semantic_tag: publsher")
                .replace("name: kb_search", "name: t1"),
            "output_schema.results[].publisher.semantic_tag",
        ),
        (
            "bad-default.yaml",
            ok.replace("default: 3", "default: 11")
                .replace("name: kb_search", "name: t2"),
            "input_schema.top_k.default",
        ),
        (
            "min-max.yaml",
            ok.replace("min: 1", "min: 12")
                .replace("name: kb_search", "name: t3"),
            "input_schema.top_k.min",
        ),
        (
            "bad-type.yaml",
            ok.replace("type: integer", "type: integr")
                .replace("name: kb_search", "name: t4"),
            "contract",
        ),
        (
            "not-allowed.yaml",
            ok.replace("http://127.0.0.1:9", "https://api.example.com")
                .replace("name: kb_search", "name: t5"),
            "endpoint",
        ),
        (
            "bad-name.yaml",
            ok.replace("name: kb_search", "name: kb.search"),
            "name",
        ),
        (
            "builtin.yaml",
            ok.replace("name: kb_search", "name: audit_verify"),
            "name",
        ),
        ("zz-duplicate.yaml", ok.clone(), "name"),
        (
            "reserved-arg.yaml",
            ok.replace("  query:\n", "  task_id:\n")
                .replace("name: kb_search", "name: t6"),
            "input_schema.task_id",
        ),
        (
            "enum.yaml",
            ok.replace(
                "    default: 3\n",
                "    default: 3\n    enum: [1, 2, \"three\"]\n",
            )
            .replace("name: kb_search", "name: t7"),
            "input_schema.top_k",
        ),
        (
            "slow.yaml",
            ok.replace("timeout_ms: 2000", "timeout_ms: 120001")
                .replace("name: kb_search", "name: t8"),
            "timeout_ms",
        ),
        (
            "long-name.yaml",
            ok.replace("name: kb_search", &format!("name: {}", "n".repeat(65))),
            "name",
        ),
        (
            "empty-name.yaml",
            ok.replace("name: kb_search", "name: ''"),
            "name",
        ),
    ];
    for (file, text, _) in &bad_cases {
        write(dir.path(), file, text);
    }
    // At the bounds: the slowest timeout and the longest name a contract may have.
    write(
        dir.path(),
        "at-the-bounds.yaml",
        &ok.replace("timeout_ms: 2000", "timeout_ms: 120000")
            .replace("name: kb_search", &format!("name: {}", "n".repeat(64))),
    );
    let (valid, problems) = check_dir(
        dir.path(),
        EndpointAllowList::default(),
        ContractLimits::default(),
        &["audit_verify"],
    );
    for (file, _, field) in &bad_cases {
        assert!(
            problems
                .iter()
                .any(|p| p.file.as_deref() == Some(&dir.path().join(file))
                    && p.field.starts_with(field)),
            "{file} should be reported at {field}: {problems:#?}"
        );
    }
    // The good contracts, the first of the duplicated name among them, are in force.
    assert_eq!(valid, 2, "{problems:#?}");
}

#[test]
fn arguments_are_checked_defaulted_and_filled_from_the_task() {
    let c = contract(&kb_contract("http://127.0.0.1:9/search", 2000));
    let dictionary = TagDictionary::default();
    let context = TaskContext {
        question: "Does lithium supply outgrow demand?".into(),
        ..TaskContext::default()
    };
    let prepared = call::prepare_arguments(
        &c,
        &args(json!({"query": "{{task_question}}"})),
        Some(&context),
        &dictionary,
    )
    .unwrap();
    assert_eq!(prepared["query"], "Does lithium supply outgrow demand?");
    assert_eq!(prepared["top_k"], 3, "the default is filled");
    let embedded = call::prepare_arguments(
        &c,
        &args(json!({"query": "about: {{user_intent}} (2024)"})),
        Some(&context),
        &dictionary,
    )
    .unwrap();
    assert_eq!(
        embedded["query"],
        "about: Does lithium supply outgrow demand? (2024)"
    );

    let refused = |a: Value, ctx: Option<&TaskContext>| {
        call::prepare_arguments(&c, &args(a), ctx, &dictionary).unwrap_err()
    };
    assert!(
        matches!(refused(json!({"query": "q", "colour": 1}), None), CallError::InvalidArgument { field, .. } if field == "colour")
    );
    assert!(
        matches!(refused(json!({}), None), CallError::InvalidArgument { field, .. } if field == "query")
    );
    assert!(
        matches!(refused(json!({"query": "q", "top_k": 11}), None), CallError::InvalidArgument { field, .. } if field == "top_k")
    );
    assert!(
        matches!(refused(json!({"query": 5}), None), CallError::InvalidArgument { field, .. } if field == "query")
    );
    assert!(
        matches!(refused(json!({"query": "{{task_question}}"}), None), CallError::InvalidArgument { message, .. } if message.contains("task_id"))
    );
    assert!(matches!(
        refused(json!({"query": "{{no_such_tag}}"}), Some(&context)),
        CallError::InvalidArgument { .. }
    ));
    assert!(matches!(
        refused(json!({"query": "{{publisher}}"}), Some(&context)),
        CallError::InvalidArgument { .. }
    ));
}

#[test]
fn a_well_behaved_tool_returns_checked_evidence() {
    let api = LegacyApi::start();
    let c = contract(&kb_contract(&api.url("/search"), 3000));
    let prepared = call::prepare_arguments(
        &c,
        &args(json!({"query": "lithium", "top_k": 2})),
        None,
        &TagDictionary::default(),
    )
    .unwrap();
    let reply = call::call(&c, &prepared, &EndpointAllowList::default(), 1 << 20).unwrap();
    let items = call::evidence_items(&c, &reply.value);
    assert_eq!(items.len(), 2);
    assert!(items[0].content.contains("lithium"));
    assert_eq!(
        items[0].publisher.as_deref(),
        Some("Example Mining Institute")
    );
    assert_eq!(items[0].result_id.as_deref(), Some("kb-1"));
    assert_eq!(items[0].stance.as_deref(), Some("supports"));
    assert!(call::is_evidence_source(&c));
    assert_eq!(reply.bytes, serde_json::to_vec(&reply.value).unwrap());

    // expected_output_tags keeps only what the caller wants.
    let filtered =
        call::filter_by_tags(&c, &reply.value, &["result_id".into(), "source_url".into()]);
    let first = &filtered["results"][0];
    assert_eq!(first["id"], "kb-1");
    assert!(
        first.get("text").is_none() && first.get("publisher").is_none(),
        "{filtered}"
    );
}

#[test]
fn every_misbehaviour_is_a_clear_error_at_once() {
    let api = LegacyApi::start();
    let allow = EndpointAllowList::default();
    let run = |path: &str, timeout_ms: u64| {
        let c = contract(&kb_contract(&api.url(path), timeout_ms));
        let prepared = call::prepare_arguments(
            &c,
            &args(json!({"query": "q"})),
            None,
            &TagDictionary::default(),
        )
        .unwrap();
        call::call(&c, &prepared, &allow, 1 << 20)
    };
    assert!(
        matches!(run("/missing-tag", 3000), Err(CallError::ContractViolation { detail, .. }) if detail.contains("evidence_content"))
    );
    assert!(
        matches!(run("/old-version", 3000), Err(CallError::ContractViolation { detail, .. }) if detail.contains("1.0"))
    );
    assert!(
        matches!(run("/no-version", 3000), Err(CallError::ContractViolation { detail, .. }) if detail.contains("contract_version"))
    );
    assert!(matches!(
        run("/slow", 300),
        Err(CallError::Timeout {
            timeout_ms: 300,
            ..
        })
    ));
    assert!(
        matches!(run("/error", 3000), Err(CallError::Failed { message, .. }) if message.contains("500"))
    );
    // A tool that is down.
    let down = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let c = contract(&kb_contract(&format!("http://{down}/search"), 3000));
    let prepared = call::prepare_arguments(
        &c,
        &args(json!({"query": "q"})),
        None,
        &TagDictionary::default(),
    )
    .unwrap();
    assert!(matches!(
        call::call(&c, &prepared, &allow, 1 << 20),
        Err(CallError::Failed { .. })
    ));
    // An endpoint off the allow-list is never contacted.
    let strict = EndpointAllowList::new(vec!["https://api.example.org".into()]);
    assert!(matches!(
        call::call(&c, &prepared, &strict, 1 << 20),
        Err(CallError::NotAllowed { .. })
    ));
}

/// Reads one HTTP/1.1 request (head and declared body) off `stream`.
fn read_request(stream: &TcpStream) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream);
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line.trim().is_empty() {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
    }
    reader.read_exact(&mut vec![0u8; length])
}

/// Serves every connection to a fresh loopback port with `answer`, on a thread of its own.
fn serve_loopback(answer: impl Fn(TcpStream) + Send + Sync + 'static) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let answer = Arc::new(answer);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let answer = answer.clone();
            std::thread::spawn(move || answer(stream));
        }
    });
    addr
}

/// A tool that would keep its contract: it counts the connections it gets, then answers each
/// with a valid reply of [`kb_contract`].
fn counting_tool() -> (SocketAddr, Arc<AtomicUsize>) {
    let contacted = Arc::new(AtomicUsize::new(0));
    let count = contacted.clone();
    let addr = serve_loopback(move |mut stream| {
        count.fetch_add(1, Ordering::SeqCst);
        let body = json!({"contract_version": "2.1", "results": test_support::items(1, "q")});
        let body = body.to_string();
        if read_request(&stream).is_ok() {
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (addr, contacted)
}

/// A tool that answers every request with `status` and `Location: {target}`.
fn redirecting_tool(status: u16, target: &str) -> SocketAddr {
    let target = target.to_owned();
    serve_loopback(move |mut stream| {
        if read_request(&stream).is_ok() {
            let _ = write!(
                stream,
                "HTTP/1.1 {status} Moved\r\nLocation: {target}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
        }
    })
}

#[test]
fn a_tool_that_redirects_fails_and_no_redirect_is_followed_whether_or_not_its_target_is_allowed() {
    let (target, contacted) = counting_tool();
    let target_url = format!("http://{target}/search");
    let prepared = |c: &Contract| {
        call::prepare_arguments(
            c,
            &args(json!({"query": "q"})),
            None,
            &TagDictionary::default(),
        )
        .unwrap()
    };
    // The target keeps the contract: called directly, it answers, and is counted.
    let direct = contract(&kb_contract(&target_url, 3000));
    let reply = call::call(
        &direct,
        &prepared(&direct),
        &EndpointAllowList::default(),
        1 << 20,
    );
    assert!(reply.is_ok(), "{reply:?}");
    assert_eq!(contacted.load(Ordering::SeqCst), 1);

    // 307 and 308 keep the method and the body: a client that followed them would send the
    // same call on to the target.
    for status in [301, 302, 303, 307, 308] {
        let tool = redirecting_tool(status, &target_url);
        let c = contract(&kb_contract(&format!("http://{tool}/search"), 3000));
        let target_allowed = EndpointAllowList::default();
        let tool_alone = EndpointAllowList::new(vec![format!("http://{tool}")]);
        assert!(target_allowed.allows(&target_url) && !tool_alone.allows(&target_url));
        for allow in [target_allowed, tool_alone] {
            let outcome = call::call(&c, &prepared(&c), &allow, 1 << 20);
            assert!(
                matches!(&outcome, Err(CallError::Failed { message, .. }) if message.contains(&status.to_string())),
                "{status}: {outcome:?}"
            );
            assert_eq!(
                contacted.load(Ordering::SeqCst),
                1,
                "{status} was followed to {target_url}"
            );
        }
    }
}

#[test]
fn a_get_tool_sends_its_arguments_as_a_query_string() {
    let api = LegacyApi::start();
    let text = format!(
        r#"name: weather_api
description: Current weather of a city.
endpoint: {}
method: GET
contract_version: "1"
input_schema:
  city: {{ type: string, semantic_tag: location_name }}
  units: {{ type: string, default: celsius, enum: [celsius, fahrenheit] }}
output_schema:
  current:
    type: object
    properties:
      temp: {{ type: number }}
      condition: {{ type: string, semantic_tag: actionable_step }}
"#,
        api.url("/weather")
    );
    let c = contract(&text);
    let prepared = call::prepare_arguments(
        &c,
        &args(json!({"city": "Qingchuan"})),
        None,
        &TagDictionary::default(),
    )
    .unwrap();
    let reply = call::call(&c, &prepared, &EndpointAllowList::default(), 1 << 20).unwrap();
    assert_eq!(reply.value["current"]["condition"], "sunny in Qingchuan");
    assert!(!call::is_evidence_source(&c));
    let sample = call::sample_arguments(&c);
    assert_eq!(sample["units"], "celsius");
}

#[test]
fn registration_persists_and_removal_removes() {
    let dir = tempfile::tempdir().unwrap();
    let mut registry = Registry::load(
        dir.path(),
        EndpointAllowList::default(),
        ContractLimits::default(),
        &[],
    );
    assert!(registry.tools().is_empty());
    let text = kb_contract("http://127.0.0.1:9/search", 2000);
    registry.register(&text).unwrap();
    assert!(dir.path().join("tools/kb_search.yaml").exists());
    let again = Registry::load(
        dir.path(),
        EndpointAllowList::default(),
        ContractLimits::default(),
        &[],
    );
    assert!(again.get("kb_search").is_some());
    assert!(
        registry
            .register(&text.replace("default: 3", "default: 30"))
            .is_err()
    );
    std::fs::write(
        dir.path().join("fallbacks.yaml"),
        "fallbacks:\n  printer_repair_manual: kb_search\n",
    )
    .unwrap();
    assert!(registry.changed());
    registry.reload();
    assert_eq!(
        registry.fallback("printer_repair_manual"),
        Some("kb_search")
    );
    registry.unregister("kb_search").unwrap();
    assert!(registry.get("kb_search").is_none());
    assert!(!dir.path().join("tools/kb_search.yaml").exists());
    assert!(registry.unregister("kb_search").is_err());
}

#[test]
fn a_tool_named_like_the_directorys_own_files_never_touches_them() {
    let dir = tempfile::tempdir().unwrap();
    let fallbacks = "fallbacks:\n  printer_repair_manual: kb_search\n";
    let tags = "tags:\n  ticket_id:\n    description: A ticket of the help desk.\n";
    std::fs::write(dir.path().join("fallbacks.yaml"), fallbacks).unwrap();
    std::fs::write(dir.path().join("semantic-tags.yaml"), tags).unwrap();
    let load = || {
        Registry::load(
            dir.path(),
            EndpointAllowList::default(),
            ContractLimits::default(),
            &[],
        )
    };
    let mut registry = load();
    registry
        .register(&kb_contract("http://127.0.0.1:9/search", 2000))
        .unwrap();
    let problems_before = registry.problems().len();
    for name in ["fallbacks", "semantic-tags"] {
        let text = kb_contract("http://127.0.0.1:9/search", 2000)
            .replace("name: kb_search", &format!("name: {name}"));
        registry.register(&text).unwrap();
        assert!(registry.get(name).is_some(), "{name}");
        assert!(dir.path().join(format!("tools/{name}.yaml")).exists());
    }
    // The server's own files are as they were, and still in force.
    assert_eq!(
        std::fs::read_to_string(dir.path().join("fallbacks.yaml")).unwrap(),
        fallbacks
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("semantic-tags.yaml")).unwrap(),
        tags
    );
    assert_eq!(
        registry.fallback("printer_repair_manual"),
        Some("kb_search")
    );
    assert_eq!(
        registry.problems().len(),
        problems_before,
        "{:?}",
        registry.problems()
    );
    // And registering is undone by removing, the server's files untouched.
    registry.unregister("fallbacks").unwrap();
    registry.unregister("semantic-tags").unwrap();
    assert!(registry.get("fallbacks").is_none());
    assert!(dir.path().join("fallbacks.yaml").exists());
    assert_eq!(load().fallback("printer_repair_manual"), Some("kb_search"));
}

#[test]
fn a_contract_left_in_a_reserved_file_is_moved_out_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let text = kb_contract("http://127.0.0.1:9/search", 2000)
        .replace("name: kb_search", "name: fallbacks");
    // What registering `fallbacks` wrote before registrations had a folder of their own.
    std::fs::write(dir.path().join("fallbacks.yaml"), &text).unwrap();
    let registry = Registry::load(
        dir.path(),
        EndpointAllowList::default(),
        ContractLimits::default(),
        &[],
    );
    assert!(!dir.path().join("fallbacks.yaml").exists());
    assert_eq!(
        std::fs::read_to_string(dir.path().join("tools/fallbacks.yaml")).unwrap(),
        text
    );
    assert!(registry.get("fallbacks").is_some());
    assert!(registry.problems().is_empty(), "{:?}", registry.problems());
}
