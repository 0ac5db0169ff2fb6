"""A client that speaks only stdio reaches a running server through the `mcp-remote` bridge
(npm), configured as docs/mcp.md says: `npx mcp-remote http://127.0.0.1:PORT/mcp`."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from conftest import CLIENT_NAME, Server, call, connect
from mcp import StdioServerParameters

pytestmark = pytest.mark.anyio


def mcp_remote() -> str:
    found = os.environ.get("MCP_REMOTE_BIN") or shutil.which("mcp-remote")
    if not found:
        pytest.fail("mcp-remote is not installed: scripts/test installs it (or set MCP_REMOTE_BIN)")
    return found


async def test_a_stdio_client_reaches_serve_through_mcp_remote(server: Server) -> None:
    params = StdioServerParameters(
        command=mcp_remote(),
        args=[server.url],
        env={"PATH": os.environ.get("PATH", "")},
    )
    async with connect(params, "legacy") as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        assert "research_open_task" in tools and "research_run_pipeline" in tools
        opened = await call(client, "research_open_task", {"question": "Is the bridge transparent?"})
        stale = await client.call_tool(
            "research_expand_subquestions",
            {"task_id": opened["task_id"], "sub_questions": ["x?"], "expected_version": 9},
        )
        assert stale.is_error and stale.structured_content["error"] == "session_conflict"
        events = json.loads(
            (await client.read_resource(f"ledger://tasks/{opened['task_id']}/events")).contents[0].text
        )
        # mcp-remote passes the client's name on, so the actor is still the client.
        actors = {e["actor"] for e in events["events"]}
        assert len(actors) == 1
        assert actors.pop().startswith(f"{CLIENT_NAME} (via mcp-remote ")
