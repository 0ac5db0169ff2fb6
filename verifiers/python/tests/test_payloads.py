"""Payload versions as docs/event-payloads.md gives them, built by hand from the tables: a
decision that names who made it is version 3, one that does not is version 1, and a version
that could have been another is refused."""

from __future__ import annotations

import struct

import pytest

from research_ledger_verify.postcard import DecodeError
from research_ledger_verify.payloads import decode


def string(text: str) -> bytes:
    raw = text.encode()
    assert len(raw) < 128
    return bytes([len(raw)]) + raw


V1_BODY = string("cf-1") + bytes([0]) + string("the wider record") + bytes([0])
DECIDER = bytes([1]) + bytes([1]) + string("pytest-assistant")  # some(Decider{assistant, …})


def test_version_1_reads_without_who_decided() -> None:
    view = decode("conflict_resolved", b"\x01\x00" + V1_BODY)
    assert view == {
        "type": "conflict_resolved",
        "conflict_id": "cf-1",
        "outcome": "supports",
        "reason": "the wider record",
        "previous_outcome": None,
    }


def test_version_3_reads_who_decided() -> None:
    view = decode("conflict_resolved", b"\x03\x00" + V1_BODY + DECIDER)
    assert view["decided_by"] == {"by": "assistant", "via": "pytest-assistant"}


@pytest.mark.parametrize(
    "payload",
    [
        b"\x03\x00" + V1_BODY + b"\x00",  # version 3 without who decided
        b"\x02\x00" + V1_BODY,  # no version 2 of a decision
        b"\x01\x00" + V1_BODY + DECIDER,  # version 1 with a part it cannot hold
    ],
)
def test_a_decision_in_a_version_it_could_not_have_is_refused(payload: bytes) -> None:
    with pytest.raises(DecodeError):
        decode("conflict_resolved", payload)


# A task opened on rule set v1: its id, question, no constraints, its date, tool_constrained, then
# the rule set's id and its 19 numbers (weights, half-life, authority table, thresholds).
TASK_BODY = (
    string("t-1") + string("Is it so?") + bytes([0]) + string("2026-03-01") + bytes([0])
    + string("v1") + b"\x00" * 8 * 19
)


def test_a_task_requiring_a_person_is_version_3() -> None:
    plain = decode("task_opened", b"\x01\x00" + TASK_BODY)
    assert "conflict_decisions" not in plain
    # Version 3: the rule set's v2 part is an option (here absent), then who may decide.
    view = decode("task_opened", b"\x03\x00" + TASK_BODY + b"\x00" + b"\x01\x00")
    assert view["conflict_decisions"] == "person"
    assert "v2" not in view["rules"]


@pytest.mark.parametrize(
    "payload",
    [
        b"\x03\x00" + TASK_BODY + b"\x00" + b"\x00",  # version 3 without the restriction
        b"\x01\x00" + TASK_BODY + b"\x01\x00",  # version 1 with a part it cannot hold
    ],
)
def test_a_task_opening_in_a_version_it_could_not_have_is_refused(payload: bytes) -> None:
    with pytest.raises(DecodeError):
        decode("task_opened", payload)


# A task opened on rule set v2: the rule set's id and 19 numbers as above, then its v2 part
# (some) with query_weight 0.5, coverage_full 0.15, sided_items_min 1, sided_relevance_min 0.3,
# no undated_recency, no side_weight_ratio; version 4 adds the query cap.
V2_TASK_HEAD = (
    string("t-1") + string("Is it so?") + bytes([0]) + string("2026-03-01") + bytes([0])
    + string("v2") + b"\x00" * 8 * 19
)
V2_PARAMETERS = (
    struct.pack("<d", 0.5) + struct.pack("<d", 0.15) + bytes([1]) + struct.pack("<d", 0.3)
    + b"\x00" + b"\x00"
)
CAP = b"\x01" + struct.pack("<d", 2.0)


def test_a_task_recording_the_query_cap_is_version_4() -> None:
    # Before the cap: version 2 ends the parameters (and the task) before it.
    old = decode("task_opened", b"\x02\x00" + V2_TASK_HEAD + b"\x01" + V2_PARAMETERS)
    assert "query_cap" not in old["rules"]["v2"]
    assert "conflict_decisions" not in old
    # Version 4: the cap after the parameters, then who may decide as an option.
    view = decode("task_opened", b"\x04\x00" + V2_TASK_HEAD + b"\x01" + V2_PARAMETERS + CAP + b"\x00")
    assert view["rules"]["v2"]["query_cap"] == 2.0
    assert "conflict_decisions" not in view
    restricted = decode(
        "task_opened", b"\x04\x00" + V2_TASK_HEAD + b"\x01" + V2_PARAMETERS + CAP + b"\x01\x00"
    )
    assert restricted["conflict_decisions"] == "person"
    assert restricted["rules"]["v2"] == {**old["rules"]["v2"], "query_cap": 2.0}


@pytest.mark.parametrize(
    "payload",
    [
        # version 4 without the cap
        b"\x04\x00" + V2_TASK_HEAD + b"\x01" + V2_PARAMETERS + b"\x00" + b"\x00",
        # version 4 of a v1 task, which has no parameters to cap
        b"\x04\x00" + TASK_BODY + b"\x00" + b"\x00",
        # the version 2 body under version 4, and the version 4 body under versions 2 and 3
        b"\x04\x00" + V2_TASK_HEAD + b"\x01" + V2_PARAMETERS,
        b"\x02\x00" + V2_TASK_HEAD + b"\x01" + V2_PARAMETERS + CAP + b"\x00",
        b"\x03\x00" + V2_TASK_HEAD + b"\x01" + V2_PARAMETERS + CAP + b"\x01\x00",
    ],
)
def test_a_cap_in_a_version_that_cannot_hold_it_or_none_in_version_4_is_refused(payload: bytes) -> None:
    with pytest.raises(DecodeError):
        decode("task_opened", payload)


def test_no_other_kind_is_version_4() -> None:
    with pytest.raises(DecodeError):
        decode("conflict_resolved", b"\x04\x00" + V1_BODY + DECIDER)
