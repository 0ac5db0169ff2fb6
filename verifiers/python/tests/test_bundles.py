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
                   "rotation", "manifest", "blobs", "idempotency", "scope", "cosignatures", "fields"):
        assert families[family] > 0, family


@pytest.fixture(scope="module")
def keyless(tmp_path_factory):
    """A ledger restored from its backup without its signing key, researched and checkpointed
    further under the key the restore started: its whole-ledger bundle, both keys, and the
    checkpoint log entry (from 1) that introduces the restore's key."""
    work = tmp_path_factory.mktemp("rl-keyless")
    original, restored = work / "original", work / "restored"
    run("demo", "--json", "--question", "lake-varden-blooms", data=original)
    run("export", "--all", "--out", str(work / "backup.json"), data=original)
    run("import", str(work / "backup.json"), data=restored)
    run("demo", "--json", "--question", "four-day-week-eastvale", data=restored)
    run("checkpoint", data=restored)
    run("export", "--all", "--out", str(work / "after.json"), data=restored)
    text = (work / "after.json").read_text()
    introduced = [i for i, e in enumerate(json.loads(text)["checkpoint_log"]) if e["entry"] == "key_introduced"]
    assert len(introduced) == 2
    return {
        "work": work,
        "bundle": text,
        "first_key": run("key", "show", data=original).stdout.splitlines()[0],
        "new_key": run("key", "show", data=restored).stdout.splitlines()[0],
        "break_entry": introduced[1] + 1,
    }


def rust_invalid_line(text: str, work: Path, *flags) -> str:
    path = work / "checked.json"
    path.write_text(text)
    out = run("verify-bundle", str(path), *flags, check=False)
    return next((line for line in out.stdout.splitlines() if line.startswith("INVALID at ")), "")


def python_invalid_line(text: str, trusted=None) -> str:
    try:
        bundle.verify(text, trusted)
        return ""
    except Invalid as e:
        return f"INVALID at {e.location}: {e.problem}"


def test_a_key_an_import_started_without_the_old_key_breaks_the_chain_for_both_verifiers_unless_that_key_is_trusted(keyless):
    from research_ledger_verify import notes

    new_fingerprint = notes.fingerprint(bytes.fromhex(keyless["new_key"]))
    expected = (
        f"INVALID at checkpoint log entry {keyless['break_entry']}: the chain of keys breaks here "
        f"(key {new_fingerprint} is not introduced by the trusted key); verify from that key with --public-key if you trust it"
    )
    for key in (None, keyless["first_key"]):
        flags = ("--public-key", key) if key else ()
        trusted = bytes.fromhex(key) if key else None
        assert rust_invalid_line(keyless["bundle"], keyless["work"], *flags) == expected, key
        assert python_invalid_line(keyless["bundle"], trusted) == expected, key
    assert rust_verdict(keyless["bundle"], keyless["work"], "--public-key", keyless["new_key"]) == (0, "")
    assert python_verdict(keyless["bundle"], bytes.fromhex(keyless["new_key"])) == (0, "")


def forged_onto(text: str, attacker) -> tuple[str, int]:
    """`text` with a key of the attacker's introduced at its end, as if a restore had started
    it, a checkpoint of the same tree signed by it for the bundle to stand on, and the manifest
    signed by it; and the checkpoint log entry (from 1) of the forged key."""
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    from research_ledger_verify import notes

    b = json.loads(text)
    c = dict(b["checkpoint"])
    public = attacker.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    b["checkpoint_log"].append({"entry": "key_introduced", "public_key": public.hex(), "tree_size": c["tree_size"],
                                "time": c["time"], "reason": "restored from a bundle without the previous signing key",
                                "origin": c["origin"]})
    forged_entry = len(b["checkpoint_log"])
    body = notes.checkpoint_body(c["origin"], c["tree_size"], bytes.fromhex(c["root"]), c["time"])
    c["key_fingerprint"] = notes.fingerprint(public)
    c["signature"] = attacker.sign(body.encode()).hex()
    b["checkpoint_log"].append(dict(c, entry="checkpoint"))
    b["checkpoint"] = c
    m = b["manifest"]
    m["checkpoint_log"] = [bundle.log_line(e) for e in b["checkpoint_log"]]
    m["key_fingerprint"] = notes.fingerprint(public)
    m["signature"] = attacker.sign(bundle.manifest_text(m).encode()).hex()
    return json.dumps(b), forged_entry


def test_a_key_and_checkpoint_forged_onto_a_genuine_bundle_are_refused_by_both_at_the_forged_key(ledger):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    attacker = Ed25519PrivateKey.generate()
    text, forged_entry = forged_onto(ledger["all"], attacker)
    for key in (None, ledger["old_key"], ledger["new_key"]):
        flags = ("--public-key", key) if key else ()
        trusted = bytes.fromhex(key) if key else None
        assert rust_verdict(text, ledger["work"], *flags) == (1, f"checkpoint log entry {forged_entry}"), key
        assert python_verdict(text, trusted) == (1, f"checkpoint log entry {forged_entry}"), key
    # Only an auditor who chooses to trust the attacker's key is told the bundle holds.
    public = attacker.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    assert rust_verdict(text, ledger["work"], "--public-key", public.hex()) == (0, "")
    assert python_verdict(text, public) == (0, "")


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


def flip_last_checkpoint_signature(data: Path) -> int:
    """Flips the first hex digit of the last checkpoint's signature in the checkpoint log; the
    entry's number (from 1)."""
    path = data / "ledger" / "checkpoints.jsonl"
    entries = [json.loads(line) for line in path.read_text().splitlines()]
    last = max(i for i, e in enumerate(entries) if e["entry"] == "checkpoint")
    sig = entries[last]["signature"]
    entries[last]["signature"] = ("1" if sig[0] == "0" else "0") + sig[1:]
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return last + 1


@pytest.fixture(scope="module")
def recovered(tmp_path_factory):
    """Two ledgers researched on after a recovery the operator accepted, and their whole-ledger
    bundles: `cut`, whose last segment lost its last bytes (acknowledged events lost), and
    `void`, whose last checkpoint's signature was damaged (the entry declared void)."""
    work = tmp_path_factory.mktemp("rl-recovered")
    out = {"work": work}
    for name in ("cut", "void"):
        data = work / name
        run("demo", "--json", "--question", "lake-varden-blooms", data=data)
        run("checkpoint", data=data)
        if name == "cut":
            last = sorted((data / "ledger" / "log").iterdir())[-1]
            os.truncate(last, last.stat().st_size - 5)
        else:
            out["void_entry"] = flip_last_checkpoint_signature(data)
        assert run("verify", data=data, check=False).returncode != 0, name
        run("repair", "--accept-loss", "--reason", f"the {name} was found by the operator", data=data)
        run("demo", "--json", "--question", "four-day-week-eastvale", data=data)
        run("checkpoint", data=data)
        run("export", "--all", "--out", str(work / f"{name}.json"), data=data)
        out[name] = (work / f"{name}.json").read_text()
    return out


def recovery_entries(text: str) -> list[tuple[int, dict]]:
    return [(i + 1, e) for i, e in enumerate(json.loads(text)["checkpoint_log"]) if e["entry"] == "recovery"]


def test_bundles_past_an_accepted_recovery_verify_for_both(recovered):
    (_, cut), = recovery_entries(recovered["cut"])
    assert cut["action"] == "loss_accepted" and cut["tree_size"] < cut["claimed_size"], cut
    (_, void), = recovery_entries(recovered["void"])
    assert recovered["void_entry"] in void["disowned_entries"], void
    assert void["tree_size"] == void["claimed_size"], "nothing of the log was lost"
    for name in ("cut", "void"):
        assert rust_verdict(recovered[name], recovered["work"]) == (0, ""), name
        assert python_verdict(recovered[name]) == (0, ""), name


def test_a_doctored_recovery_statement_is_refused_by_both_at_the_same_entry(recovered):
    def doctor(text, change):
        b = json.loads(text)
        at = next(i for i, e in enumerate(b["checkpoint_log"]) if e["entry"] == "recovery")
        change(b["checkpoint_log"], at)
        return json.dumps(b), at + 1

    def set_field(field, value):
        def change(log, at):
            log[at][field] = value(log[at][field])
        return change

    changes = {
        "a flipped signature": set_field("signature", lambda s: ("1" if s[0] == "0" else "0") + s[1:]),
        "another reason": set_field("reason", lambda r: r + " (edited)"),
        "a larger size kept": set_field("tree_size", lambda n: n + 1),
        "other entries disowned": set_field("disowned_entries", lambda d: d[1:] if d else [1]),
        "an unknown signer": set_field("key_fingerprint", lambda f: ("1" if f[0] == "0" else "0") + f[1:]),
    }
    disagreements = []
    for name in ("cut", "void"):
        for what, change in changes.items():
            text, _ = doctor(recovered[name], change)
            rust = rust_verdict(text, recovered["work"])
            python = python_verdict(text)
            if rust != python:
                disagreements.append(f"{name}: {what}: verify-bundle {rust}, python {python}")
            elif rust[0] != 1:
                disagreements.append(f"{name}: {what}: both accepted it")
    assert not disagreements, "\n".join(disagreements)
    # Removing the statement leaves the damaged entry, or the checkpoints past the loss,
    # standing against the log: refused by both.
    for name in ("cut", "void"):
        b = json.loads(recovered[name])
        b["checkpoint_log"] = [e for e in b["checkpoint_log"] if e["entry"] != "recovery"]
        text = json.dumps(b)
        rust, python = rust_verdict(text, recovered["work"]), python_verdict(text)
        assert rust == python and rust[0] == 1, f"{name}: verify-bundle {rust}, python {python}"
