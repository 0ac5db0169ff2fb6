"""People asked for real: a conflict the rules leave pending is asked of the person through MCP
elicitation, when the client declares it, through the Python SDK's elicitation callback (over
stdio and Streamable HTTP) — in both protocol eras (2025-11-25: `elicitation/create` while the call waits; 2026-07-28: an
`input_required` result the SDK answers and retries). An accepted answer is recorded as the
person's decision; a declined or cancelled form records nothing. A task that requires person
decisions refuses the assistant's own `evaluation_resolve_conflict`."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mcp import types

from conftest import CLIENT_NAME, MODES, call, connect, refused, stdio_params

pytestmark = pytest.mark.anyio


async def pending_conflict(client: Any, **open_args: Any) -> tuple[str, list[str]]:
    """A task with one conflict the rules cannot decide: two government items of the same date
    on opposite sides. Returns the task id and the two item ids."""
    opened = await call(
        client,
        "research_open_task",
        {"question": "Is the global sea level rising?", "research_date": "2026-03-01", **open_args},
    )
    task = opened["task_id"]
    ids = []
    for source, stance, text in [
        ("tide-office.example.org", "supports", "Tide gauges show the global mean sea level rising by 3.3 mm a year."),
        ("coast-review.example.org", "opposes", "Some coastal records show no rise in the local sea level."),
    ]:
        added = await call(
            client,
            "retrieval_add_evidence",
            {"task_id": task, "source": source, "source_type": "government",
             "publish_date": "2025-06-30", "content": text, "stance": stance},
        )
        ids.append(added["evidence_id"])
    await call(
        client,
        "synthesis_screen_evidence",
        {"task_id": task, "decisions": [
            {"evidence_id": ids[0], "adopt": True, "stance": "supports"},
            {"evidence_id": ids[1], "adopt": True, "stance": "opposes"},
        ]},
    )
    return task, ids


class Person:
    """An elicitation callback that answers as it is told, and remembers what it was asked."""

    def __init__(self, action: str, content: dict[str, Any] | None = None) -> None:
        self.action = action
        self.content = content
        self.asked: list[types.ElicitRequestParams] = []

    async def __call__(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.asked.append(params)
        return types.ElicitResult(action=self.action, content=self.content)


def conflict_of(result: dict[str, Any]) -> dict[str, Any]:
    assert len(result["conflicts"]) == 1, result
    return result["conflicts"][0]


async def state_decisions(client: Any, task: str) -> list[dict[str, Any]]:
    """Every human decision the task's state records, oldest first."""
    read = await client.read_resource(f"ledger://tasks/{task}/state")
    state = json.loads(read.contents[0].text)
    return [d for c in state["conflicts"] for d in c["human_decisions"]]


@pytest.mark.parametrize("mode", MODES)
async def test_an_accepted_answer_is_recorded_as_the_persons_decision(target: Any, mode: str) -> None:
    person = Person("accept", {"outcome": "opposes", "reason": "the local records are the better measure"})
    async with connect(target, mode, elicitation_callback=person) as client:
        task, ids = await pending_conflict(client)
        result = await client.call_tool("evaluation_conflict_resolution", {"task_id": task})
        assert not result.is_error, result.content
        out = result.structured_content
        # The person was asked once, with a form naming the three outcomes and both sides.
        assert len(person.asked) == 1
        asked = person.asked[0]
        schema = asked.requested_schema
        outcomes = [o["const"] for o in schema["properties"]["outcome"]["oneOf"]]
        assert outcomes == ["supports", "opposes", "both_stand"]
        assert schema["required"] == ["outcome", "reason"]
        assert ids[0] in asked.message and ids[1] in asked.message
        # Recorded as the person's, through this client.
        [entry] = out["elicitation"]
        assert entry["action"] == "accept" and entry["recorded"] is True
        assert entry["decided_by"] == "person" and entry["decided_via"] == CLIENT_NAME
        conflict = conflict_of(out)
        assert conflict["tier"] == "human" and conflict["winner"] == "opposes"
        assert conflict["decision"]["decided_by"] == "person"
        text = result.content[0].text
        assert "recorded as the person's decision" in text
        [decision] = await state_decisions(client, task)
        assert decision["decided_by"] == "person"
        assert decision["decided_via"] == CLIENT_NAME
        assert decision["reason"] == "the local records are the better measure"
        # The verdict follows the person's decision: the supporting item is overruled.
        await call(client, "evaluation_build_decision_matrix", {"task_id": task})
        card = await call(client, "evaluation_generate_conclusion", {"task_id": task})
        assert [a["tier"] for a in card["adjudications"]] == ["human"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_a_declined_or_cancelled_question_records_nothing(data_dir: Any, mode: str, action: str) -> None:
    person = Person(action)
    async with connect(stdio_params(data_dir), mode, elicitation_callback=person) as client:
        task, _ = await pending_conflict(client)
        before = (await call(client, "research_summarize_state", {"task_id": task}))["session_version"]
        result = await client.call_tool("evaluation_conflict_resolution", {"task_id": task})
        assert not result.is_error, result.content
        out = result.structured_content
        assert len(person.asked) == 1
        [entry] = out["elicitation"]
        assert entry == {"conflict_id": conflict_of(out)["conflict_id"], "action": action, "recorded": False}
        assert conflict_of(out)["tier"] == "pending"
        assert "nothing was recorded" in result.content[0].text
        # Only the conflict rules' own event was written; no decision.
        assert out["session_version"] == before + 1
        assert await state_decisions(client, task) == []


async def test_a_client_without_elicitation_is_not_asked(data_dir: Any) -> None:
    async with connect(stdio_params(data_dir), "legacy") as client:
        task, _ = await pending_conflict(client)
        out = await call(client, "evaluation_conflict_resolution", {"task_id": task})
        assert "elicitation" not in out
        conflict = conflict_of(out)
        assert conflict["tier"] == "pending"
        # What a person needs to decide it, compact: each side's items with their summaries.
        assert conflict["supports"][0]["summary"].startswith("Tide gauges")
        assert conflict["opposes"][0]["source"] == "coast-review.example.org"


@pytest.mark.parametrize("mode", MODES)
async def test_a_task_requiring_a_person_refuses_the_assistants_decision(data_dir: Any, mode: str) -> None:
    async with connect(stdio_params(data_dir), mode) as client:
        task, _ = await pending_conflict(client, conflict_decisions="person")
        out = await call(client, "evaluation_conflict_resolution", {"task_id": task})
        conflict_id = conflict_of(out)["conflict_id"]
        error = await refused(
            client,
            "evaluation_resolve_conflict",
            {"task_id": task, "conflict_id": conflict_id, "winner": "supports", "reason": "I think so"},
        )
        assert error["error"] == "person_decision_required"
        assert error["conflict_id"] == conflict_id and error["task_id"] == task
        assert await state_decisions(client, task) == []

    # The same task, asked of a person through elicitation: recorded.
    person = Person("accept", {"outcome": "both_stand", "reason": "both measure something real"})
    async with connect(stdio_params(data_dir), mode, elicitation_callback=person) as client:
        result = await client.call_tool("evaluation_conflict_resolution", {"task_id": task})
        assert not result.is_error, result.content
        [entry] = result.structured_content["elicitation"]
        assert entry["recorded"] is True and entry["outcome"] == "both_stand"
        [decision] = await state_decisions(client, task)
        assert decision["decided_by"] == "person"
    # Without such an option, the assistant's own decision is recorded, as the assistant's.
    async with connect(stdio_params(data_dir), mode) as client:
        other, _ = await pending_conflict(client)
        out = await call(client, "evaluation_conflict_resolution", {"task_id": other})
        decided = await call(
            client,
            "evaluation_resolve_conflict",
            {"task_id": other, "conflict_id": conflict_of(out)["conflict_id"], "winner": "supports",
             "reason": "the gauges are global"},
        )
        assert decided["conflict"]["decision"]["decided_by"] == "assistant"
