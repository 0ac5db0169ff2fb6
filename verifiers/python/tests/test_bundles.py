"""The two verifiers side by side: `research-ledger verify-bundle` and this package, on the
demo's bundles and on doctored copies of every field family. Any disagreement — in the verdict
or in the place of the first problem — fails: then the docs or the code are wrong.

Needs the binary: RESEARCH_LEDGER_BIN (scripts/test sets it)."""

import json
import os
import subprocess
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from research_ledger_verify import bundle
from research_ledger_verify.errors import Invalid

from doctor import doctored

BIN = os.environ.get("RESEARCH_LEDGER_BIN")
pytestmark = pytest.mark.skipif(
    not BIN and not os.environ.get("RESEARCH_LEDGER_REQUIRE_BIN"),
    reason="RESEARCH_LEDGER_BIN is not set",
)


def run(*args, data=None, check=True):
    cmd = [BIN] + (["--data-dir", str(data)] if data else []) + list(args)
    out = subprocess.run(cmd, capture_output=True, text=True)
    if check and out.returncode != 0:
        raise AssertionError(f"{cmd}: {out.stdout}{out.stderr}")
    return out


@pytest.fixture(scope="module")
def ledger(tmp_path_factory):
    """A data directory with two tasks, a key rotation between them and idempotency keys; its
    whole-ledger bundle, a task bundle without content, and both keys."""
    work = tmp_path_factory.mktemp("rl-verify")
    data = work / "data"
    report = json.loads(run("demo", "--json", "--question", "four-day-week-eastvale", data=data).stdout)
    task = report["tasks"][0]["task_id"]
    old_key = run("key", "show", data=data).stdout.splitlines()[0]
    run("key", "rotate", data=data)
    run("demo", "--json", "--question", "lake-varden-blooms", data=data)
    run("checkpoint", data=data)
    shown = run("key", "show", data=data).stdout.splitlines()
    run("export", "--all", "--out", str(work / "all.json"), data=data)
    run("export", task, "--without-content", "--out", str(work / "task.json"), data=data)
    fixture = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "format-v1" / "bundle.json"
    return {
        "work": work,
        "fixture": fixture.read_text(),
        "all": (work / "all.json").read_text(),
        "task": (work / "task.json").read_text(),
        "old_key": old_key,
        "new_key": shown[0],
        "vkey": shown[1],
    }


def rust_verdict(text: str, work: Path, *flags) -> tuple[int, str]:
    path = work / "doctored.json"
    path.write_text(text)
    out = run("verify-bundle", str(path), *flags, check=False)
    location = ""
    for line in out.stdout.splitlines():
        if line.startswith("INVALID at "):
            location = line[len("INVALID at ") :].split(": ", 1)[0]
    return out.returncode, location.split(", line ")[0]


def python_verdict(text: str, trusted=None) -> tuple[int, str]:
    try:
        bundle.verify(text, trusted)
        return 0, ""
    except Invalid as e:
        return 1, e.location


def test_the_demo_bundles_are_valid_for_both(ledger):
    for name in ("all", "task"):
        assert rust_verdict(ledger[name], ledger["work"]) == (0, ""), name
        assert python_verdict(ledger[name]) == (0, ""), name


def test_tasks_recording_the_query_cap_and_tasks_before_it_verify_for_both(ledger):
    """The demo opens its tasks on v2's defaults, which record the query cap (schema version 4);
    the frozen fixture's task was opened before the cap (version 2). Both verifiers accept both,
    and this package's view of each payload is the one the bundle holds."""
    import base64

    from research_ledger_verify import envelope, payloads

    def versions(text):
        seen = {}
        for e in json.loads(text)["events"]:
            stored = envelope.decode_stored(base64.b64decode(e["stored"]))
            if stored.kind in ("task_opened", "conclusion_issued"):
                version = int.from_bytes(stored.payload[:2], "little")
                view = payloads.decode(stored.kind, stored.payload)
                assert view == e["decoded"]["payload"], stored.kind
                seen.setdefault(stored.kind, set()).add((version, view["rules"]["v2"].get("query_cap")))
        return seen

    assert versions(ledger["all"]) == {"task_opened": {(4, 2.0)}, "conclusion_issued": {(4, 2.0)}}
    assert versions(ledger["fixture"]) == {"task_opened": {(2, None)}, "conclusion_issued": {(2, None)}}
    for name in ("all", "fixture"):
        assert rust_verdict(ledger[name], ledger["work"]) == (0, ""), name
        assert python_verdict(ledger[name]) == (0, ""), name


def test_an_auditor_holding_any_key_of_the_chain_verifies_a_rotated_ledger(ledger):
    for key in (ledger["old_key"], ledger["new_key"], ledger["vkey"]):
        assert rust_verdict(ledger["all"], ledger["work"], "--public-key", key) == (0, ""), key
    for key in (ledger["old_key"], ledger["new_key"]):
        assert python_verdict(ledger["all"], bytes.fromhex(key)) == (0, "")
    rust = rust_verdict(ledger["all"], ledger["work"], "--public-key", "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
    assert rust == python_verdict(ledger["all"], bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"))
    assert rust[0] == 1


def test_both_verifiers_refuse_every_doctored_bundle_at_the_same_place(ledger):
    families = Counter()
    disagreements = []
    for source in ("all", "task", "fixture"):
        for family, name, text in doctored(ledger[source]):
            rust = rust_verdict(text, ledger["work"])
            python = python_verdict(text)
            if rust != python:
                disagreements.append(f"{source}/{family}: {name}: verify-bundle {rust}, python {python}")
            elif rust[0] != 1:
                disagreements.append(f"{source}/{family}: {name}: both accepted it")
            families[family] += 1
    assert not disagreements, "\n".join(disagreements)
    assert sum(families.values()) >= 51
    for family in ("bytes", "order", "removal", "duplication", "views", "checkpoints", "signatures",
                   "rotation", "manifest", "blobs", "idempotency", "scope", "cosignatures"):
        assert families[family] > 0, family


def test_proof_files_and_the_server_s_checkpoint_and_tiles(ledger):
    from research_ledger_verify import notes, proof

    data = ledger["work"] / "data"
    proof_file = run("prove", "0", data=data).stdout
    assert proof.verify_proof_file(proof_file, bytes.fromhex(ledger["new_key"]))
    doctored = proof_file.replace('"leaf_index": 0', '"leaf_index": 1')
    with pytest.raises(Invalid):
        proof.verify_proof_file(doctored, bytes.fromhex(ledger["new_key"]))
    server = subprocess.Popen([BIN, "--data-dir", str(data), "serve", "--listen", "127.0.0.1:0"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        url = server.stdout.readline().strip().removeprefix("listening on ")
        vkey = notes.VerifierKey.parse(ledger["vkey"])
        assert "check out" in proof.check_server(url, vkey)
        text = urllib.request.urlopen(url + "/checkpoint").read().decode()
        proof.open_checkpoint(text, vkey)
        with pytest.raises(Invalid):
            proof.open_checkpoint(text.replace("\n", "\n1", 1), vkey)
    finally:
        server.terminate()
        server.wait()
