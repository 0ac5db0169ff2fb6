"""What an assistant pays in context, measured as a client receives it: the tool list, and one
question researched end to end (open, a search of 10, screening, conflicts, matrix, conclusion,
explanation), text content and structured content together. And a client that reads only the
text of results can research a task all the same."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from conftest import connect, stdio_params

pytestmark = pytest.mark.anyio

TOOLS_LIST_BYTES_MAX = 16 * 1024
ONE_QUESTION_BYTES_MAX = 24 * 1024


def size(value: Any) -> int:
    """Bytes of `value` as compact JSON (UTF-8)."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def result_bytes(result: Any) -> int:
    """What one tool result costs: its text blocks and its structured content."""
    text = sum(len(block.text.encode()) for block in result.content if block.type == "text")
    structured = size(result.structured_content) if result.structured_content is not None else 0
    return text + structured


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_the_tool_list_fits_its_budget(data_dir: Any, mode: str) -> None:
    async with connect(stdio_params(data_dir), mode) as client:
        listed = await client.list_tools()
        dumped = listed.model_dump(mode="json", by_alias=True, exclude_none=True)
        bytes_ = size(dumped)
        print(f"tools/list ({mode}): {len(listed.tools)} tools, {bytes_} bytes")
        assert bytes_ <= TOOLS_LIST_BYTES_MAX, bytes_


async def research(client: Any, question: dict[str, Any], spent: dict[str, int]) -> dict[str, Any]:
    """Researches `question` through the tools as an assistant would, adding what each result
    costs to `spent`; returns the conclusion's structured content."""

    async def step(name: str, arguments: dict[str, Any]) -> Any:
        result = await client.call_tool(name, arguments)
        assert not result.is_error, f"{name}: {result.content}"
        spent[name] = spent.get(name, 0) + result_bytes(result)
        return result

    opened = await step(
        "research_open_task",
        {"question": question["question"], "research_date": question["research_date"]},
    )
    task = opened.structured_content["task_id"]
    found = await step("retrieval_search_evidence", {"task_id": task, "limit": 10})
    judged = {s["doc_id"]: s for s in question["screening"] if s["adopt"]}
    decisions = [
        {"evidence_id": c["evidence_id"], "adopt": True, "stance": judged[c["result_id"]]["stance"]}
        for c in found.structured_content["candidates"]
        if c.get("result_id") in judged
    ]
    await step(
        "synthesis_screen_evidence",
        {"task_id": task, "decisions": decisions, "reject_remaining": "not about the question"},
    )
    for name in ["evaluation_conflict_resolution", "evaluation_build_decision_matrix"]:
        await step(name, {"task_id": task})
    conclusion = await step("evaluation_generate_conclusion", {"task_id": task})
    await step("evaluation_explain_reasoning", {"task_id": task})
    return conclusion.structured_content


async def test_one_question_researched_end_to_end_fits_its_budget(
    data_dir: Any, questions: list[dict[str, Any]]
) -> None:
    # The budget is in bytes, which is what a transport carries; a model's tokens are not bytes,
    # and a question in Chinese costs three bytes a character. The budget holds the English
    # questions to it; every question's figures are printed.
    for question in questions:
        english = question["question"].isascii()
        spent: dict[str, int] = {}
        async with connect(stdio_params(data_dir), "2026-07-28") as client:
            card = await research(client, question, spent)
        total = sum(spent.values())
        print(f"{question['id']}: {total} bytes of results; verdict {card['stance']}; {spent}")
        if english:
            assert total <= ONE_QUESTION_BYTES_MAX, (question["id"], total, spent)


async def test_a_client_that_reads_only_text_screens_and_concludes(
    data_dir: Any, questions: list[dict[str, Any]]
) -> None:
    """Only `content` is read: the candidates' ids come from the search's text, the verdict
    from the conclusion's."""
    question = questions[0]
    async with connect(stdio_params(data_dir), "2026-07-28") as client:

        async def text_of(name: str, arguments: dict[str, Any]) -> str:
            result = await client.call_tool(name, arguments)
            assert not result.is_error, f"{name}: {result.content}"
            return "\n".join(b.text for b in result.content if b.type == "text")

        opened = await text_of("research_open_task", {"question": question["question"]})
        task = re.search(r"Opened task ([0-9a-f-]{36})", opened)
        assert task, opened
        task_id = task.group(1)
        found = await text_of("retrieval_search_evidence", {"task_id": task_id, "limit": 10})
        ids = re.findall(r"^(ev-\d+) \[", found, flags=re.MULTILINE)
        assert ids, found
        decisions = [{"evidence_id": ids[0], "adopt": True, "stance": "supports"}]
        screened = await text_of(
            "synthesis_screen_evidence",
            {"task_id": task_id, "decisions": decisions, "reject_remaining": "read, not relevant"},
        )
        assert "0 candidate(s) left" in screened, screened
        for name in ["evaluation_conflict_resolution", "evaluation_build_decision_matrix"]:
            await text_of(name, {"task_id": task_id})
        verdict = await text_of("evaluation_generate_conclusion", {"task_id": task_id})
        assert re.search(r"Verdict: (supportive|opposing|uncertain|evidence_insufficient)", verdict), verdict
