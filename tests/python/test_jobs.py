"""Pipeline jobs through MCP: polled to completion, resumed after a restart of the server."""

from __future__ import annotations

import signal
from typing import Any

import anyio
import pytest

from conftest import Server, call, connect

pytestmark = pytest.mark.anyio

QUESTION = "Did agricultural runoff cause the algae blooms in Lake Varden?"


async def poll(client: Any, job_id: str) -> dict[str, Any]:
    with anyio.fail_after(60):
        while True:
            job = await call(client, "research_job_status", {"job_id": job_id})
            assert job["steps_total"] == 8
            assert job["progress"].startswith(f"step {job['step']}/8: ")
            if job["status"] != "running":
                return job
            await anyio.sleep(0.05)


async def screen_all(client: Any, task: str) -> None:
    """Adopts what supports or opposes by its source type, as a quick reviewer would: the
    judgement is the client's, whatever it is."""
    state = await client.read_resource(f"ledger://tasks/{task}/state")
    import json

    evidence = json.loads(state.contents[0].text)["evidence"]
    decisions = [
        {
            "evidence_id": e["evidence_id"],
            "adopt": i % 3 != 2,
            "stance": ["supports", "opposes", "neutral"][i % 3],
            "reason": "read in full",
        }
        for i, e in enumerate(x for x in evidence if x["status"] == "candidate")
    ]
    assert decisions
    await call(client, "synthesis_screen_evidence", {"task_id": task, "decisions": decisions})


async def searches(client: Any, task: str) -> int:
    import json

    # The trail comes a page at a time: follow `next` to its end.
    uri: str | None = f"ledger://tasks/{task}/events"
    count = 0
    while uri:
        page = json.loads((await client.read_resource(uri)).contents[0].text)
        count += sum(1 for e in page["events"] if e["kind"] == "search_recorded")
        uri = page.get("next")
    return count


async def test_a_job_is_polled_to_completion(target: Any, mode: str) -> None:
    async with connect(target, mode) as client:
        opened = await call(client, "research_open_task", {"question": QUESTION, "research_date": "2025-06-30"})
        task = opened["task_id"]
        await call(client, "research_expand_subquestions", {"task_id": task, "sub_questions": ["Did phosphorus loads rise?", "Were the summers warmer?"]})
        started = await call(client, "research_run_pipeline", {"task_id": task})
        assert started["status"] in {"running", "waiting"}
        job = await poll(client, started["job_id"])
        assert job["status"] == "waiting"
        assert job["progress"].startswith("step 3/8: waiting for screening")
        assert job["pending_actions"][0]["tool"] == "synthesis_screen_evidence"
        assert [s["name"] for s in job["steps"]] == ["plan", "retrieve"]
        assert await searches(client, task) == 3

        await screen_all(client, task)
        again = await call(client, "research_run_pipeline", {"task_id": task})
        job = await poll(client, again["job_id"])
        assert job["status"] == "completed", job
        assert job["progress"].startswith("step 8/8: completed: verdict ")
        assert [s["name"] for s in job["steps"]] == ["plan", "retrieve", "screen", "resolve", "synthesise", "matrix", "conclude", "explain"]
        assert job["conclusion"]["stance"] in {"supportive", "opposing", "uncertain", "evidence_insufficient"}
        assert await searches(client, task) == 3
        card = await call(client, "research_summarize_state", {"task_id": task})
        assert card["session_version"] == job["session_version"]


async def test_a_job_resumes_after_the_server_restarts(server: Server, mode: str) -> None:
    async with connect(server.url, mode) as client:
        opened = await call(client, "research_open_task", {"question": QUESTION, "research_date": "2025-06-30"})
        task = opened["task_id"]
        started = await call(client, "research_run_pipeline", {"task_id": task, "idempotency_key": "run-1"})
        job = await poll(client, started["job_id"])
        assert job["status"] == "waiting"

    # The process dies without a chance to say anything.
    server.restart(signal.SIGKILL)

    async with connect(server.url, mode) as client:
        kept = await call(client, "research_job_status", {"job_id": started["job_id"]})
        assert kept["status"] == "waiting"
        assert kept["step"] == 3
        # The same key is the same job, even across the restart.
        retried = await call(client, "research_run_pipeline", {"task_id": task, "idempotency_key": "run-1"})
        assert retried["job_id"] == started["job_id"] and retried["replayed"] is True

        await screen_all(client, task)
        resumed = await call(client, "research_run_pipeline", {"task_id": task})
        job = await poll(client, resumed["job_id"])
        assert job["status"] == "completed", job
        assert job["steps"][1]["outcome"] == "skipped"
        assert await searches(client, task) == 1


async def test_a_previewed_query_counts_as_searched_for_the_pipeline(target: Any, mode: str) -> None:
    async with connect(target, mode) as client:
        opened = await call(client, "research_open_task", {"question": QUESTION, "research_date": "2025-06-30"})
        task = opened["task_id"]
        # The main question's query, previewed: recorded as a search, with no candidate made.
        preview = await call(client, "retrieval_search_evidence", {"task_id": task, "preview": True})
        assert preview["preview"] is True and preview["query"] == QUESTION, preview
        assert await searches(client, task) == 1
        started = await call(client, "research_run_pipeline", {"task_id": task})
        job = await poll(client, started["job_id"])
        # The pipeline does not search that query again.
        assert job["steps"][1]["name"] == "retrieve", job
        assert job["steps"][1]["outcome"] == "skipped", job
        assert await searches(client, task) == 1
