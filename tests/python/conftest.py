"""End-to-end tests of research-ledger's MCP bridge through the official Python SDK.

Every test drives the real binary: `research-ledger mcp` over stdio, or a spawned
`research-ledger serve` over Streamable HTTP, in both protocol eras (`mode="legacy"`: the
2025-11-25 `initialize` handshake and sessions; `mode="2026-07-28"`: stateless). The binary is
`$RESEARCH_LEDGER_BIN` (scripts/test sets it) or the debug build under the cargo target folder.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from mcp import Client, Implementation, StdioServerParameters

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "corpus" / "sample"
CLIENT_NAME = "pytest-assistant"
MODES = ["legacy", "2026-07-28"]


def binary() -> str:
    explicit = os.environ.get("RESEARCH_LEDGER_BIN")
    if explicit:
        return explicit
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    path = target / "debug" / "research-ledger"
    if not path.exists():
        pytest.exit(f"no research-ledger binary at {path}; build it or set RESEARCH_LEDGER_BIN", 2)
    return str(path)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def sample_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory with the sample corpus ingested, as the demo ingests it."""
    data = tmp_path_factory.mktemp("sample-data")
    subprocess.run(
        [
            binary(),
            "--data-dir",
            str(data),
            "ingest",
            str(SAMPLE / "documents"),
            "--default-publish-date",
            "2019-01-01",
        ],
        check=True,
        capture_output=True,
    )
    return data


@pytest.fixture
def data_dir(sample_data: Path, tmp_path: Path) -> Path:
    """A fresh copy of the sample data directory for one test."""
    data = tmp_path / "data"
    shutil.copytree(sample_data, data)
    return data


@pytest.fixture(scope="session")
def questions() -> list[dict[str, Any]]:
    return json.loads((SAMPLE / "questions.json").read_text())["questions"]


class Server:
    """A running `research-ledger serve` on a free loopback port."""

    def __init__(self, data: Path) -> None:
        self.data = data
        self.process: subprocess.Popen[str] | None = None
        self.url = ""
        self.start()

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RESEARCH_LEDGER_")}
        self.process = subprocess.Popen(
            [binary(), "--data-dir", str(self.data), "serve", "--listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()
        assert line.startswith("listening on http://"), line
        self.url = line.removeprefix("listening on ") + "/mcp"

    def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.process is not None
        self.process.send_signal(sig)
        code = self.process.wait(timeout=30)
        self.process = None
        return code

    def restart(self, sig: int = signal.SIGTERM) -> None:
        self.stop(sig)
        self.start()


@pytest.fixture
def server(data_dir: Path) -> Iterator[Server]:
    s = Server(data_dir)
    yield s
    if s.process is not None:
        s.stop()


def stdio_params(data: Path) -> StdioServerParameters:
    return StdioServerParameters(command=binary(), args=["--data-dir", str(data), "mcp"])


@asynccontextmanager
async def connect(target: str | StdioServerParameters, mode: str, **kwargs: Any) -> AsyncIterator[Client]:
    kwargs.setdefault("client_info", Implementation(name=CLIENT_NAME, version="1.0"))
    kwargs.setdefault("read_timeout_seconds", 60)
    async with Client(target, mode=mode, **kwargs) as client:
        yield client


@pytest.fixture(params=["stdio", "http"])
def transport(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def target(transport: str, data_dir: Path, request: pytest.FixtureRequest) -> str | StdioServerParameters:
    """Where a client connects: the stdio command, or a running server's URL."""
    if transport == "stdio":
        return stdio_params(data_dir)
    s: Server = request.getfixturevalue("server")
    return s.url


async def call(client: Client, name: str, arguments: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """Calls a tool that must succeed and returns its structured result."""
    result = await client.call_tool(name, arguments, **kwargs)
    assert not result.is_error, f"{name}: {result.structured_content or result.content}"
    assert result.structured_content is not None, name
    assert result.content and result.content[0].type == "text", name
    return result.structured_content


async def refused(client: Client, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Calls a tool that must be refused and returns the structured error."""
    result = await client.call_tool(name, arguments)
    assert result.is_error, f"{name} was not refused: {result.structured_content}"
    assert result.structured_content is not None
    return result.structured_content


def screening_decisions(question: dict[str, Any], evidence_of: dict[str, str]) -> list[dict[str, Any]]:
    """What an assistant decides about each candidate found (`evidence_of`: a result id to its
    evidence id), by the sample question's judgements; anything the sample does not judge is
    rejected as off topic."""
    judged = {s["doc_id"]: s for s in question["screening"]}
    decisions, seen = [], set()
    for doc, evidence_id in sorted(evidence_of.items()):
        if evidence_id in seen:
            continue
        seen.add(evidence_id)
        s = judged.get(doc)
        if s is None:
            decisions.append({"evidence_id": evidence_id, "adopt": False, "reason": f"{doc} is off topic"})
            continue
        index = s["sub_question_index"]
        decisions.append(
            {
                "evidence_id": evidence_id,
                "adopt": s["adopt"],
                "stance": s["stance"],
                "sub_question": f"sq-{index}" if index is not None else None,
                "reason": s["reason"],
            }
        )
    return decisions


def not_found_code(mode: str) -> int:
    """Resource not found: -32002 before 2026-07-28, -32602 from it."""
    return -32602 if mode == "2026-07-28" else -32002


sys.path.insert(0, str(Path(__file__).parent))
