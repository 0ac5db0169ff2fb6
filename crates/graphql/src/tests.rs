//! Tests of the schema itself, executed in process against a service in a temporary directory.
//! The tests through real HTTP and WebSocket are the binary's (`tests/it/graphql.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use expect_test::expect_file;

#[test]
fn the_checked_in_schema_is_the_schema() {
    // On failure: `UPDATE_EXPECT=1 cargo test -p graphql the_checked_in_schema` rewrites
    // crates/graphql/schema.graphql; review the diff as a change to a public contract.
    expect_file!["../schema.graphql"].assert_eq(&crate::sdl());
}

use async_graphql::{Request, Variables};
use serde_json::{Value, json};
use service::{Service, ServiceOptions};

use crate::{Limits, Options, ResearchSchema, build_schema};

fn schema_with(limits: Limits) -> (tempfile::TempDir, ResearchSchema) {
    let dir = tempfile::tempdir().unwrap();
    let mut options = ServiceOptions::new(dir.path());
    options.ledger.checkpoint_interval = None;
    let service = Service::open(options).unwrap();
    let schema = build_schema(
        service,
        Options {
            limits,
            ..Options::default()
        },
    );
    (dir, schema)
}

async fn run(schema: &ResearchSchema, query: &str, variables: Value) -> Value {
    let response = schema
        .execute(Request::new(query).variables(Variables::from_json(variables)))
        .await;
    serde_json::to_value(&response).unwrap()
}

/// The introspection query GraphiQL and most code generators send (graphql-js 16), whose
/// `ofType` chain is the deepest thing a legitimate client asks for.
const INTROSPECTION: &str = r#"
query IntrospectionQuery {
  __schema {
    queryType { name } mutationType { name } subscriptionType { name }
    types { ...FullType }
    directives { name description locations args { ...InputValue } }
  }
}
fragment FullType on __Type {
  kind name description
  fields(includeDeprecated: true) {
    name description args { ...InputValue } type { ...TypeRef } isDeprecated deprecationReason
  }
  inputFields { ...InputValue }
  interfaces { ...TypeRef }
  enumValues(includeDeprecated: true) { name description isDeprecated deprecationReason }
  possibleTypes { ...TypeRef }
}
fragment InputValue on __InputValue { name description type { ...TypeRef } defaultValue }
fragment TypeRef on __Type {
  kind name
  ofType { kind name ofType { kind name ofType { kind name ofType { kind name
    ofType { kind name ofType { kind name ofType { kind name } } } } } } }
}
"#;

#[tokio::test]
async fn the_introspection_query_fits_the_default_limits_and_a_deeper_one_does_not() {
    let (_dir, schema) = schema_with(Limits::default());
    let out = run(&schema, INTROSPECTION, json!({})).await;
    assert!(out.get("errors").is_none(), "{out}");
    assert!(out["data"]["__schema"]["types"].as_array().unwrap().len() > 50);

    // Introspection has cycles, so it is where depth needs its bound.
    let mut deep = String::from("{ __schema { types { fields { type { ");
    for _ in 0..12 {
        deep.push_str("ofType { ");
    }
    deep.push_str("name");
    deep.push_str(&" }".repeat(17));
    let out = run(&schema, &deep, json!({})).await;
    let error = &out["errors"][0];
    assert_eq!(error["extensions"]["code"], "LIMIT_EXCEEDED", "{out}");
    assert_eq!(error["extensions"]["limit"], "graphql_depth_levels_max");
    assert_eq!(error["extensions"]["max"], 15);
    assert_eq!(error["extensions"]["actual"], 17);
    assert!(out["data"].is_null(), "nothing ran: {out}");
}

#[test]
fn every_write_tool_has_a_mutation_and_every_listed_mutation_exists() {
    let sdl = crate::sdl();
    for spec in service::tool_specs() {
        if spec.read_only {
            continue;
        }
        assert!(
            crate::mutation::MUTATION_TOOLS
                .iter()
                .any(|(_, tool)| tool.name() == spec.name),
            "the tool {} has no mutation",
            spec.name
        );
    }
    for (mutation, _) in crate::mutation::MUTATION_TOOLS {
        assert!(
            sdl.contains(&format!("\t{mutation}(")),
            "{mutation} is not in the schema"
        );
    }
}

/// Opens a task and makes one conflict in it, adjudicated by the rules: by authority when the
/// sides' source types are far apart, else left pending (same type, same day).
async fn task_with_conflict(schema: &ResearchSchema, opposing_type: &str) -> String {
    let out = run(
        schema,
        r#"mutation { openTask(input: {question: "Does the sea level rise?", researchDate: "2025-06-30"}) { taskId } }"#,
        json!({}),
    )
    .await;
    let task = out["data"]["openTask"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{out}"))
        .to_owned();
    for (source, source_type, stance) in [
        ("tide-office.example.org", "GOVERNMENT", "SUPPORTS"),
        ("coast-blog.example.org", opposing_type, "OPPOSES"),
    ] {
        let out = run(
            schema,
            r#"mutation($t: ID!, $s: String!, $ty: SourceType!, $st: Stance!) {
                addEvidence(taskId: $t, input: {source: $s, publishDate: "2025-03-01", sourceType: $ty,
                    content: $s, stance: $st}) { sessionVersion }
            }"#,
            json!({"t": task, "s": source, "ty": source_type, "st": stance}),
        )
        .await;
        assert!(out.get("errors").is_none(), "{out}");
    }
    let out = run(
        schema,
        r#"mutation($t: ID!) {
            screenEvidence(taskId: $t, decisions: [{evidenceId: "ev-1", adopt: true}, {evidenceId: "ev-2", adopt: true}]) { sessionVersion }
            runConflictResolution(taskId: $t) { sessionVersion }
        }"#,
        json!({"t": task}),
    )
    .await;
    assert!(out.get("errors").is_none(), "{out}");
    task
}

const DECIDE: &str = r#"mutation($t: ID!, $c: ID!, $appeal: Boolean!) {
    resolve: resolveConflict(taskId: $t, conflictId: $c, winner: SUPPORTS, reason: "gauges agree") @skip(if: $appeal) { replayed }
    appeal: appealAdjudication(taskId: $t, conflictId: $c, winner: OPPOSES, reason: "the blog measured it") @include(if: $appeal) { replayed }
}"#;

#[tokio::test]
async fn resolutions_are_for_pending_conflicts_and_appeals_for_decided_ones() {
    let (_dir, schema) = schema_with(Limits::default());

    let pending = task_with_conflict(&schema, "GOVERNMENT").await;
    let out = run(
        &schema,
        r#"query($t: ID!) { task(id: $t) { conflicts { conflictId tier automaticTier } } }"#,
        json!({"t": pending}),
    )
    .await;
    assert_eq!(
        out["data"]["task"]["conflicts"],
        json!([{"conflictId": "cf-1", "tier": "PENDING", "automaticTier": "PENDING"}])
    );
    let out = run(
        &schema,
        DECIDE,
        json!({"t": pending, "c": "cf-1", "appeal": true}),
    )
    .await;
    let error = &out["errors"][0];
    assert_eq!(error["extensions"]["code"], "INVALID_ARGUMENT", "{out}");
    assert_eq!(error["extensions"]["field"], "conflictId");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("resolveConflict"),
        "{out}"
    );
    let out = run(
        &schema,
        DECIDE,
        json!({"t": pending, "c": "cf-1", "appeal": false}),
    )
    .await;
    assert_eq!(out["data"]["resolve"]["replayed"], false, "{out}");

    let decided = task_with_conflict(&schema, "BLOG").await;
    let out = run(
        &schema,
        DECIDE,
        json!({"t": decided, "c": "cf-1", "appeal": false}),
    )
    .await;
    let error = &out["errors"][0];
    assert_eq!(error["extensions"]["code"], "INVALID_ARGUMENT", "{out}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("appealAdjudication"),
        "{out}"
    );
    let out = run(
        &schema,
        DECIDE,
        json!({"t": decided, "c": "cf-1", "appeal": true}),
    )
    .await;
    assert_eq!(out["data"]["appeal"]["replayed"], false, "{out}");
    let out = run(
        &schema,
        r#"query($t: ID!) { task(id: $t) { conflicts { tier automaticTier winner humanDecisions { kind outcome actor } } } }"#,
        json!({"t": decided}),
    )
    .await;
    assert_eq!(
        out["data"]["task"]["conflicts"],
        json!([{"tier": "HUMAN", "automaticTier": "AUTHORITY", "winner": "OPPOSES",
                "humanDecisions": [{"kind": "APPEAL", "outcome": "OPPOSES", "actor": "local"}]}])
    );
}

#[tokio::test]
async fn a_verdict_reads_with_its_history_explanation_and_why_graph() {
    let (_dir, schema) = schema_with(Limits::default());
    let task = task_with_conflict(&schema, "BLOG").await;
    let steps = r#"mutation($t: ID!) {
        buildDecisionMatrix(taskId: $t) { sessionVersion }
        generateConclusion(taskId: $t) { sessionVersion result }
        explainReasoning(taskId: $t) { sessionVersion }
    }"#;
    let out = run(&schema, steps, json!({"t": task})).await;
    assert!(out.get("errors").is_none(), "{out}");
    let issued = out["data"]["generateConclusion"]["result"].clone();

    let out = run(
        &schema,
        r#"query($t: ID!) { task(id: $t) {
            status
            decisionMatrix { rows { evidenceId status } aggregates { stance items } }
            conclusion { conclusionId stance confidence components { relevance consistency recency diversity }
                         evidence { evidenceId } adjudications { conflictId tier winner } current stale markdown }
            explanation { conclusionId markdown lines { index parent cites { seq hash } } }
            whyGraph { conclusionId root nodes { id kind } edges { from to kind } }
            evidence { evidenceId status content contentHash }
        } }"#,
        json!({"t": task}),
    )
    .await;
    assert!(out.get("errors").is_none(), "{out}");
    let t = &out["data"]["task"];
    assert_eq!(t["status"], "CONCLUDED");
    // The government item outranks the blog by authority: the blog's item is overruled.
    assert_eq!(
        t["decisionMatrix"]["rows"],
        json!([{"evidenceId": "ev-1", "status": "ADOPTED"}, {"evidenceId": "ev-2", "status": "OVERRULED"}])
    );
    let c = &t["conclusion"];
    assert_eq!(c["conclusionId"], issued["conclusion_id"]);
    assert_eq!(c["confidence"], issued["confidence"]);
    assert_eq!(
        c["components"]["relevance"],
        issued["components"]["relevance"]
    );
    assert_eq!(c["evidence"], json!([{"evidenceId": "ev-1"}]));
    assert_eq!(
        c["adjudications"],
        json!([{"conflictId": "cf-1", "tier": "AUTHORITY", "winner": "SUPPORTS"}])
    );
    assert_eq!(
        (c["current"].clone(), c["stale"].clone()),
        (json!(true), json!(false))
    );
    assert_eq!(c["markdown"], issued["markdown"]);
    assert_eq!(t["explanation"]["conclusionId"], c["conclusionId"]);
    let lines = t["explanation"]["lines"].as_array().unwrap();
    assert!(lines.len() > 3, "{lines:?}");
    assert!(lines.iter().skip(1).all(|l| !l["parent"].is_null()));
    assert!(
        lines
            .iter()
            .any(|l| !l["cites"].as_array().unwrap().is_empty())
    );

    let graph = &t["whyGraph"];
    assert_eq!(graph["root"], "conclusion/cl-1");
    let nodes: Vec<(&str, &str)> = graph["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["id"].as_str().unwrap(), n["kind"].as_str().unwrap()))
        .collect();
    for wanted in [
        ("conclusion/cl-1", "conclusion"),
        ("component/relevance", "component"),
        ("evidence/ev-1", "evidence"),
        ("evidence/ev-2", "evidence"),
        ("conflict/cf-1", "conflict"),
    ] {
        assert!(nodes.contains(&wanted), "{wanted:?} not in {nodes:?}");
    }
    let edges = graph["edges"].as_array().unwrap();
    assert!(edges.contains(
        &json!({"from": "conclusion/cl-1", "to": "conflict/cf-1", "kind": "ADJUDICATION"})
    ));
    assert!(
        edges.contains(
            &json!({"from": "conflict/cf-1", "to": "evidence/ev-2", "kind": "OVERRULED"})
        )
    );

    // The full text comes from the content store, and has the hash the event records.
    let item = &t["evidence"][0];
    assert_eq!(item["content"], "tide-office.example.org");
    assert_eq!(
        item["contentHash"],
        service::research::Hash32(*blake3::hash(b"tide-office.example.org").as_bytes()).to_hex()
    );

    // An appeal makes the verdict stale; a new one supersedes it, and the history says so.
    let appeal = run(
        &schema,
        r#"mutation($t: ID!) {
            appealAdjudication(taskId: $t, conflictId: "cf-1", winner: BOTH_STAND, reason: "both measured") {
                state { status conclusion { stale staleCause { kind subject } } }
            }
        }"#,
        json!({"t": task}),
    )
    .await;
    assert_eq!(
        appeal["data"]["appealAdjudication"]["state"],
        json!({"status": "STALE", "conclusion": {"stale": true,
               "staleCause": {"kind": "adjudication_appealed", "subject": "cf-1"}}}),
        "{appeal}"
    );
    let out = run(&schema, steps, json!({"t": task})).await;
    assert!(out.get("errors").is_none(), "{out}");
    let out = run(
        &schema,
        r#"query($t: ID!) { task(id: $t) {
            conclusions { conclusionId current stale supersedes supersededBy }
            whyGraph(conclusionId: "cl-1") { conclusionId asOfVersion }
        } }"#,
        json!({"t": task}),
    )
    .await;
    assert_eq!(
        out["data"]["task"]["conclusions"],
        json!([
            {"conclusionId": "cl-1", "current": false, "stale": true, "supersedes": null, "supersededBy": "cl-2"},
            {"conclusionId": "cl-2", "current": true, "stale": false, "supersedes": "cl-1", "supersededBy": null},
        ]),
        "{out}"
    );
    assert_eq!(out["data"]["task"]["whyGraph"]["conclusionId"], "cl-1");
}

#[tokio::test]
async fn the_key_chain_and_the_cosignatures_of_a_checkpoint_are_read_as_the_log_keeps_them() {
    use service::ledger::ledger_proof::{Cosignature, SigningKey};
    let dir = tempfile::tempdir().unwrap();
    let mut options = ServiceOptions::new(dir.path());
    options.ledger.checkpoint_interval = None;
    let service = Service::open(options).unwrap();
    let schema = build_schema(service.clone(), Options::default());
    let ledger = service.ledger().clone();
    let first_key = ledger.public_key().unwrap();
    let (first, rotation, witness) = tokio::task::spawn_blocking(move || {
        let first = ledger.checkpoint().unwrap();
        let rotation = ledger.rotate_key().unwrap();
        let witness = SigningKey::from_secret_bytes(&[7; 32]);
        let cosignature =
            Cosignature::sign(&witness, "witness.example", &first, 1_700_000_000).unwrap();
        ledger.record_cosignature(cosignature).unwrap();
        (first, rotation, witness)
    })
    .await
    .unwrap();
    // A checkpoint of a larger tree, which the witness did not cosign.
    let opened = run(
        &schema,
        "mutation { openTask(input: {question: \"Is it?\"}) { taskId } }",
        json!({}),
    )
    .await;
    assert!(opened.get("errors").is_none(), "{opened}");
    let ledger = service.ledger().clone();
    tokio::task::spawn_blocking(move || ledger.checkpoint().unwrap())
        .await
        .unwrap();
    let query = "{ ledger { origin publicKey keyChain { kind publicKey keyFingerprint origin treeSize root time oldKeyFingerprint signature reason }
                 checkpoints { origin treeSize cosignatures { witness timestamp signature } } } }";
    let out = run(&schema, query, json!({})).await;
    assert!(out.get("errors").is_none(), "{out}");
    let ledger = &out["data"]["ledger"];
    let chain = ledger["keyChain"].as_array().unwrap();
    assert_eq!(chain.len(), 2, "{out}");
    assert_eq!(chain[0]["kind"], "INTRODUCED");
    assert_eq!(chain[0]["publicKey"], first_key.to_string());
    assert!(chain[0]["signature"].is_null() && chain[0]["reason"].is_string());
    assert_eq!(chain[1]["kind"], "ROTATION");
    assert_eq!(chain[1]["publicKey"], rotation.new_public_key.to_string());
    assert_eq!(
        chain[1]["publicKey"], ledger["publicKey"],
        "the key in force is the last"
    );
    assert_eq!(
        chain[1]["oldKeyFingerprint"],
        first_key.fingerprint().to_string()
    );
    assert_eq!(chain[1]["signature"], rotation.signature.to_string());
    assert_eq!(chain[1]["root"], rotation.root.to_string());
    assert_eq!(ledger["origin"], first.origin);
    let checkpoints = ledger["checkpoints"].as_array().unwrap();
    assert_eq!(checkpoints[0]["origin"], first.origin);
    let cosignatures = checkpoints[0]["cosignatures"].as_array().unwrap();
    assert_eq!(cosignatures.len(), 1, "{out}");
    assert_eq!(cosignatures[0]["timestamp"], 1_700_000_000u64);
    let vkey = cosignatures[0]["witness"].as_str().unwrap();
    assert!(vkey.starts_with("witness.example+"), "{vkey}");
    // Only the checkpoint it cosigns carries it.
    let later = checkpoints.last().unwrap();
    assert_eq!(later["treeSize"], 1, "{out}");
    assert_eq!(later["cosignatures"], json!([]), "{out}");
    drop(witness);
}

#[tokio::test]
async fn checkpoints_are_read_a_page_at_a_time_newest_last_with_their_cosignatures() {
    use service::ledger::ledger_proof::{Cosignature, SigningKey};
    let dir = tempfile::tempdir().unwrap();
    let mut options = ServiceOptions::new(dir.path());
    options.ledger.checkpoint_interval = None;
    let service = Service::open(options).unwrap();
    let schema = build_schema(service.clone(), Options::default());
    // 45 checkpoints, each of a larger tree; a witness cosigns every fifth.
    for i in 0..45u64 {
        let opened = run(
            &schema,
            "mutation($q: String!) { openTask(input: {question: $q}) { taskId } }",
            json!({"q": format!("Question {i}?")}),
        )
        .await;
        assert!(opened.get("errors").is_none(), "{opened}");
        let ledger = service.ledger().clone();
        tokio::task::spawn_blocking(move || {
            let checkpoint = ledger.checkpoint().unwrap();
            if i % 5 == 0 {
                let witness = SigningKey::from_secret_bytes(&[9; 32]);
                let cosignature =
                    Cosignature::sign(&witness, "witness.example", &checkpoint, 1_700_000_000 + i)
                        .unwrap();
                ledger.record_cosignature(cosignature).unwrap();
            }
        })
        .await
        .unwrap();
    }
    let page = |args: &str| {
        format!(
            "{{ ledger {{ checkpointCount checkpoints{args} {{ entry treeSize cosignatures {{ timestamp }} }} }} }}"
        )
    };
    let read = |out: &serde_json::Value| -> Vec<(u64, u64, Vec<u64>)> {
        out["data"]["ledger"]["checkpoints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["entry"].as_u64().unwrap(),
                    c["treeSize"].as_u64().unwrap(),
                    c["cosignatures"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|s| s["timestamp"].as_u64().unwrap())
                        .collect(),
                )
            })
            .collect()
    };

    // Unasked, the newest 20, oldest first.
    let out = run(&schema, &page(""), json!({})).await;
    assert!(out.get("errors").is_none(), "{out}");
    assert_eq!(out["data"]["ledger"]["checkpointCount"], 45, "{out}");
    let newest = read(&out);
    assert_eq!(newest.len(), 20);
    assert!(
        newest
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1)
    );
    let sizes: Vec<u64> = service
        .ledger()
        .checkpoints()
        .unwrap()
        .iter()
        .map(|c| c.tree_size)
        .collect();
    assert_eq!(newest.last().unwrap().1, *sizes.last().unwrap());

    // Page after page back to the first, by the first entry of each: every checkpoint once,
    // each with the cosignature of it and no other.
    let mut all = newest;
    loop {
        let before = all[0].0;
        let out = run(
            &schema,
            &page(&format!("(last: 20, beforeEntry: {before})")),
            json!({}),
        )
        .await;
        assert!(out.get("errors").is_none(), "{out}");
        let earlier = read(&out);
        if earlier.is_empty() {
            break;
        }
        assert!(earlier.last().unwrap().0 < before);
        all.splice(0..0, earlier);
    }
    assert_eq!(all.iter().map(|c| c.1).collect::<Vec<_>>(), sizes);
    for (i, (_, _, cosigned)) in all.iter().enumerate() {
        let expected: Vec<u64> = if i % 5 == 0 {
            vec![1_700_000_000 + i as u64]
        } else {
            Vec::new()
        };
        assert_eq!(*cosigned, expected, "checkpoint {i}");
    }

    // A page is bounded like every other.
    for (args, code) in [
        ("(last: 0)", "INVALID_ARGUMENT"),
        ("(last: 100000)", "LIMIT_EXCEEDED"),
    ] {
        let out = run(&schema, &page(args), json!({})).await;
        assert_eq!(
            out["errors"][0]["extensions"]["code"], code,
            "{args}: {out}"
        );
    }
}
