"""Resources an assistant can afford, through the official Python SDK: the audit trail a page at
a time (a cursor in the URI template), a compact state with the full view beside it, and a
conclusion citable by its id, pinned to the version and hash it was issued at."""

from __future__ import annotations

import json
from typing import Any

import pytest
from mcp import MCPError

from conftest import call, connect, not_found_code, stdio_params

pytestmark = pytest.mark.anyio


async def read_json(client: Any, uri: str) -> Any:
    result = await client.read_resource(uri)
    assert result.contents[0].mime_type == "application/json"
    return json.loads(result.contents[0].text)


async def concluded(client: Any, questions: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """A task researched to a conclusion over the sample corpus; its id and card."""
    question = questions[0]
    opened = await call(
        client,
        "research_open_task",
        {"question": question["question"], "research_date": question["research_date"]},
    )
    task = opened["task_id"]
    found = await call(client, "retrieval_search_evidence", {"task_id": task, "limit": 10})
    first = found["candidates"][0]["evidence_id"]
    await call(
        client,
        "synthesis_screen_evidence",
        {
            "task_id": task,
            "decisions": [{"evidence_id": first, "adopt": True, "stance": "supports"}],
            "reject_remaining": "not about the question",
        },
    )
    for name in ["evaluation_conflict_resolution", "evaluation_build_decision_matrix"]:
        await call(client, name, {"task_id": task})
    card = await call(client, "evaluation_generate_conclusion", {"task_id": task})
    return task, card


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_the_trail_comes_in_pages_the_state_compact_and_a_conclusion_pinned(
    data_dir: Any, questions: list[dict[str, Any]], mode: str
) -> None:
    async with connect(stdio_params(data_dir), mode) as client:
        task, card = await concluded(client, questions)

        # Pages of at most 20 events, the next one named by its cursor, to the head.
        first = await read_json(client, f"ledger://tasks/{task}/events")
        head = first["head_version"]
        assert head > 20, head
        assert len(first["events"]) == 20 and first["next_cursor"] == "21", first.keys()
        assert first["next"] == f"ledger://tasks/{task}/events?cursor=21"
        versions = [e["stream_version"] for e in first["events"]]
        uri = first["next"]
        while uri:
            page = await read_json(client, uri)
            versions += [e["stream_version"] for e in page["events"]]
            uri = page.get("next")
        assert versions == list(range(1, head + 1))

        # The compact state: compact items and where the full view is; far smaller than it.
        summary_result = await client.read_resource(f"ledger://tasks/{task}/summary")
        summary = json.loads(summary_result.contents[0].text)
        full_result = await client.read_resource(summary["full"])
        full = json.loads(full_result.contents[0].text)
        assert summary["session_version"] == full["session_version"] == head
        assert [e["evidence_id"] for e in summary["evidence"]] == [
            e["evidence_id"] for e in full["evidence"]
        ]
        assert "content_hash" not in summary["evidence"][0]
        assert "content_hash" in full["evidence"][0]
        assert len(summary_result.contents[0].text) * 2 < len(full_result.contents[0].text)
        pinned_uri = summary["conclusion"]["uri"]
        assert pinned_uri == f"ledger://tasks/{task}/conclusions/{card['conclusion_id']}"

        # The citable conclusion: the card as issued, pinned to its version and event hash.
        pinned = await read_json(client, pinned_uri)
        assert pinned["conclusion_id"] == card["conclusion_id"]
        assert pinned["confidence"] == card["confidence"] and pinned["stance"] == card["stance"]
        assert pinned["version"] == card["session_version"], pinned
        issued = next(
            e for e in await all_events(client, task) if e["kind"] == "conclusion_issued"
        )
        assert pinned["event_hash"] == issued["hash"] and pinned["seq"] == issued["seq"]

        # A later conclusion leaves the pinned one as it was.
        await call(client, "evaluation_build_decision_matrix", {"task_id": task})
        later = await call(client, "evaluation_generate_conclusion", {"task_id": task})
        assert later["conclusion_id"] != card["conclusion_id"]
        assert await read_json(client, pinned_uri) == pinned

        templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
        assert "ledger://tasks/{task_id}/events{?cursor}" in templates
        assert "ledger://tasks/{task_id}/conclusions/{conclusion_id}" in templates

        for uri in [
            f"ledger://tasks/{task}/conclusions/co-99",
            f"ledger://tasks/{task}/events?cursor=x",
            "ledger://tasks/no-such-task/summary",
        ]:
            with pytest.raises(MCPError) as refused:
                await client.read_resource(uri)
            assert refused.value.code == not_found_code(mode), uri


async def all_events(client: Any, task: str) -> list[dict[str, Any]]:
    uri: str | None = f"ledger://tasks/{task}/events"
    events: list[dict[str, Any]] = []
    while uri:
        page = await read_json(client, uri)
        events += page["events"]
        uri = page.get("next")
    return events
