"""Reading an item as a reader judges it, through the official Python SDK: the document's title,
the text around the passage a page at a time, and why the item scored its relevance; and a
search previewed before any of its hits become candidates, then the chosen hits added."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import call, connect, refused, stdio_params

pytestmark = pytest.mark.anyio


def text_of(result: Any) -> str:
    return "\n".join(b.text for b in result.content if b.type == "text")


async def opened(client: Any, questions: list[dict[str, Any]]) -> str:
    question = questions[0]
    task = await call(
        client,
        "research_open_task",
        {"question": question["question"], "research_date": question["research_date"]},
    )
    return task["task_id"]


async def test_source_detail_gives_the_title_the_text_in_pages_and_the_relevance_explained(
    data_dir: Any, questions: list[dict[str, Any]]
) -> None:
    async with connect(stdio_params(data_dir), "2026-07-28") as client:
        task = await opened(client, questions)
        found = await call(client, "retrieval_search_evidence", {"task_id": task, "limit": 3})
        item = found["candidates"][0]
        args = {"task_id": task, "evidence_id": item["evidence_id"]}
        result = await client.call_tool("retrieval_get_source_detail", args)
        assert not result.is_error, result.content
        detail = result.structured_content
        assert detail["title"], detail
        assert detail["passage_offset"] == 0, detail
        total = detail["content_chars"]
        assert detail["content"] and len(detail["content"]) == min(total, 2000)
        text = text_of(result)
        assert detail["title"] in text and detail["content"] in text, text

        # Why it scored what it did: the recorded inputs, weighed.
        explained = detail["relevance_explained"]
        assert explained["formula"].endswith(f"= {detail['evidence']['relevance']:.3f}"), explained
        terms = explained["question"]["matched"] + explained["question"]["missed"]
        assert terms and all(isinstance(t, str) and w > 0 for t, w in terms), explained
        matched = {t for t, _ in explained["question"]["matched"]}
        recorded = detail["evidence"]["relevance_inputs"]["terms"]
        assert matched == {t["term"] for t in recorded if t["in_question"] and t["found"]}
        assert "Relevance min(1, " in text, text

        # A page of 20 characters, then the next.
        page = await call(client, "retrieval_get_source_detail", {**args, "offset": 0, "limit": 20})
        assert page["content"] == detail["content"][:20] and page["next_offset"] == 20, page
        following = await call(
            client, "retrieval_get_source_detail", {**args, "offset": 20, "limit": 20}
        )
        assert following["content"] == detail["content"][20:40], following
        assert following["offset"] == 20
        # Bounded, and within the text.
        too_long = await refused(client, "retrieval_get_source_detail", {**args, "limit": 8001})
        assert too_long["error"] == "limit_exceeded" and too_long["limit"] == "detail_chars_max"
        beyond = await refused(
            client, "retrieval_get_source_detail", {**args, "offset": total + 1}
        )
        assert beyond["error"] == "invalid_argument" and beyond["field"] == "offset", beyond


async def test_a_preview_records_the_search_and_the_chosen_hits_become_candidates(
    data_dir: Any, questions: list[dict[str, Any]]
) -> None:
    async with connect(stdio_params(data_dir), "2026-07-28") as client:
        task = await opened(client, questions)
        result = await client.call_tool(
            "retrieval_search_evidence", {"task_id": task, "limit": 5, "preview": True}
        )
        assert not result.is_error, result.content
        preview = result.structured_content
        assert preview["preview"] is True and len(preview["hits"]) == 5, preview
        assert "candidates" not in preview
        text = text_of(result)
        for hit in preview["hits"]:
            assert hit["result_id"] in text and "evidence_id" not in hit, hit
        # Recorded, with no candidates made.
        listed = await call(client, "retrieval_list_candidates", {"task_id": task})
        assert listed["total"] == 0, listed
        state = await client.read_resource(f"ledger://tasks/{task}/events")
        assert "search_recorded" in state.contents[0].text

        chosen = [preview["hits"][1]["result_id"], preview["hits"][3]["result_id"]]
        added = await call(
            client,
            "retrieval_search_evidence",
            {"task_id": task, "from_search": preview["search_id"], "result_ids": chosen},
        )
        assert [c["result_id"] for c in added["candidates"]] == chosen or sorted(
            c["result_id"] for c in added["candidates"]
        ) == sorted(chosen), added
        assert added["query"] == preview["query"] and added["search_id"] != preview["search_id"]
        listed = await call(client, "retrieval_list_candidates", {"task_id": task})
        assert listed["total"] == 2, listed
        by_result = {c["result_id"]: c for c in added["candidates"]}
        for hit in preview["hits"]:
            if hit["result_id"] in by_result:
                assert by_result[hit["result_id"]]["relevance"] == hit["relevance"]

        # Refusals name the field.
        for arguments, field in [
            ({"from_search": preview["search_id"]}, "result_ids"),
            ({"from_search": preview["search_id"], "result_ids": ["nope"]}, "result_ids"),
            ({"result_ids": chosen}, "result_ids"),
            ({"from_search": preview["search_id"], "result_ids": chosen, "query": "x"}, "query"),
            ({"from_search": preview["search_id"], "result_ids": chosen, "preview": True}, "preview"),
        ]:
            error = await refused(client, "retrieval_search_evidence", {"task_id": task, **arguments})
            assert error["error"] == "invalid_argument" and error["field"] == field, (arguments, error)
        missing = await refused(
            client,
            "retrieval_search_evidence",
            {"task_id": task, "from_search": "search-99", "result_ids": chosen},
        )
        assert missing["error"] == "not_found", missing
