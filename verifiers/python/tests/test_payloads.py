"""Payload versions as docs/event-payloads.md gives them, built by hand from the tables: a
decision that names who made it is version 3, one that does not is version 1, and a version
that could have been another is refused."""

from __future__ import annotations

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
