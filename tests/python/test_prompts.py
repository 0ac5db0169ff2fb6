"""Prompts and the completion of their arguments (and of the resource templates')."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import call, connect
from mcp import types

pytestmark = pytest.mark.anyio


async def test_prompts_carry_the_record_and_task_ids_complete(target: Any, mode: str) -> None:
    async with connect(target, mode) as client:
        prompts = {p.name: p for p in (await client.list_prompts()).prompts}
        assert set(prompts) == {"deep_research", "review_conflicts", "audit_verdict"}
        assert [(a.name, a.required) for a in prompts["deep_research"].arguments or []] == [
            ("question", True),
            ("constraints", False),
        ]

        deep = await client.get_prompt(
            "deep_research", {"question": "Do bike shares cut short car trips?", "constraints": "2020-2024\nQingchuan only"}
        )
        text = deep.messages[0].content.text
        assert deep.messages[0].role == "user"
        assert "Do bike shares cut short car trips?" in text
        assert "2020-2024; Qingchuan only" in text
        assert "research_open_task" in text and "synthesis_screen_evidence" in text

        first = await call(client, "research_open_task", {"question": "Is the lake warmer than in 2010?"})
        second = await call(client, "research_open_task", {"question": "Is the river colder?"})
        review = await client.get_prompt("review_conflicts", {"task_id": first["task_id"]})
        assert first["task_id"] in review.messages[0].content.text
        assert "evaluation_resolve_conflict" in review.messages[0].content.text

        # Task ids complete from a prefix, for prompts and for resource templates alike.
        prefix = first["task_id"][:4]
        done = await client.complete(types.PromptReference(name="audit_verdict"), {"name": "task_id", "value": ""})
        assert {first["task_id"], second["task_id"]} <= set(done.completion.values)
        narrowed = await client.complete(
            types.ResourceTemplateReference(uri="ledger://tasks/{task_id}/state"),
            {"name": "task_id", "value": first["task_id"]},
        )
        assert narrowed.completion.values == [first["task_id"]]
        assert all(v.startswith(prefix) for v in (await client.complete(
            types.PromptReference(name="review_conflicts"), {"name": "task_id", "value": prefix}
        )).completion.values)
        versions = await client.complete(
            types.ResourceTemplateReference(uri="ledger://tasks/{task_id}/state/{version}"),
            {"name": "version", "value": ""},
            context_arguments={"task_id": first["task_id"]},
        )
        assert versions.completion.values == ["1"]


async def test_the_audit_prompt_carries_the_card_and_its_explanation(target: Any, mode: str) -> None:
    async with connect(target, mode) as client:
        opened = await call(client, "research_open_task", {"question": "Does lithium supply outgrow demand?", "research_date": "2025-06-30"})
        task = opened["task_id"]
        added = await call(
            client,
            "retrieval_add_evidence",
            {
                "task_id": task,
                "source": "statistics.example.org",
                "publish_date": "2025-01-10",
                "source_type": "government",
                "content": "Lithium supply grew faster than demand in 2024, the statistics office reports.",
                "stance": "supports",
            },
        )
        await call(client, "synthesis_screen_evidence", {"task_id": task, "decisions": [{"evidence_id": added["evidence_id"], "adopt": True}]})
        for tool in ["evaluation_conflict_resolution", "evaluation_build_decision_matrix", "evaluation_generate_conclusion", "evaluation_explain_reasoning"]:
            await call(client, tool, {"task_id": task})
        audit = await client.get_prompt("audit_verdict", {"task_id": task})
        text = audit.messages[0].content.text
        assert added["evidence_id"] in text
        assert "audit_verify" in text
        assert f"ledger://tasks/{task}/events" in text
