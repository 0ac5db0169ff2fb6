"""The frozen bundle of the first released format (tests/fixtures/format-v1) verifies here too,
from its first key and its current one, with its witness."""

import json
from pathlib import Path

import pytest

from research_ledger_verify import bundle, notes
from research_ledger_verify.errors import Invalid

FIXTURE = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "format-v1"


def test_the_frozen_bundle_verifies():
    text = (FIXTURE / "bundle.json").read_text()
    witness = notes.VerifierKey.parse((FIXTURE / "witness.vkey").read_text())
    log = json.loads(text)["checkpoint_log"]
    first = bytes.fromhex(log[0]["public_key"])
    current = bytes.fromhex(next(e for e in log if e["entry"] == "rotation")["new_public_key"])
    for key in (first, current):
        report = bundle.verify(text, key, [witness])
        assert report["events"] == 69
        assert report["witnesses"] == [str(witness)]
    other = notes.VerifierKey(witness.name, notes.TYPE_COSIGNATURE, bytes(range(32)))
    with pytest.raises(Invalid) as refused:
        bundle.verify(text, first, [other])
    assert refused.value.location == "checkpoint"
