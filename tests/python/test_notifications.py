"""Notifications: `resources/updated` after an append to a subscribed task (resources/subscribe
in 2025-11-25, subscriptions/listen in 2026-07-28), `tools/list_changed` when a contract file
appears, and progress notifications for searches and pipeline runs when the client sends a
progress token."""

from __future__ import annotations

import warnings
from typing import Any

import anyio
import pytest

from pathlib import Path

from conftest import call, connect
from mcp import types
from mcp.client.subscriptions import ResourceUpdated, ToolsListChanged

pytestmark = pytest.mark.anyio


async def test_a_subscriber_is_told_of_every_append(target: Any, mode: str) -> None:
    updated: list[str] = []
    arrived = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            updated.append(str(message.params.uri))
            arrived.set()

    async with connect(target, mode, message_handler=on_message) as client:
        opened = await call(client, "research_open_task", {"question": "Do warm springs bring blooms?"})
        task = opened["task_id"]
        uri = f"ledger://tasks/{task}/state"
        if mode == "legacy":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                await client.subscribe_resource(uri)
            await call(client, "research_expand_subquestions", {"task_id": task, "sub_questions": ["Warm?"]})
            with anyio.fail_after(20):
                await arrived.wait()
            assert updated == [uri]
        else:
            async with client.listen(resource_subscriptions=[uri, f"ledger://tasks/{task}/events"]) as sub:
                assert sub.honored is not None
                assert set(sub.honored.resource_subscriptions or []) == {uri, f"ledger://tasks/{task}/events"}
                await call(client, "research_expand_subquestions", {"task_id": task, "sub_questions": ["Warm?"]})
                seen: set[str] = set()
                with anyio.fail_after(20):
                    async for event in sub:
                        assert isinstance(event, ResourceUpdated)
                        seen.add(str(event.uri))
                        if seen == {uri, f"ledger://tasks/{task}/events"}:
                            break


CONTRACT = """name: team_kb
description: Searches the team's knowledge base.
endpoint: http://127.0.0.1:9/search
contract_version: "1.0"
timeout_ms: 1000
input_schema:
  query: { type: string, semantic_tag: search_query }
output_schema:
  answer: { type: string, semantic_tag: evidence_content }
"""


async def test_a_client_is_told_when_the_tool_list_changes(target: Any, mode: str, data_dir: Path) -> None:
    changed = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    def add_contract() -> None:
        contracts = data_dir / "contracts"
        contracts.mkdir(exist_ok=True)
        (contracts / "team_kb.yaml").write_text(CONTRACT)

    async with connect(target, mode, message_handler=on_message) as client:
        before = {t.name for t in (await client.list_tools()).tools}
        assert "team_kb" not in before
        if mode == "legacy":
            add_contract()
            with anyio.fail_after(30):
                await changed.wait()
        else:
            async with client.listen(tools_list_changed=True) as sub:
                assert sub.honored is not None and sub.honored.tools_list_changed
                add_contract()
                with anyio.fail_after(30):
                    async for event in sub:
                        assert isinstance(event, ToolsListChanged)
                        break
        after = {t.name for t in (await client.list_tools()).tools}
        assert after == before | {"team_kb"}


async def test_searches_and_pipelines_report_progress(target: Any, mode: str) -> None:
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    async with connect(target, mode) as client:
        opened = await call(
            client,
            "research_open_task",
            {"question": "Did agricultural runoff cause the algae blooms in Lake Varden?", "research_date": "2025-06-30"},
        )
        task = opened["task_id"]
        found = await call(
            client, "retrieval_search_evidence", {"task_id": task}, progress_callback=on_progress
        )
        assert found["candidates"]
        # One report per source: before and after the embedded corpus answered.
        assert [p[0] for p in progress] == [0, 1]
        assert progress[-1][1] == 1
        assert progress[-1][2] and progress[-1][2].startswith("corpus:")

        progress.clear()
        await call(client, "research_expand_subquestions", {"task_id": task, "sub_questions": ["Did phosphorus rise?"]})
        job = await call(client, "research_run_pipeline", {"task_id": task}, progress_callback=on_progress)
        # With a progress token the call follows the job to its stop, step by step.
        assert job["status"] == "waiting"
        assert job["step"] == 3
        values = [p[0] for p in progress]
        assert values == sorted(values) and len(set(values)) == len(values)
        assert all(p[1] == 8 for p in progress)
        messages = [p[2] or "" for p in progress]
        # Every finished step is reported, however fast the job went.
        assert any(m.startswith("step 1/8: plan: 2 scope(s)") for m in messages), messages
        assert any(m.startswith("step 2/8: retrieve: 1 search(es) run, 1 already in the ledger") for m in messages), messages
        assert messages[-1].startswith("step 3/8: waiting for screening"), messages
