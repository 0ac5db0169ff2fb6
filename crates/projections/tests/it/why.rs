//! The why-graph: a conclusion down to its components, evidence, adjudications (overruled
//! items included) and human decisions, every node citing a real event of the ledger.

use std::collections::{BTreeMap, BTreeSet};

use projections::{
    Component, EdgeKind, NodeDetail, Projector, QueryError, Superseded, WhyGraph, WhyNode,
};
use research::Command;
use research::event::{EvidenceStatus, HumanOutcome, Side, Tier};
use research::ids::ConclusionId;
use research::rules::{Mode, Stance};
use research::state::HumanDecisionKind;

use crate::support::*;

/// A task whose main question has a conflict the rules leave pending (same authority, dates
/// nine days apart) and a person resolves for `supports`, and whose sub-question has one the
/// rules decide by authority and a person appeals; one neutral item besides.
fn resolved_by_a_person() -> (World, Projector) {
    let ledger = memory_ledger(31);
    let mut world = World::new(&ledger);
    world.ok(
        "lithium",
        open_task(
            "lithium",
            "Does lithium demand grow faster than supply?",
            &[],
            Mode::ToolConstrained,
        ),
    );
    world.ok("lithium", sub_questions(&["Is supply constrained?"]));
    world.ok(
        "lithium",
        add(vec![
            item(
                "a.example.org",
                "blog",
                "2025-06-01",
                Some(Stance::Supports),
            ),
            item("b.example.org", "blog", "2025-06-10", Some(Stance::Opposes)),
            item(
                "c.example.gov",
                "government",
                "2025-05-01",
                Some(Stance::Neutral),
            ),
            in_scope(
                item(
                    "d.example.gov",
                    "government",
                    "2025-03-01",
                    Some(Stance::Supports),
                ),
                "sq-1",
            ),
            in_scope(
                item("e.example.org", "blog", "2025-03-02", Some(Stance::Opposes)),
                "sq-1",
            ),
        ]),
    );
    let state = world.states["lithium"].clone();
    world.ok("lithium", adopt_all(&state));
    world.ok("lithium", Command::RunConflictResolution);
    let state = world.states["lithium"].clone();
    let pending = state
        .current_conflicts()
        .find(|c| c.adjudication.tier == Tier::Pending)
        .unwrap()
        .id()
        .to_string();
    let automatic = state
        .current_conflicts()
        .find(|c| c.adjudication.tier == Tier::Authority)
        .unwrap()
        .id()
        .to_string();
    world.ok_as(
        "rita",
        "lithium",
        resolve(
            &pending,
            HumanOutcome::Supports,
            "the opposing blog misreads the data",
        ),
    );
    world.ok_as(
        "rita",
        "lithium",
        resolve(
            &automatic,
            HumanOutcome::BothStand,
            "both describe different mines",
        ),
    );
    world.ok("lithium", Command::BuildDecisionMatrix);
    world.ok("lithium", Command::GenerateConclusion);
    let projector = projector(&world.ledger);
    (world, projector)
}

fn node<'a>(graph: &'a WhyGraph, id: &str) -> &'a WhyNode {
    graph
        .nodes
        .iter()
        .find(|n| n.id == id)
        .unwrap_or_else(|| panic!("no node {id} in {:#?}", graph.nodes))
}

fn edges_from<'a>(graph: &'a WhyGraph, from: &str) -> Vec<(&'a str, EdgeKind)> {
    graph
        .edges
        .iter()
        .filter(|e| e.from == from)
        .map(|e| (e.to.as_str(), e.kind))
        .collect()
}

/// What every graph must be: ids unique, edges between known nodes, every node reachable from
/// the root, every node citing the event of the ledger it names.
fn check_shape(graph: &WhyGraph, world: &World) {
    let ids: BTreeSet<&str> = graph.nodes.iter().map(|n| n.id.as_str()).collect();
    assert_eq!(ids.len(), graph.nodes.len(), "node ids are unique");
    assert_eq!(graph.nodes[0].id, graph.root);
    for edge in &graph.edges {
        assert!(ids.contains(edge.from.as_str()), "{edge:?}");
        assert!(ids.contains(edge.to.as_str()), "{edge:?}");
    }
    let mut reached = BTreeSet::from([graph.root.as_str()]);
    let mut frontier = vec![graph.root.as_str()];
    while let Some(at) = frontier.pop() {
        for (to, _) in edges_from(graph, at) {
            if reached.insert(to) {
                frontier.push(to);
            }
        }
    }
    assert_eq!(reached, ids, "every node is reachable from the conclusion");
    for n in &graph.nodes {
        let event = world.ledger.get(n.cite.seq).unwrap().unwrap();
        assert_eq!(event.hash.0, n.cite.hash.0, "{}", n.id);
        assert_eq!(event.stream_version, n.cite.version, "{}", n.id);
        assert_eq!(event.stream, graph.task_id);
        assert_eq!(event.actor, n.actor, "{}", n.id);
        assert!(n.cite.version <= graph.as_of_version, "{}", n.id);
    }
}

#[test]
fn a_conclusion_rests_on_components_evidence_adjudications_and_people() {
    let (world, projector) = resolved_by_a_person();
    let graph = projector.why_graph("lithium", None).unwrap();
    check_shape(&graph, &world);
    assert_eq!(graph.conclusion_id, ConclusionId::nth(1));
    // The shape front ends serialise: tagged details, hashes in hex.
    let json = serde_json::to_value(&graph).unwrap();
    assert_eq!(json["root"], "conclusion/cl-1");
    assert_eq!(json["nodes"][0]["detail"]["kind"], "conclusion");
    assert_eq!(
        json["nodes"][0]["cite"]["hash"],
        graph.nodes[0].cite.hash.to_hex().as_str()
    );
    assert_eq!(json["edges"][0]["kind"], "component");
    assert_eq!(
        graph.as_of_version,
        projector.session_version("lithium").unwrap()
    );

    let root = node(&graph, "conclusion/cl-1");
    assert!(matches!(
        &root.detail,
        NodeDetail::Conclusion {
            current: true,
            stale: false,
            superseded_by: None,
            ..
        }
    ));
    let components: Vec<&str> = edges_from(&graph, &graph.root)
        .into_iter()
        .filter(|(_, kind)| *kind == EdgeKind::Component)
        .map(|(to, _)| to)
        .collect();
    assert_eq!(
        components,
        [
            "component/relevance",
            "component/consistency",
            "component/recency",
            "component/diversity"
        ]
    );
    assert!(matches!(
        node(&graph, "component/relevance").detail,
        NodeDetail::Component { name: Component::Relevance, weight, .. } if weight == 0.4
    ));

    // ev-2 lost the human resolution of the main question: overruled, not used, reachable only
    // through the adjudication that overruled it.
    let state = world.states["lithium"].clone();
    let main = state
        .conflicts()
        .iter()
        .find(|c| c.adjudication.scope.is_none())
        .unwrap();
    let main_id = format!("conflict/{}", main.id());
    assert!(matches!(
        &node(&graph, &main_id).detail,
        NodeDetail::Conflict {
            tier: Tier::Human,
            automatic_tier: Tier::Pending,
            winner: Some(Side::Supports),
            resolution: Some(HumanOutcome::Supports),
            current: true,
            ..
        }
    ));
    let from_main: BTreeMap<&str, EdgeKind> = edges_from(&graph, &main_id).into_iter().collect();
    assert_eq!(from_main.get("evidence/ev-1"), Some(&EdgeKind::Upheld));
    assert_eq!(from_main.get("evidence/ev-2"), Some(&EdgeKind::Overruled));
    assert!(matches!(
        &node(&graph, "evidence/ev-2").detail,
        NodeDetail::Evidence {
            used: false,
            status: EvidenceStatus::Overruled,
            stance: Some(Stance::Opposes),
            ..
        }
    ));
    assert!(matches!(
        &node(&graph, "evidence/ev-1").detail,
        NodeDetail::Evidence {
            used: true,
            status: EvidenceStatus::Adopted,
            screened: Some(_),
            ..
        }
    ));
    for component in [
        "component/relevance",
        "component/consistency",
        "component/recency",
        "component/diversity",
    ] {
        let inputs: Vec<&str> = edges_from(&graph, component)
            .into_iter()
            .map(|(to, _)| to)
            .collect();
        assert!(
            !inputs.contains(&"evidence/ev-2"),
            "{component} used an overruled item"
        );
        assert!(inputs.contains(&"evidence/ev-1"));
        // A neutral item counts everywhere but in consistency.
        assert_eq!(
            inputs.contains(&"evidence/ev-3"),
            component != "component/consistency",
            "{component}"
        );
    }

    // The person's resolution, with their name and the event that recorded it.
    let humans: Vec<&WhyNode> = edges_from(&graph, &main_id)
        .into_iter()
        .filter(|(_, kind)| *kind == EdgeKind::DecidedBy)
        .map(|(to, _)| node(&graph, to))
        .collect();
    assert_eq!(humans.len(), 1);
    let human = humans[0];
    assert_eq!(human.actor, "rita");
    assert_eq!(
        world.ledger.get(human.cite.seq).unwrap().unwrap().kind,
        "conflict_resolved"
    );
    assert!(matches!(
        &human.detail,
        NodeDetail::HumanDecision {
            decision: HumanDecisionKind::Resolution,
            outcome: HumanOutcome::Supports,
            in_force: true,
            superseded: None,
            reason,
            ..
        } if reason == "the opposing blog misreads the data"
    ));

    // The sub-question's automatic adjudication, appealed: both stand, so both items counted.
    let scoped = state
        .conflicts()
        .iter()
        .find(|c| c.adjudication.scope.is_some())
        .unwrap();
    let scoped_id = format!("conflict/{}", scoped.id());
    assert!(matches!(
        &node(&graph, &scoped_id).detail,
        NodeDetail::Conflict {
            tier: Tier::Human,
            automatic_tier: Tier::Authority,
            automatic_winner: Some(Side::Supports),
            winner: None,
            resolution: Some(HumanOutcome::BothStand),
            ..
        }
    ));
    let from_scoped = edges_from(&graph, &scoped_id);
    assert!(from_scoped.contains(&("evidence/ev-4", EdgeKind::Stands)));
    assert!(from_scoped.contains(&("evidence/ev-5", EdgeKind::Stands)));
    assert!(
        from_scoped
            .iter()
            .any(|(to, kind)| *kind == EdgeKind::DecidedBy
                && matches!(
                    node(&graph, to).detail,
                    NodeDetail::HumanDecision {
                        decision: HumanDecisionKind::Appeal,
                        ..
                    }
                ))
    );
}

#[test]
fn a_fresh_adjudication_supersedes_the_human_decision_and_old_conclusions_keep_their_why() {
    let (mut world, projector) = resolved_by_a_person();
    let before = world.states["lithium"].clone();
    let old_main = before
        .conflicts()
        .iter()
        .find(|c| c.adjudication.scope.is_none())
        .unwrap()
        .id()
        .clone();
    // New opposing evidence in the main scope: the conclusion goes stale, the scope is
    // adjudicated afresh (still pending) and a person now sides with the opposition.
    world.ok(
        "lithium",
        add(vec![item(
            "f.example.org",
            "blog",
            "2025-06-05",
            Some(Stance::Opposes),
        )]),
    );
    let state = world.states["lithium"].clone();
    world.ok("lithium", adopt_all(&state));
    world.ok("lithium", Command::RunConflictResolution);
    let state = world.states["lithium"].clone();
    let new_main = state
        .current_conflicts()
        .find(|c| c.adjudication.scope.is_none())
        .unwrap()
        .id()
        .clone();
    assert_ne!(new_main, old_main);
    world.ok_as(
        "sam",
        "lithium",
        resolve(
            new_main.as_str(),
            HumanOutcome::Opposes,
            "two sources now oppose",
        ),
    );
    world.ok("lithium", Command::BuildDecisionMatrix);
    world.ok("lithium", Command::GenerateConclusion);
    projector.catch_up().unwrap();

    let graph = projector.why_graph("lithium", None).unwrap();
    check_shape(&graph, &world);
    assert_eq!(graph.conclusion_id, ConclusionId::nth(2));
    let new_id = format!("conflict/{new_main}");
    let old_id = format!("conflict/{old_main}");
    assert!(edges_from(&graph, &new_id).contains(&(old_id.as_str(), EdgeKind::Supersedes)));
    assert!(matches!(
        &node(&graph, &old_id).detail,
        NodeDetail::Conflict { current: false, superseded_by: Some(by), .. } if *by == new_main
    ));
    let old_humans: Vec<&WhyNode> = edges_from(&graph, &old_id)
        .into_iter()
        .filter(|(_, kind)| *kind == EdgeKind::DecidedBy)
        .map(|(to, _)| node(&graph, to))
        .collect();
    assert_eq!(old_humans.len(), 1);
    assert!(matches!(
        &old_humans[0].detail,
        NodeDetail::HumanDecision {
            in_force: false,
            superseded: Some(Superseded::FreshAdjudication { conflict_id: Some(by) }),
            ..
        } if *by == new_main
    ));
    assert!(old_humans[0].label.contains("superseded"));
    // Now ev-1 is the one overruled.
    assert!(edges_from(&graph, &new_id).contains(&("evidence/ev-1", EdgeKind::Overruled)));

    // The first conclusion's why is what it was when it was issued, marked as since replaced.
    let first = projector
        .why_graph("lithium", Some(&ConclusionId::nth(1)))
        .unwrap();
    check_shape(&first, &world);
    assert!(first.as_of_version < graph.as_of_version);
    assert!(matches!(
        &node(&first, "conclusion/cl-1").detail,
        NodeDetail::Conclusion {
            current: false,
            stale: true,
            stale_cause: Some(_),
            superseded_by: Some(by),
            ..
        } if *by == ConclusionId::nth(2)
    ));
    assert!(edges_from(&first, &old_id).contains(&("evidence/ev-2", EdgeKind::Overruled)));
    assert!(first.nodes.iter().all(|n| n.id != new_id));
}

#[test]
fn no_conclusion_no_graph() {
    let ledger = memory_ledger(32);
    let mut world = World::new(&ledger);
    world.ok(
        "open",
        open_task("open", "Anything?", &[], Mode::ToolConstrained),
    );
    let projector = projector(&ledger);
    assert!(matches!(
        projector.why_graph("open", None),
        Err(QueryError::ConclusionNotFound {
            conclusion_id: None,
            ..
        })
    ));
    assert!(matches!(
        projector.why_graph("open", Some(&ConclusionId::nth(4))),
        Err(QueryError::ConclusionNotFound {
            conclusion_id: Some(_),
            ..
        })
    ));
    assert!(matches!(
        projector.why_graph("missing", None),
        Err(QueryError::TaskNotFound { .. })
    ));
}

#[test]
fn the_graph_is_bounded() {
    let (world, _) = resolved_by_a_person();
    let mut options = projections::ProjectorOptions::default();
    options.limits.why_graph_nodes_max = 6;
    let small = Projector::open(world.ledger.clone(), options).unwrap();
    assert!(matches!(
        small.why_graph("lithium", None),
        Err(QueryError::LimitExceeded {
            limit: "why_graph_nodes_max",
            max: 6,
            ..
        })
    ));
}
