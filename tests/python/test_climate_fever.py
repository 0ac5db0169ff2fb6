"""A scripted session on real data: claims of Climate-FEVER (tests/fixtures/climate-fever, CC
BY-SA 4.0) researched end to end through the official Python SDK over stdio, as an assistant
would — open, a search of 10, screening by the dataset's own labels, conflicts, matrix,
conclusion, explanation — measuring what the results cost against the budgets, with the tool
list's."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, binary, connect, stdio_params
from test_budgets import ONE_QUESTION_BYTES_MAX, TOOLS_LIST_BYTES_MAX, result_bytes, size

pytestmark = pytest.mark.anyio

FIXTURE = ROOT / "tests" / "fixtures" / "climate-fever"
STANCE = {"SUPPORTS": "supports", "REFUTES": "opposes"}


@pytest.fixture(scope="module")
def climate_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("climate-fever")
    subprocess.run(
        [binary(), "--data-dir", str(data), "ingest", str(FIXTURE / "evidence.jsonl"),
         "--default-publish-date", "2020-01-01"],
        check=True,
        capture_output=True,
    )
    return data


def claims() -> dict[str, dict[str, Any]]:
    lines = (FIXTURE / "claims.jsonl").read_text().splitlines()
    return {c["claim_id"]: c for c in map(json.loads, lines)}


@pytest.mark.parametrize("claim_id", ["14", "44"])
async def test_a_real_claim_researched_end_to_end_fits_the_budgets(
    climate_data: Path, tmp_path: Path, claim_id: str
) -> None:
    data = tmp_path / "data"
    shutil.copytree(climate_data, data)
    claim = claims()[claim_id]
    labels = {e["evidence_id"]: e["evidence_label"] for e in claim["evidences"]}
    spent: dict[str, int] = {}
    async with connect(stdio_params(data), "2026-07-28") as client:
        listed = await client.list_tools()
        tools_bytes = size(listed.model_dump(mode="json", by_alias=True, exclude_none=True))
        assert tools_bytes <= TOOLS_LIST_BYTES_MAX, tools_bytes

        async def step(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
            result = await client.call_tool(name, arguments)
            assert not result.is_error, f"{name}: {result.content}"
            spent[name] = spent.get(name, 0) + result_bytes(result)
            return result.structured_content

        opened = await step("research_open_task", {"question": claim["claim"], "research_date": "2026-03-01"})
        task = opened["task_id"]
        found = await step("retrieval_search_evidence", {"task_id": task, "limit": 10})
        candidates = found["candidates"]
        # Up to the limit: the fixture's sentences that hold one of the claim's content terms.
        assert 0 < len(candidates) <= 10, candidates
        # The dataset's own judgement of each sentence it pairs with the claim; every other hit
        # is rejected in one go.
        decisions = [
            {"evidence_id": c["evidence_id"], "adopt": True, "stance": STANCE[labels[c["result_id"]]]}
            for c in candidates
            if labels.get(c["result_id"]) in STANCE
        ]
        assert decisions, (claim["claim"], [c["result_id"] for c in candidates])
        screened = await step(
            "synthesis_screen_evidence",
            {"task_id": task, "decisions": decisions, "reject_remaining": "not evidence on the claim"},
        )
        assert screened["candidates_remaining"] == 0
        await step("evaluation_conflict_resolution", {"task_id": task})
        await step("evaluation_build_decision_matrix", {"task_id": task})
        card = await step("evaluation_generate_conclusion", {"task_id": task})
        explained = await step("evaluation_explain_reasoning", {"task_id": task})
    total = sum(spent.values())
    print(f"claim {claim_id}: tools/list {tools_bytes} bytes; results {total} bytes; "
          f"verdict {card['stance']} ({claim['claim_label']}); {spent}")
    assert total <= ONE_QUESTION_BYTES_MAX, (total, spent)
    assert card["stance"] in {"supportive", "opposing", "uncertain", "evidence_insufficient"}
    assert {e["evidence_id"] for e in card["evidence"]} <= {d["evidence_id"] for d in decisions}
    # Every sentence is Wikipedia's and undated: the result says so rather than hiding it.
    kinds = {w["kind"] for w in card["warnings"]}
    assert {"single_source", "defaulted_dates"} <= kinds, card["warnings"]
    assert explained["conclusion_id"] == card["conclusion_id"]


async def test_a_real_hit_reads_with_its_article_title_and_its_relevance_explained(
    climate_data: Path, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    shutil.copytree(climate_data, data)
    claim = claims()["14"]
    async with connect(stdio_params(data), "2026-07-28") as client:
        opened = await client.call_tool("research_open_task", {"question": claim["claim"]})
        task = opened.structured_content["task_id"]
        found = await client.call_tool("retrieval_search_evidence", {"task_id": task, "limit": 3})
        hit = found.structured_content["candidates"][0]
        result = await client.call_tool(
            "retrieval_get_source_detail", {"task_id": task, "evidence_id": hit["evidence_id"]}
        )
        assert not result.is_error, result.content
        detail = result.structured_content
        # A Climate-FEVER sentence is its own document: its title is the article's.
        assert detail["title"] == hit["result_id"].rsplit(":", 1)[0], detail["title"]
        assert detail["content"] and detail["passage_offset"] == 0
        explained = detail["relevance_explained"]
        assert explained["formula"].endswith(f"{detail['evidence']['relevance']:.3f}"), explained
        assert explained["question"]["matched"], explained
        text = "\n".join(b.text for b in result.content if b.type == "text")
        assert detail["title"] in text and "Relevance min(1, " in text, text
