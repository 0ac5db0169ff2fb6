"""A whole research task through MCP, over stdio and HTTP, in both protocol eras; resources at
head and at a version; the caller recorded as the actor of every event."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conftest import CLIENT_NAME, call, connect, screening_decisions

pytestmark = pytest.mark.anyio

EXPECTED_TOOLS = {
    "research_open_task",
    "research_expand_subquestions",
    "retrieval_search_evidence",
    "retrieval_add_evidence",
    "retrieval_get_source_detail",
    "retrieval_list_candidates",
    "retrieval_retract_evidence",
    "synthesis_screen_evidence",
    "synthesis_research_synthesis",
    "evaluation_conflict_resolution",
    "evaluation_resolve_conflict",
    "evaluation_build_decision_matrix",
    "evaluation_generate_conclusion",
    "evaluation_explain_reasoning",
    "research_summarize_state",
    "research_run_pipeline",
    "research_job_status",
    "research_close_task",
    "audit_verify",
}


async def read_json(client: Any, uri: str) -> Any:
    result = await client.read_resource(uri)
    assert result.contents[0].mime_type == "application/json"
    return json.loads(result.contents[0].text)


async def research(client: Any, question: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, str]]:
    """The demo's script, as an assistant would run it: open, expand, search every scope,
    screen by the sample's judgements, resolve, decide pending conflicts, conclude, explain."""
    opened = await call(
        client,
        "research_open_task",
        {
            "question": question["question"],
            "constraints": question.get("constraints", []),
            "research_date": question["research_date"],
        },
    )
    task = opened["task_id"]
    assert opened["session_version"] == 1
    expanded = await call(
        client, "research_expand_subquestions", {"task_id": task, "sub_questions": question["sub_questions"]}
    )
    scopes = [None] + [q["id"] for q in expanded["sub_questions"]]
    evidence_of: dict[str, str] = {}
    for scope in scopes:
        arguments: dict[str, Any] = {"task_id": task, "limit": 20}
        if scope:
            arguments["sub_question"] = scope
        found = await call(client, "retrieval_search_evidence", arguments)
        for candidate in found["candidates"]:
            evidence_of[candidate["result_id"]] = candidate["evidence_id"]
    decisions = screening_decisions(question, evidence_of)
    screened = await call(client, "synthesis_screen_evidence", {"task_id": task, "decisions": decisions})
    assert screened["candidates_remaining"] == 0
    await call(client, "synthesis_research_synthesis", {"task_id": task})
    resolved = await call(client, "evaluation_conflict_resolution", {"task_id": task})
    for conflict in resolved["conflicts"]:
        if conflict["tier"] == "pending":
            # What a person needs to decide it: each side's items with their summaries.
            assert conflict["supports"] and conflict["opposes"], conflict
            assert all("summary" in item for item in conflict["supports"] + conflict["opposes"])
            decided = await call(
                client,
                "evaluation_resolve_conflict",
                {
                    "task_id": task,
                    "conflict_id": conflict["conflict_id"],
                    "winner": "both_stand",
                    "reason": "Both sides are recent and of near-equal authority.",
                },
            )
            # A decision sent through MCP is the assistant's, through the client it named.
            last = decided["conflict"]["decision"]
            assert (last["decided_by"], last["decided_via"]) == ("assistant", CLIENT_NAME), last
    await call(client, "evaluation_build_decision_matrix", {"task_id": task})
    card = await call(client, "evaluation_generate_conclusion", {"task_id": task})
    explained = await call(client, "evaluation_explain_reasoning", {"task_id": task})
    assert explained["markdown"].startswith("#") or "seq" in explained["markdown"]
    return task, card, evidence_of


async def test_tools_are_listed_with_schemas_and_annotations(target: Any, mode: str) -> None:
    async with connect(target, mode) as client:
        tools = (await client.list_tools()).tools
        assert {t.name for t in tools} == EXPECTED_TOOLS
        for tool in tools:
            assert tool.description and tool.description.startswith("Call ")
            assert tool.input_schema["type"] == "object"
            assert tool.output_schema is not None and tool.output_schema["type"] == "object"
            assert tool.annotations is not None
            # Only what differs from MCP's defaults is said; a read-only tool is not destructive.
            assert tool.annotations.read_only_hint is True or tool.annotations.destructive_hint is False
            assert tool.annotations.open_world_hint is False
        by_name = {t.name: t for t in tools}
        assert by_name["audit_verify"].annotations.read_only_hint is True
        assert by_name["research_summarize_state"].annotations.idempotent_hint is True
        assert not by_name["research_open_task"].annotations.read_only_hint
        write = by_name["retrieval_add_evidence"].input_schema["properties"]
        assert "expected_version" in write and "idempotency_key" in write


async def test_a_whole_task_reaches_the_designed_verdict(
    target: Any, mode: str, questions: list[dict[str, Any]]
) -> None:
    question = next(q for q in questions if q["id"] == "lake-varden-blooms")
    async with connect(target, mode) as client:
        task, card, evidence_of = await research(client, question)
        # The conclusion card is the tool's structured output.
        assert card["stance"] == question["expected"]["conclusion"]["stance"] == "opposing"
        for field in ["conclusion_id", "confidence", "components", "evidence", "adjudications", "rules", "client_share", "stale", "markdown"]:
            assert field in card, field
        assert set(card["components"]) == {"relevance", "consistency", "recency", "diversity"}
        doc_of = {ev: doc for doc, ev in evidence_of.items()}
        assert {doc_of[e["evidence_id"]] for e in card["evidence"]} == set(question["expected"]["conclusion"]["evidence"])
        assert card["task_id"] == task and card["session_version"] > 1

        # Every event was written by this client, under its name.
        events = await read_json(client, f"ledger://tasks/{task}/events")
        assert events["head_version"] == card["session_version"] + 1
        assert {e["actor"] for e in events["events"]} == {CLIENT_NAME}

        # The conclusion resource is the same card.
        conclusion = await read_json(client, f"ledger://tasks/{task}/conclusion")
        assert conclusion["conclusion_id"] == card["conclusion_id"]
        assert conclusion["confidence"] == card["confidence"]

        summary = await call(client, "research_summarize_state", {"task_id": task})
        assert summary["pending_actions"] == []
        verified = await call(client, "audit_verify", {})
        assert verified["intact"] is True
        closed = await call(client, "research_close_task", {"task_id": task, "reason": "done"})
        assert closed["status"] == "closed"


async def test_resources_are_listed_and_read_at_head_and_at_a_version(target: Any, mode: str) -> None:
    async with connect(target, mode) as client:
        opened = await call(client, "research_open_task", {"question": "Do lakes bloom after warm springs?", "research_date": "2025-06-30"})
        task = opened["task_id"]
        await call(client, "research_expand_subquestions", {"task_id": task, "sub_questions": ["Was the spring warm?"]})

        templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
        assert templates == {
            "ledger://tasks/{task_id}/summary",
            "ledger://tasks/{task_id}/state",
            "ledger://tasks/{task_id}/state/{version}",
            "ledger://tasks/{task_id}/events{?cursor}",
            "ledger://tasks/{task_id}/conclusion",
            "ledger://tasks/{task_id}/conclusions/{conclusion_id}",
        }
        uris = {r.uri for r in (await client.list_resources()).resources}
        assert {"ledger://tasks", f"ledger://tasks/{task}/state", f"ledger://tasks/{task}/events"} <= uris

        head = await read_json(client, f"ledger://tasks/{task}/state")
        assert head["session_version"] == 2
        assert [q["id"] for q in head["sub_questions"]] == ["sq-1"]
        then = await read_json(client, f"ledger://tasks/{task}/state/1")
        assert then["session_version"] == 1
        assert then["sub_questions"] == []
        assert then["task"]["question"] == "Do lakes bloom after warm springs?"
        listing = await read_json(client, "ledger://tasks")
        assert task in [t["task_id"] for t in listing["tasks"]]


async def test_a_decision_sent_through_mcp_is_recorded_as_the_assistants(target: Any, mode: str) -> None:
    async with connect(target, mode) as client:
        opened = await call(client, "research_open_task", {"question": "Is the sea level rising?", "mode": "agent_led"})
        task = opened["task_id"]
        ids = []
        for source, stance in [("tide-office.example.org", "supports"), ("coast-office.example.org", "opposes")]:
            added = await call(
                client,
                "retrieval_add_evidence",
                {"task_id": task, "source": source, "source_type": "government", "publish_date": "2025-06-30",
                 "content": f"{source} on the sea level.", "stance": stance},
            )
            ids.append(added["evidence_id"])
        await call(client, "synthesis_screen_evidence",
                   {"task_id": task, "decisions": [{"evidence_id": i, "adopt": True} for i in ids]})
        conflicts = (await call(client, "evaluation_conflict_resolution", {"task_id": task}))["conflicts"]
        pending = [c for c in conflicts if c["tier"] == "pending"]
        assert pending, conflicts
        decided = await call(
            client,
            "evaluation_resolve_conflict",
            {"task_id": task, "conflict_id": pending[0]["conflict_id"], "winner": "supports",
             "reason": "the tide record is the longer one"},
        )
        last = decided["conflict"]["decision"]
        assert (last["decided_by"], last["decided_via"]) == ("assistant", CLIENT_NAME), last
        await call(client, "evaluation_generate_conclusion", {"task_id": task})
        explained = await call(client, "evaluation_explain_reasoning", {"task_id": task})
        assert f"(the assistant, via {CLIENT_NAME})" in explained["markdown"], explained["markdown"]
