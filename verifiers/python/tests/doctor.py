"""Doctored copies of a bundle, one family of fields at a time: what an auditor who trusts
nothing would try. Each variant is (family, name, text, expected), expected being "valid" or
"invalid"; both verifiers must agree with each other and with it."""

import base64
import copy
import json

import blake3


def _flip_b64(text: str, at: int) -> str:
    raw = bytearray(base64.b64decode(text))
    raw[at % len(raw)] ^= 0x01
    return base64.b64encode(bytes(raw)).decode()


def _flip_hex(text: str, at: int = 0) -> str:
    digits = list(text)
    digits[at] = "0" if digits[at] != "0" else "1"
    return "".join(digits)


def _note(obj) -> None:
    """Adds a field the format does not have to the object `obj`."""
    if not isinstance(obj, dict):
        raise IndexError("no such object in this bundle")  # a whole-ledger bundle's scope
    obj["note"] = "trust me"


def _rehashed(event: dict) -> dict:
    """An event whose stored bytes were altered and whose hash was recomputed to match."""
    raw = bytearray(base64.b64decode(event["stored"]))
    body = raw[:-32]
    body[len(body) // 2] ^= 0x01
    prev = bytes(body[-32:])
    h = blake3.blake3(b"research-ledger/event/v1" + prev + bytes(body)).digest()
    out = dict(event)
    out["stored"] = base64.b64encode(bytes(body) + h).decode()
    out["hash"] = h.hex()
    return out


def variants(bundle: dict):
    """Every doctored copy, as (family, name, mutate) with mutate(bundle) changing it in place."""
    n = len(bundle["events"])
    mid = n // 2
    log = bundle["checkpoint_log"]
    kinds = [e["entry"] for e in log]
    rot = kinds.index("rotation") if "rotation" in kinds else None
    cps = [i for i, k in enumerate(kinds) if k == "checkpoint"]
    cover = next(i for i in cps if {k: v for k, v in log[i].items() if k != "entry"} == bundle["checkpoint"])
    other_cp = next(i for i in cps if i != cover)
    evidence = next(i for i, e in enumerate(bundle["events"]) if e["decoded"]["kind"] == "evidence_added")

    def ev(i, field, value):
        def f(b):
            b["events"][i][field] = value(b["events"][i][field]) if callable(value) else value
        return f

    def pop(path_fn):
        return path_fn

    out = [
        ("bytes", "a flipped byte in the first event", ev(0, "stored", lambda s: _flip_b64(s, 5))),
        ("bytes", "a flipped byte in a middle event", ev(mid, "stored", lambda s: _flip_b64(s, 20))),
        ("bytes", "a flipped byte in the last event", ev(n - 1, "stored", lambda s: _flip_b64(s, 9))),
        ("bytes", "a flipped byte with the hash recomputed", lambda b: b["events"].__setitem__(mid, _rehashed(b["events"][mid]))),
        ("bytes", "a flipped byte in the stored hash", ev(1, "stored", lambda s: _flip_b64(s, -1))),
        ("order", "the first two events swapped", lambda b: b["events"].__setitem__(slice(0, 2), b["events"][1::-1])),
        ("order", "two middle events swapped", lambda b: b["events"].__setitem__(slice(mid, mid + 2), [b["events"][mid + 1], b["events"][mid]])),
        ("order", "the events reversed", lambda b: b["events"].reverse()),
        ("removal", "the first event removed", lambda b: b["events"].pop(0)),
        ("removal", "a middle event removed", lambda b: b["events"].pop(mid)),
        ("removal", "the last event removed", lambda b: b["events"].pop()),
        ("removal", "the last event removed from the events and the manifest", lambda b: (b["events"].pop(), b["manifest"]["events"].pop())),
        ("removal", "a middle event removed from the events and the manifest", lambda b: (b["events"].pop(mid), b["manifest"]["events"].pop(mid))),
        ("duplication", "an event duplicated", lambda b: b["events"].insert(mid, copy.deepcopy(b["events"][mid]))),
        ("duplication", "the last event duplicated at the end", lambda b: b["events"].append(copy.deepcopy(b["events"][-1]))),
        ("views", "the actor of the view", lambda b: b["events"][mid]["decoded"].__setitem__("actor", "mallory")),
        ("views", "the recorded_at of the view", lambda b: b["events"][0]["decoded"].__setitem__("recorded_at", "2020-01-01T00:00:00.000000Z")),
        ("views", "a payload field of the view", lambda b: b["events"][evidence]["decoded"]["payload"].__setitem__("relevance", 0.999)),
        ("views", "a field added to the payload view", lambda b: b["events"][evidence]["decoded"]["payload"].__setitem__("extra", 1)),
        ("views", "the event_id of the view", lambda b: b["events"][0]["decoded"].__setitem__("event_id", "00000000-0000-0000-0000-000000000000")),
        ("views", "the payload's type", lambda b: b["events"][evidence]["decoded"]["payload"].__setitem__("type", "evidence_screened")),
        ("checkpoints", "the root of the bundle's checkpoint", lambda b: b["checkpoint"].__setitem__("root", _flip_hex(b["checkpoint"]["root"]))),
        ("checkpoints", "the size of the bundle's checkpoint", lambda b: b["checkpoint"].__setitem__("tree_size", b["checkpoint"]["tree_size"] + 1)),
        ("checkpoints", "the time of the bundle's checkpoint", lambda b: b["checkpoint"].__setitem__("time", "2030-01-01T00:00:00Z")),
        ("checkpoints", "the origin of the bundle's checkpoint", lambda b: b["checkpoint"].__setitem__("origin", "example.org/other")),
        ("checkpoints", "the signature of the bundle's checkpoint", lambda b: b["checkpoint"].__setitem__("signature", _flip_hex(b["checkpoint"]["signature"]))),
        ("checkpoints", "the signature of an earlier checkpoint in the log", lambda b: b["checkpoint_log"][other_cp].__setitem__("signature", _flip_hex(b["checkpoint_log"][other_cp]["signature"]))),
        ("checkpoints", "the time of an earlier checkpoint in the log", lambda b: b["checkpoint_log"][other_cp].__setitem__("time", "2001-01-01T00:00:00Z")),
        ("checkpoints", "an earlier checkpoint removed from the log", lambda b: b["checkpoint_log"].pop(other_cp)),
        ("checkpoints", "the covering checkpoint removed from the log", lambda b: b["checkpoint_log"].pop(cover)),
        ("checkpoints", "a checkpoint entry duplicated", lambda b: b["checkpoint_log"].insert(other_cp, copy.deepcopy(b["checkpoint_log"][other_cp]))),
        ("signatures", "a byte of the manifest's signature", lambda b: b["manifest"].__setitem__("signature", _flip_hex(b["manifest"]["signature"], 10))),
        ("signatures", "the manifest's key fingerprint", lambda b: b["manifest"].__setitem__("key_fingerprint", _flip_hex(b["manifest"]["key_fingerprint"]))),
        ("signatures", "an inclusion proof hash", lambda b: b["events"][mid]["proof"].__setitem__(0, _flip_hex(b["events"][mid]["proof"][0]))),
        ("signatures", "an inclusion proof cut short", lambda b: b["events"][mid]["proof"].pop()),
        ("manifest", "the manifest's time", lambda b: b["manifest"].__setitem__("created_at", "2030-01-01T00:00:00Z")),
        ("manifest", "the bundle's time", lambda b: b.__setitem__("created_at", "2030-01-01T00:00:00Z")),
        ("manifest", "the manifest's scope", lambda b: b["manifest"].__setitem__("scope", "all+no-content")),
        ("manifest", "a task head's version", lambda b: b["manifest"]["tasks"][0].__setitem__(1, b["manifest"]["tasks"][0][1] + 1)),
        ("manifest", "a task head removed", lambda b: b["manifest"]["tasks"].pop(0)),
        ("manifest", "the manifest's root", lambda b: b["manifest"].__setitem__("root", _flip_hex(b["manifest"]["root"]))),
        ("manifest", "a manifest log line", lambda b: b["manifest"]["checkpoint_log"].__setitem__(0, b["manifest"]["checkpoint_log"][0] + "x")),
        ("blobs", "a blob's bytes", lambda b: b["content"][0].__setitem__("bytes", _flip_b64(b["content"][0]["bytes"], 3))),
        ("blobs", "a blob removed", lambda b: b["content"].pop(0)),
        ("blobs", "a blob removed from the content and the manifest", lambda b: (b["content"].pop(0), b["manifest"]["content"].pop(0))),
        ("blobs", "two blobs swapped", lambda b: b["content"].__setitem__(slice(0, 2), b["content"][1::-1])),
        ("blobs", "a blob's hash", lambda b: b["content"][0].__setitem__("hash", _flip_hex(b["content"][0]["hash"]))),
        ("idempotency", "an entry's stream version", lambda b: b["idempotency"][0].__setitem__("stream_version", b["idempotency"][0]["stream_version"] + 1)),
        ("idempotency", "an entry's fingerprint", lambda b: b["idempotency"][0].__setitem__("fingerprint", _flip_hex(b["idempotency"][0]["fingerprint"]))),
        ("idempotency", "an entry's first seq", lambda b: b["idempotency"][0].__setitem__("first_seq", b["idempotency"][0]["first_seq"] + 1)),
        ("idempotency", "an entry's event count", lambda b: b["idempotency"][0].__setitem__("event_count", b["idempotency"][0]["event_count"] + 1)),
        ("idempotency", "an entry's stream", lambda b: b["idempotency"][0].__setitem__("stream", "another-task")),
        ("idempotency", "an entry's key", lambda b: b["idempotency"][0].__setitem__("key", b["idempotency"][0]["key"] + "x")),
        ("idempotency", "an entry removed", lambda b: b["idempotency"].pop(0)),
        ("scope", "a whole-ledger bundle said to be of one task", lambda b: b.__setitem__("scope", {"tasks": [b["manifest"]["tasks"][0][0]]})),
        ("scope", "content said to be left out", lambda b: b.__setitem__("without_content", True)),
        ("format", "another format name", lambda b: b.__setitem__("format", "research-ledger/bundle/v0")),
        ("format", "an unknown field", lambda b: b.__setitem__("note", "trust me")),
        ("keys", "the first key's reason", lambda b: b["checkpoint_log"][0].__setitem__("reason", "another reason")),
        ("keys", "the first key replaced", lambda b: b["checkpoint_log"][0].__setitem__("public_key", b["checkpoint_log"][rot]["new_public_key"] if rot is not None else "00" * 32)),
        ("keys", "the origin of the first key", lambda b: b["checkpoint_log"][0].__setitem__("origin", "example.org/other")),
        ("fields", "an unknown field in a key introduced", lambda b: _note(b["checkpoint_log"][0])),
        ("fields", "an unknown field in an idempotency entry", lambda b: _note(b["idempotency"][0])),
        ("fields", "an unknown field in a checkpoint of the log", lambda b: _note(b["checkpoint_log"][other_cp])),
        ("fields", "an unknown field in the bundle's checkpoint", lambda b: _note(b["checkpoint"])),
        ("fields", "an unknown field in an event", lambda b: _note(b["events"][mid])),
        ("fields", "an unknown field in a blob", lambda b: _note(b["content"][0])),
        ("fields", "an unknown field in the manifest", lambda b: _note(b["manifest"])),
        ("fields", "an unknown field in a task bundle's scope", lambda b: _note(b["scope"])),
    ]
    cos = kinds.index("cosignature") if "cosignature" in kinds else None
    if cos is not None:
        out += [
            ("cosignatures", "a cosignature's signature", lambda b: b["checkpoint_log"][cos].__setitem__("signature", _flip_hex(b["checkpoint_log"][cos]["signature"], 7))),
            ("cosignatures", "a cosignature's timestamp", lambda b: b["checkpoint_log"][cos].__setitem__("timestamp", b["checkpoint_log"][cos]["timestamp"] + 1)),
            ("cosignatures", "a cosignature of a checkpoint the log does not hold", lambda b: b["checkpoint_log"][cos].__setitem__("tree_size", b["checkpoint_log"][cos]["tree_size"] - 1)),
            ("cosignatures", "a cosignature moved before its checkpoint", lambda b: b["checkpoint_log"].insert(0, b["checkpoint_log"].pop(cos))),
            ("cosignatures", "a cosignature removed", lambda b: b["checkpoint_log"].pop(cos)),
            ("fields", "an unknown field in a cosignature", lambda b: _note(b["checkpoint_log"][cos])),
        ]
    if rot is not None:
        out += [
            ("rotation", "the rotation's new key", lambda b: b["checkpoint_log"][rot].__setitem__("new_public_key", b["checkpoint_log"][0]["public_key"])),
            ("rotation", "the rotation's signature", lambda b: b["checkpoint_log"][rot].__setitem__("signature", _flip_hex(b["checkpoint_log"][rot]["signature"]))),
            ("rotation", "the rotation removed", lambda b: b["checkpoint_log"].pop(rot)),
            ("rotation", "the rotation's root", lambda b: b["checkpoint_log"][rot].__setitem__("root", _flip_hex(b["checkpoint_log"][rot]["root"]))),
            ("fields", "an unknown field in the rotation", lambda b: _note(b["checkpoint_log"][rot])),
        ]
    return out


def doctored(text: str):
    """Yields (family, name, doctored text)."""
    original = json.loads(text)
    for family, name, mutate in variants(original):
        b = copy.deepcopy(original)
        try:
            mutate(b)
        except IndexError:
            continue  # nothing of that family in this bundle (no blobs, no keys)
        if b == original:
            continue  # the bundle already says so (a task bundle without content)
        yield family, name, json.dumps(b)
