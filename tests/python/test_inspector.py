"""The MCP Inspector's command line (`mcpdo`, from `@modelcontextprotocol/inspector`, built on the
official TypeScript SDK) as a third client beside the Python SDK and the conformance suite.

Its SDK checks every tool result's `structuredContent` against the `outputSchema` the tool
listed, so a task researched through it to its verdict is also a check of every schema the
research touches, in both protocol eras, over HTTP and stdio. A canary server whose result breaks
its own schema shows that the check runs. The CLI is `$MCPDO_BIN` (scripts/test installs it);
without it these tests skip, unless `RESEARCH_LEDGER_REQUIRE_INSPECTOR` is set.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import Server, binary, screening_decisions

MCPDO = os.environ.get("MCPDO_BIN")
if not MCPDO:
    if os.environ.get("RESEARCH_LEDGER_REQUIRE_INSPECTOR"):
        raise RuntimeError("RESEARCH_LEDGER_REQUIRE_INSPECTOR is set but MCPDO_BIN is not")
    pytest.skip("the MCP Inspector's CLI is not installed (MCPDO_BIN)", allow_module_level=True)

TOOLS = 19


class Mcpdo:
    """The CLI with a home of its own: its catalog, its daemon and the connections it keeps."""

    def __init__(self, home: Path) -> None:
        home.mkdir(parents=True, exist_ok=True)
        self.env = {**os.environ, "HOME": str(home), "MCP_CATALOG_PATH": str(home / "mcp.json")}

    def run(self, *args: str) -> tuple[int, Any, str]:
        done = subprocess.run(
            [str(MCPDO), "--format", "json", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        try:
            out = json.loads(done.stdout) if done.stdout.strip() else None
        except json.JSONDecodeError:
            out = done.stdout
        return done.returncode, out, done.stderr

    def ok(self, *args: str) -> Any:
        code, out, err = self.run(*args)
        assert code == 0, f"mcpdo {' '.join(args)}: exit {code}\n{out}\n{err}"
        return out

    def connect(self, name: str, era: str, *target: str) -> dict[str, Any]:
        self.ok("connect", "--connection", name, "--era", era, "--elicit", "off", *target)
        return self.ok("connections/show", name)

    def call(self, connection: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """A tool call that must succeed, and its structured result."""
        result = self.ok(f"@{connection}", "tools/call", tool, json.dumps(arguments))
        assert result["isError"] is False, result
        return result["structuredContent"]

    def stop(self) -> None:
        self.run("daemon", "stop")


@pytest.fixture
def mcpdo(tmp_path: Path) -> Iterator[Mcpdo]:
    cli = Mcpdo(tmp_path / "inspector-home")
    yield cli
    cli.stop()


CANARY = r'''
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m:
        continue
    method, result = m["method"], None
    if method == "initialize":
        result = {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "canary", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "count", "inputSchema": {"type": "object"},
                             "outputSchema": {"type": "object", "required": ["n"],
                                              "properties": {"n": {"type": "integer"}}}}]}
    elif method == "tools/call":
        result = {"content": [{"type": "text", "text": "seven"}], "structuredContent": {"n": "seven"}}
    elif method == "ping":
        result = {}
    reply = {"jsonrpc": "2.0", "id": m["id"]}
    if result is None:
        reply["error"] = {"code": -32601, "message": "no such method"}
    else:
        reply["result"] = result
    print(json.dumps(reply), flush=True)
'''


def test_the_inspector_refuses_a_result_that_breaks_its_tools_output_schema(mcpdo: Mcpdo, tmp_path: Path) -> None:
    canary = tmp_path / "canary.py"
    canary.write_text(CANARY)
    mcpdo.connect("canary", "legacy", "--", sys.executable, str(canary))
    assert [t["name"] for t in mcpdo.ok("@canary", "tools/list")["tools"]] == ["count"]
    code, out, err = mcpdo.run("@canary", "tools/call", "count", "{}")
    assert code != 0, out
    # The SDK names the field its schema refused (`data/n must be integer`).
    assert "n must be integer" in err, (out, err)


def research(mcpdo: Mcpdo, connection: str, question: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The sample question researched to its verdict, every step a tool call through the CLI."""
    listed = mcpdo.ok(f"@{connection}", "tools/list")["tools"]
    assert len(listed) == TOOLS and all(t.get("outputSchema") for t in listed), listed
    task = mcpdo.call(
        connection,
        "research_open_task",
        {
            "question": question["question"],
            "constraints": question.get("constraints", []),
            "research_date": question["research_date"],
        },
    )["task_id"]
    expanded = mcpdo.call(
        connection, "research_expand_subquestions", {"task_id": task, "sub_questions": question["sub_questions"]}
    )
    evidence_of: dict[str, str] = {}
    for scope in [None] + [q["id"] for q in expanded["sub_questions"]]:
        arguments: dict[str, Any] = {"task_id": task, "limit": 20}
        if scope:
            arguments["sub_question"] = scope
        for candidate in mcpdo.call(connection, "retrieval_search_evidence", arguments)["candidates"]:
            evidence_of[candidate["result_id"]] = candidate["evidence_id"]
    decisions = screening_decisions(question, evidence_of)
    mcpdo.call(connection, "synthesis_screen_evidence", {"task_id": task, "decisions": decisions})
    mcpdo.call(connection, "synthesis_research_synthesis", {"task_id": task})
    for conflict in mcpdo.call(connection, "evaluation_conflict_resolution", {"task_id": task})["conflicts"]:
        if conflict["tier"] == "pending":
            mcpdo.call(
                connection,
                "evaluation_resolve_conflict",
                {"task_id": task, "conflict_id": conflict["conflict_id"], "winner": "both_stand",
                 "reason": "Both sides are recent and of near-equal authority."},
            )
    mcpdo.call(connection, "evaluation_build_decision_matrix", {"task_id": task})
    card = mcpdo.call(connection, "evaluation_generate_conclusion", {"task_id": task})
    mcpdo.call(connection, "evaluation_explain_reasoning", {"task_id": task})
    mcpdo.call(connection, "research_summarize_state", {"task_id": task})
    mcpdo.call(connection, "retrieval_list_candidates", {"task_id": task})
    return task, card


def test_a_task_reaches_the_designed_verdict_through_the_inspector_in_both_eras_over_http_and_stdio(
    mcpdo: Mcpdo, server: Server, sample_data: Path, tmp_path: Path, questions: list[dict[str, Any]]
) -> None:
    question = next(q for q in questions if q["id"] == "lake-varden-blooms")
    stdio_data = tmp_path / "stdio-data"
    shutil.copytree(sample_data, stdio_data)
    eras = {
        "http-legacy": mcpdo.connect("http-legacy", "legacy", server.url),
        "http-modern": mcpdo.connect("http-modern", "modern", server.url),
        "stdio-modern": mcpdo.connect(
            "stdio-modern", "modern", "--", binary(), "--data-dir", str(stdio_data), "mcp"
        ),
        "stdio-legacy": mcpdo.connect(
            "stdio-legacy", "legacy", "--", binary(), "--data-dir", str(tmp_path / "empty"), "mcp"
        ),
    }
    assert {name: shown["protocolVersion"] for name, shown in eras.items()} == {
        "http-legacy": "2025-11-25",
        "http-modern": "2026-07-28",
        "stdio-modern": "2026-07-28",
        "stdio-legacy": "2025-11-25",
    }
    cards = {}
    for connection in ["http-legacy", "http-modern", "stdio-modern"]:
        task, card = research(mcpdo, connection, question)
        assert card["stance"] == question["expected"]["conclusion"]["stance"], (connection, card)
        cards[connection] = card
        summary = json.loads(
            mcpdo.ok(f"@{connection}", "resources/read", f"ledger://tasks/{task}/summary")["contents"][0]["text"]
        )
        assert summary["pending_actions"] == [] and summary["conclusion"] is not None, summary
        assert mcpdo.ok(f"@{connection}", "prompts/list")["prompts"]
    # The same evidence under the same rules: the same verdict, however it was asked for.
    assert len({(c["stance"], c["confidence"]) for c in cards.values()}) == 1, cards

    # A refusal is a tool result the SDK accepts, with the error's code in its structured
    # content, in either era and over either transport.
    for connection in eras:
        code, out, _ = mcpdo.run(f"@{connection}", "tools/call", "research_summarize_state", '{"task_id": "no-such-task"}')
        assert code != 0 and out["isError"] is True, (connection, out)
        assert out["structuredContent"]["error"] == "not_found", (connection, out)
        code, out, _ = mcpdo.run(f"@{connection}", "tools/call", "research_open_task", '{"question": ""}')
        assert out["isError"] is True and out["structuredContent"]["error"] == "invalid_argument", (connection, out)
    # What the server holds is intact after it all.
    verified = mcpdo.call("http-modern", "audit_verify", {})
    assert verified["intact"] is True, verified
