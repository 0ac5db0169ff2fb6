"""Every error of the contract, over stdio and HTTP, in both eras: an unknown tool, prompt or
resource is a protocol error; everything the service refuses is a tool result with `isError`
and the structured error of SPEC §10."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import Server, binary, call, connect, not_found_code, refused, stdio_params
from mcp import MCPError

pytestmark = pytest.mark.anyio


async def open_task(client: Any) -> dict[str, Any]:
    return await call(
        client,
        "research_open_task",
        {"question": "Does the lithium supply grow faster than demand?", "research_date": "2025-06-30"},
    )


async def test_unknown_tool_is_invalid_params(target: Any, mode: str) -> None:
    async with connect(target, mode) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("research_open_tasks", {"question": "x"})
        assert raised.value.code == -32602
        assert "unknown tool" in raised.value.message


async def test_refusals_are_tool_results_with_structured_errors(target: Any, mode: str) -> None:
    async with connect(target, mode) as client:
        # Bad arguments name the argument.
        bad = await refused(client, "research_open_task", {"constraints": ["2020 on"]})
        assert bad["error"] == "invalid_argument"
        assert bad["field"] == "question"
        sideways = await refused(client, "research_open_task", {"question": "q", "mode": "sideways"})
        assert sideways["error"] == "invalid_argument"
        unknown_field = await refused(client, "research_open_task", {"question": "q", "colour": "red"})
        assert unknown_field["error"] == "invalid_argument"
        assert unknown_field["field"] == "colour"

        opened = await open_task(client)
        task = opened["task_id"]

        # Workflow order: the steps due come with the refusal.
        order = await refused(client, "evaluation_generate_conclusion", {"task_id": task})
        assert order["error"] == "workflow_order"
        assert order["pending_actions"] and all({"tool", "reason"} <= set(a) for a in order["pending_actions"])
        assert "evaluation_build_decision_matrix" in [a["tool"] for a in order["pending_actions"]]

        # A stale version: the current one, and what to do.
        stale = await refused(
            client,
            "research_expand_subquestions",
            {"task_id": task, "sub_questions": ["a?"], "expected_version": 7},
        )
        assert stale["error"] == "session_conflict"
        assert stale["current_version"] == 1
        assert stale["suggested_action"] == "research_summarize_state"
        ok = await call(
            client,
            "research_expand_subquestions",
            {"task_id": task, "sub_questions": ["a?"], "expected_version": 1},
        )
        assert ok["session_version"] == 2

        # An idempotency key: a retry is answered from the ledger; another command is refused.
        args = {"task_id": task, "sub_questions": ["b?"], "idempotency_key": "k-1"}
        first = await call(client, "research_expand_subquestions", args)
        again = await call(client, "research_expand_subquestions", args)
        assert first["replayed"] is False and again["replayed"] is True
        assert again["session_version"] == first["session_version"] == 3
        reused = await refused(
            client, "research_expand_subquestions", {"task_id": task, "sub_questions": ["c?"], "idempotency_key": "k-1"}
        )
        assert reused["error"] == "idempotency_key_reused"

        # Something named that does not exist.
        missing = await refused(client, "research_summarize_state", {"task_id": "no-such-task"})
        assert missing["error"] == "not_found"

        # A closed task takes no more writes.
        await call(client, "research_close_task", {"task_id": task})
        closed = await refused(client, "research_expand_subquestions", {"task_id": task, "sub_questions": ["d?"]})
        assert closed["error"] == "task_closed"
        pipeline = await refused(client, "research_run_pipeline", {"task_id": task})
        assert pipeline["error"] == "task_closed"

        # A limit.
        limit = await refused(client, "retrieval_search_evidence", {"task_id": task, "limit": 100000})
        assert limit["error"] == "limit_exceeded"
        assert limit["limit"] == "search_results_max"


async def test_unknown_resources_and_prompts_are_protocol_errors(target: Any, mode: str) -> None:
    async with connect(target, mode) as client:
        opened = await open_task(client)
        task = opened["task_id"]
        for uri in [
            "ledger://tasks/no-such-task/state",
            f"ledger://tasks/{task}/state/99",
            f"ledger://tasks/{task}/conclusion",
            "ledger://nothing",
            "ledger://checkpoints/latest",
        ]:
            with pytest.raises(MCPError) as raised:
                await client.read_resource(uri)
            assert raised.value.code == not_found_code(mode), uri
        with pytest.raises(MCPError) as raised:
            await client.get_prompt("no_such_prompt", {})
        assert raised.value.code == -32602
        with pytest.raises(MCPError) as raised:
            await client.get_prompt("review_conflicts", {"task_id": "no-such-task"})
        assert raised.value.code == -32602
        with pytest.raises(MCPError) as raised:
            await client.get_prompt("review_conflicts", {})
        assert raised.value.code == -32602


@pytest.mark.parametrize("transport_kind", ["stdio", "http"])
async def test_the_latest_checkpoint_is_a_resource_once_written(
    data_dir: Path, mode: str, transport_kind: str
) -> None:
    made = subprocess.run(
        [binary(), "--data-dir", str(data_dir), "checkpoint"], check=True, capture_output=True, text=True
    )
    assert '"signature"' in made.stdout
    server = Server(data_dir) if transport_kind == "http" else None
    try:
        target = server.url if server else stdio_params(data_dir)
        async with connect(target, mode) as client:
            uris = {r.uri for r in (await client.list_resources()).resources}
            assert "ledger://checkpoints/latest" in uris
            result = await client.read_resource("ledger://checkpoints/latest")
            assert '"key_fingerprint"' in result.contents[0].text
    finally:
        if server:
            server.stop()
