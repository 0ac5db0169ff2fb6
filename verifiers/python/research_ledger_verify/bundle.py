"""The check of an export bundle, in the order docs/bundle-format.md gives, reporting the first
problem at the place that page names."""

import base64
import binascii
import json
import re

import blake3

from . import chain, merkle, notes, payloads
from .envelope import decode_stored, view
from .errors import Invalid, Unreadable
from .postcard import DecodeError

FORMAT = "research-ledger/bundle/v1"
HEX64 = re.compile(r"^[0-9a-f]{64}$")
TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")

# Every object's fields: name -> kind of value. No other field is allowed.
ENTRY_FIELDS = {
    "key_introduced": {"public_key": "hex64", "tree_size": "int", "time": "time", "reason": "str", "origin": "str"},
    "checkpoint": {"origin": "str", "tree_size": "int", "root": "hex64", "time": "time", "key_fingerprint": "hex16", "signature": "hex128"},
    "rotation": {"origin": "str", "tree_size": "int", "root": "hex64", "time": "time", "old_key_fingerprint": "hex16", "new_public_key": "hex64", "signature": "hex128"},
    "recovery": {"action": "str", "tree_size": "int", "root": "hex64", "time": "time", "claimed_size": "int", "disowned_entries": "ints", "detail": "str", "reason": "str", "key_fingerprint": "hex16", "signature": "hex128"},
    "cosignature": {"origin": "str", "tree_size": "int", "root": "hex64", "time": "time", "witness": "vkey", "timestamp": "int", "signature": "hex128"},
}
BUNDLE_FIELDS = {"format", "created_at", "scope", "without_content", "checkpoint_log", "checkpoint", "events", "content", "idempotency", "manifest"}
EVENT_FIELDS = {"seq", "hash", "stored", "decoded", "proof"}
IDEMPOTENCY_FIELDS = {"key": "str", "fingerprint": "hex64", "stream": "str", "first_seq": "int", "event_count": "int", "stream_version": "int"}
MANIFEST_FIELDS = {"scope", "created_at", "tree_size", "root", "events", "tasks", "content", "idempotency", "checkpoint_log", "key_fingerprint", "signature"}


def _shape(ok: bool, what: str) -> None:
    if not ok:
        raise Invalid("the bundle", f"not a bundle: {what}")


def _value(kind: str, v, what: str) -> None:
    if kind == "int":
        _shape(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 64, what)
    elif kind == "ints":
        _shape(isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v), what)
    elif kind == "str":
        _shape(isinstance(v, str), what)
    elif kind == "time":
        _shape(isinstance(v, str) and bool(TIME.match(v)), what)
    elif kind.startswith("hex"):
        n = int(kind[3:])
        _shape(isinstance(v, str) and len(v) == n and bool(re.match(r"^[0-9a-f]*$", v)), what)
    elif kind == "vkey":
        _shape(isinstance(v, str), what)
        try:
            notes.VerifierKey.parse(v)
        except notes.NoteError as e:
            raise Invalid("the bundle", f"not a bundle: {what}: {e}") from e


def _fields(obj, spec: dict, what: str) -> None:
    _shape(isinstance(obj, dict) and set(obj) == set(spec), f"{what} has other fields than {sorted(spec)}")
    for name, kind in spec.items():
        _value(kind, obj[name], f"{what}.{name}")


def _b64(text, what) -> bytes:
    _shape(isinstance(text, str), what)
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise Invalid("the bundle", f"not a bundle: {what} is not base64") from None


def read_shape(b) -> None:
    """Every field there, of its type, and none other: what the Rust reader's strict parse
    refuses is reported at `the bundle`."""
    _shape(isinstance(b, dict) and set(b) == BUNDLE_FIELDS, "the top-level fields")
    _value("str", b["format"], "format")
    _value("time", b["created_at"], "created_at")
    s = b["scope"]
    _shape(s == "all" or (isinstance(s, dict) and set(s) == {"tasks"} and isinstance(s["tasks"], list) and all(isinstance(t, str) for t in s["tasks"])), "scope")
    _shape(isinstance(b["without_content"], bool), "without_content")
    _shape(isinstance(b["checkpoint_log"], list), "checkpoint_log")
    for i, e in enumerate(b["checkpoint_log"]):
        _shape(isinstance(e, dict) and e.get("entry") in ENTRY_FIELDS, f"checkpoint_log[{i}]")
        _fields({k: v for k, v in e.items() if k != "entry"}, ENTRY_FIELDS[e["entry"]], f"checkpoint_log[{i}]")
    _fields(b["checkpoint"], ENTRY_FIELDS["checkpoint"], "checkpoint")
    _shape(isinstance(b["events"], list), "events")
    for i, e in enumerate(b["events"]):
        _shape(isinstance(e, dict) and set(e) == EVENT_FIELDS, f"events[{i}]")
        _value("int", e["seq"], f"events[{i}].seq")
        _value("hex64", e["hash"], f"events[{i}].hash")
        _b64(e["stored"], f"events[{i}].stored")
        _shape(isinstance(e["proof"], list), f"events[{i}].proof")
        for p in e["proof"]:
            _value("hex64", p, f"events[{i}].proof")
    _shape(isinstance(b["content"], list), "content")
    for i, c in enumerate(b["content"]):
        _shape(isinstance(c, dict) and set(c) == {"hash", "bytes"}, f"content[{i}]")
        _value("hex64", c["hash"], f"content[{i}].hash")
        _b64(c["bytes"], f"content[{i}].bytes")
    _shape(isinstance(b["idempotency"], list), "idempotency")
    for i, r in enumerate(b["idempotency"]):
        _fields(r, IDEMPOTENCY_FIELDS, f"idempotency[{i}]")
        _shape(r["event_count"] < 1 << 32, f"idempotency[{i}].event_count")
    m = b["manifest"]
    _shape(isinstance(m, dict) and set(m) == MANIFEST_FIELDS, "manifest")
    for name, kind in [("scope", "str"), ("created_at", "time"), ("tree_size", "int"), ("root", "hex64"), ("key_fingerprint", "hex16"), ("signature", "hex128")]:
        _value(kind, m[name], f"manifest.{name}")
    _shape(isinstance(m["events"], list) and all(isinstance(x, list) and len(x) == 2 for x in m["events"]), "manifest.events")
    for seq, h in m["events"]:
        _value("int", seq, "manifest.events")
        _value("hex64", h, "manifest.events")
    _shape(isinstance(m["tasks"], list) and all(isinstance(x, list) and len(x) == 3 for x in m["tasks"]), "manifest.tasks")
    for t, v, h in m["tasks"]:
        _value("str", t, "manifest.tasks")
        _value("int", v, "manifest.tasks")
        _value("hex64", h, "manifest.tasks")
    _shape(isinstance(m["content"], list), "manifest.content")
    for h in m["content"]:
        _value("hex64", h, "manifest.content")
    _shape(isinstance(m["idempotency"], list) and all(isinstance(x, list) and len(x) == 6 for x in m["idempotency"]), "manifest.idempotency")
    for k, f, s_, first, n, v in m["idempotency"]:
        for kind, x in [("hex64", k), ("hex64", f), ("str", s_), ("int", first), ("int", n), ("int", v)]:
            _value(kind, x, "manifest.idempotency")
    _shape(isinstance(m["checkpoint_log"], list) and all(isinstance(x, str) for x in m["checkpoint_log"]), "manifest.checkpoint_log")


def scope_text(b) -> str:
    base = "all" if b["scope"] == "all" else "tasks:" + ",".join(b["scope"]["tasks"])
    return base + "+no-content" if b["without_content"] else base


def log_line(e: dict) -> str:
    k = e["entry"]
    if k == "key_introduced":
        return f"key_introduced {e['tree_size']} {e['time']} {e['public_key']} {e['origin']} {e['reason']}"
    if k == "cosignature":
        return f"cosignature {e['tree_size']} {e['witness']} {e['timestamp']} {e['signature']}"
    return f"{k} {e['tree_size']} {e['signature']}"


def idempotency_line(r: dict) -> list:
    return [blake3.blake3(r["key"].encode()).hexdigest(), r["fingerprint"], r["stream"], r["first_seq"], r["event_count"], r["stream_version"]]


def _writable(text: str) -> bool:
    return bool(text) and not any(c.isspace() or ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in text)


def manifest_text(m: dict):
    """The text the manifest's signature covers, or None when it could not be written."""
    lines = ["research-ledger bundle manifest v1", f"scope {m['scope']}", f"created_at {m['created_at']}", f"checkpoint {m['tree_size']} {m['root']}"]
    if not _writable(m["scope"]):
        return None
    lines += [f"event {s} {h}" for s, h in m["events"]]
    for t, v, h in m["tasks"]:
        if not _writable(t):
            return None
        lines.append(f"task {t} {v} {h}")
    lines += [f"content {h}" for h in m["content"]]
    for k, f, s, first, n, v in m["idempotency"]:
        if not _writable(s):
            return None
        lines.append(f"idempotency {k} {f} {s} {first} {n} {v}")
    for line in m["checkpoint_log"]:
        if not line or any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in line):
            return None
        lines.append(f"log {line}")
    return "".join(line + "\n" for line in lines)


class Trust:
    def __init__(self, keychain, trusted, from_bundle, era_start, rank, breaks, origin):
        self.chain, self.trusted, self.from_bundle = keychain, trusted, from_bundle
        self.era_start, self.rank, self.breaks, self.origin = era_start, rank, breaks, origin

    def signer(self, fp: str, where: str) -> bytes:
        found = self.chain.key_of(fp)
        if found is None:
            raise Invalid(where, f"signed by key {fp}, which is not in the chain")
        rank, key = found
        if rank < self.rank:
            raise Invalid(where, f"signed by key {fp}, which the trusted key replaced")
        return key


def key_chain(log: list, trusted) -> Trust:
    if not log or log[0]["entry"] != "key_introduced":
        raise Invalid("checkpoint log entry 1", "the log does not start with a signing key")
    eras = chain.eras(log)
    breaks = [f"checkpoint log entry {e['entry'] + 1}: key {notes.fingerprint(e['first'])} starts a new chain" for e in eras[1:]]
    from_bundle = trusted is None
    if trusted is None:
        trusted = eras[0]["first"]

    def holds(era):
        return era["first"] == trusted or any(bytes.fromhex(r["new_public_key"]) == trusted for _, r in era["rotations"])

    at = max((i for i, era in enumerate(eras) if holds(era)), default=None)
    if at is None:
        raise Invalid("checkpoint log", f"the trusted key {notes.fingerprint(trusted)} is not in the bundle's chain of keys")
    if at + 1 < len(eras):
        nxt = eras[at + 1]
        raise Invalid(
            f"checkpoint log entry {nxt['entry'] + 1}",
            f"the chain of keys breaks here (key {notes.fingerprint(nxt['first'])} is not introduced by the trusted key); "
            "verify from that key with --public-key if you trust it",
        )
    era = eras[at]
    keychain = chain.KeyChain(era["first"])
    for i, r in era["rotations"]:
        try:
            keychain.rotate(r)
        except chain.ChainError as e:
            raise Invalid(f"checkpoint log entry {i + 1}", str(e)) from None
    rank = next(i for i, e in enumerate(keychain.epochs) if e[0] == trusted)
    return Trust(keychain, trusted, from_bundle, era["entry"], rank, breaks, eras[-1]["origin"])


def check_checkpoint_log(b, trust: Trust) -> int:
    log = b["checkpoint_log"]
    standing = chain.standings(log)
    previous = None
    listed = False
    bodies = set()
    count = 0
    target = dict(b["checkpoint"], entry="checkpoint")
    for i in range(trust.era_start, len(log)):
        e = log[i]
        at = f"checkpoint log entry {i + 1}"
        if standing[i] == "disowned":
            continue
        if e["entry"] == "recovery":
            found = trust.chain.key_of(e["key_fingerprint"])
            if found is None:
                raise Invalid(at, "a recovery statement signed by a key not in the chain")
            if not notes.verify_ed25519(found[1], notes.recovery_text(e).encode(), bytes.fromhex(e["signature"])):
                raise Invalid(at, "the recovery statement's signature does not verify")
            if e["action"] == "loss_accepted":
                previous = None
        elif e["entry"] == "checkpoint":
            try:
                trust.chain.verify_checkpoint(e)
            except chain.ChainError as err:
                raise Invalid(at, str(err)) from None
            if e["origin"] != trust.origin:
                raise Invalid(at, "the checkpoint names another origin than the log's")
            if previous and (e["tree_size"] < previous["tree_size"] or e["time"] < previous["time"]):
                raise Invalid(at, "a checkpoint older than the one before it")
            if e == target:
                if standing[i] != "counts":
                    raise Invalid(at, "the bundle stands on a checkpoint of history given up")
                trust.signer(e["key_fingerprint"], "checkpoint")
                listed = True
            bodies.add(notes.checkpoint_body(e["origin"], e["tree_size"], bytes.fromhex(e["root"]), e["time"]))
            previous = e
            count += 1
        elif e["entry"] == "cosignature":
            body = notes.checkpoint_body(e["origin"], e["tree_size"], bytes.fromhex(e["root"]), e["time"])
            if not cosignature_ok(e, body):
                raise Invalid(at, "the cosignature does not verify")
            if body not in bodies:
                raise Invalid(at, "a cosignature of a checkpoint the log does not hold before it")
    if not listed:
        raise Invalid("checkpoint", "the checkpoint the bundle stands on is not in its checkpoint log")
    return count


def cosignature_ok(e: dict, body: str) -> bool:
    w = notes.VerifierKey.parse(e["witness"])
    if w.sig_type != notes.TYPE_COSIGNATURE:
        return False
    return notes.verify_ed25519(w.key, notes.cosigned_message(body, e["timestamp"]), bytes.fromhex(e["signature"]))


def check_manifest(b, trust: Trust) -> None:
    m = b["manifest"]
    key = trust.signer(m["key_fingerprint"], "manifest")
    text = manifest_text(m)
    if text is None:
        raise Invalid("manifest", "it holds text that cannot be signed")
    if not notes.verify_ed25519(key, text.encode(), bytes.fromhex(m["signature"])):
        raise Invalid("manifest", "the manifest's signature does not match its contents")
    if m["tree_size"] != b["checkpoint"]["tree_size"] or m["root"] != b["checkpoint"]["root"]:
        raise Invalid("manifest", "it names another checkpoint than the one the bundle stands on")
    if m["scope"] != scope_text(b):
        raise Invalid("manifest", "its scope is not the bundle's")
    if m["created_at"] != b["created_at"]:
        raise Invalid("manifest", "its time is not the bundle's")
    lines = [log_line(e) for e in b["checkpoint_log"]]
    for i in range(max(len(lines), len(m["checkpoint_log"]))):
        if (lines[i] if i < len(lines) else None) != (m["checkpoint_log"][i] if i < len(m["checkpoint_log"]) else None):
            raise Invalid(f"checkpoint log entry {i + 1}", "the checkpoint log is not the one the manifest lists")


def check_event_list(b) -> None:
    listed = b["manifest"]["events"]
    events = b["events"]
    for i, (seq, h) in enumerate(listed):
        if i >= len(events):
            raise Invalid(f"event #{i}", "an event the manifest lists was removed")
        if [events[i]["seq"], events[i]["hash"]] != [seq, h]:
            raise Invalid(f"event #{i}", "not the event the manifest lists here")
    if len(events) > len(listed):
        raise Invalid(f"event #{len(listed)} (seq {events[len(listed)]['seq']})", "an event the manifest does not list")


def check_events(b) -> list:
    size = b["checkpoint"]["tree_size"]
    root = bytes.fromhex(b["checkpoint"]["root"])
    out = []
    last = None
    for i, e in enumerate(b["events"]):
        at = f"event #{i} (seq {e['seq']})"
        try:
            event = decode_stored(base64.b64decode(e["stored"]))
        except DecodeError as err:
            raise Invalid(at, f"the stored bytes do not check out: {err}") from None
        if event.hash.hex() != e["hash"] or event.seq != e["seq"]:
            raise Invalid(at, "the stored bytes are another event than the one listed")
        if last is not None and last >= e["seq"]:
            raise Invalid(at, "events are not in increasing seq order")
        last = e["seq"]
        if e["seq"] >= size:
            raise Invalid(at, "beyond the checkpoint's size")
        try:
            merkle.verify_inclusion(e["seq"], size, merkle.leaf_hash(event.hash), [bytes.fromhex(p) for p in e["proof"]], root)
        except merkle.ProofError as err:
            raise Invalid(at, f"not in the signed tree: {err}") from None
        try:
            payload = payloads.decode(event.kind, event.payload)
        except DecodeError as err:
            raise Invalid(at, f"the payload does not decode: {err}") from None
        if view(event, payload) != e["decoded"]:
            raise Invalid(at, "the decoded view does not match the stored bytes")
        out.append((event, payload))
    return out


def check_whole_chain(b, decoded) -> None:
    size = b["checkpoint"]["tree_size"]
    if len(b["events"]) != size:
        raise Invalid("events", f"a whole-ledger bundle of {size} events holds {len(b['events'])}")
    prev = bytes(32)
    for i, (event, _) in enumerate(decoded):
        if event.seq != i or event.prev_hash != prev:
            raise Invalid(f"event #{i} (seq {event.seq})", "does not link to the event before it")
        prev = event.hash


def check_tasks(b, decoded) -> None:
    versions = {}
    for i, (event, _) in enumerate(decoded):
        v, _h = versions.get(event.stream, (0, None))
        if event.stream_version != v + 1:
            raise Invalid(f"event #{i} (seq {event.seq})", "an event of the task is missing")
        versions[event.stream] = (event.stream_version, event.hash.hex())
    listed = {t: (v, h) for t, v, h in b["manifest"]["tasks"]}
    # The order tasks are met in does not matter: the first wrong one by the Rust reader's
    # order is a hash map's, so any of them may be named. Report them sorted.
    for task in sorted(versions):
        if task not in listed:
            raise Invalid(f"task {task}", "not listed in the manifest")
        if listed[task] != versions[task]:
            raise Invalid(f"task {task}", "the manifest names another head")
    for task in sorted(listed):
        if task not in versions:
            raise Invalid(f"task {task}", "listed in the manifest but holds no event")
    if b["scope"] != "all" and set(b["scope"]["tasks"]) != set(versions):
        raise Invalid("scope", "the tasks held are not the tasks the bundle says it holds")


def check_content(b, decoded) -> None:
    hashes = [c["hash"] for c in b["content"]]
    if hashes != b["manifest"]["content"]:
        raise Invalid("content", "the blobs held are not the blobs the manifest lists")
    for i, c in enumerate(b["content"]):
        if blake3.blake3(base64.b64decode(c["bytes"])).hexdigest() != c["hash"]:
            raise Invalid(f"content #{i} ({c['hash']})", "the bytes do not have this hash")
    if not b["without_content"]:
        held = set(hashes)
        for i, (event, payload) in enumerate(decoded):
            for cited in payloads.cited_content(event.kind, payload):
                if cited not in held:
                    raise Invalid(f"event #{i} (seq {event.seq})", f"cites content {cited}, which the bundle does not hold")


def check_idempotency(b, decoded) -> None:
    lines = [idempotency_line(r) for r in b["idempotency"]]
    if lines != b["manifest"]["idempotency"]:
        raise Invalid("idempotency", "the keys held are not the keys the manifest lists")
    size = b["checkpoint"]["tree_size"]
    for i, r in enumerate(b["idempotency"]):
        first, count = r["first_seq"], r["event_count"]
        commit = [ev for ev, _ in decoded if first <= ev.seq < first + count]
        inside = all(ev.stream == r["stream"] for ev in commit)
        whole = b["scope"] != "all" or len(commit) == count
        version = not commit or commit[-1].stream_version == r["stream_version"]
        if count == 0 or first + count > size or not inside or not whole or not version:
            raise Invalid(f"idempotency #{i}", "the key names seqs that are not one commit of its stream")


def check_witnesses(b, witnesses) -> list:
    out = []
    cp = b["checkpoint"]
    body = notes.checkpoint_body(cp["origin"], cp["tree_size"], bytes.fromhex(cp["root"]), cp["time"])
    for w in witnesses:
        ok = any(
            e["entry"] == "cosignature"
            and notes.VerifierKey.parse(e["witness"]) == w
            and [e["origin"], e["tree_size"], e["root"], e["time"]] == [cp["origin"], cp["tree_size"], cp["root"], cp["time"]]
            and cosignature_ok(e, body)
            for e in b["checkpoint_log"]
        )
        if not ok:
            raise Invalid("checkpoint", f"no valid cosignature by witness {w.name} of the checkpoint the bundle stands on")
        out.append(str(w))
    return out


def verify(text: str, trusted: bytes | None = None, witnesses=()) -> dict:
    """Checks a bundle's text; returns a report, or raises Invalid at the first problem."""
    try:
        b = json.loads(text)
    except ValueError as e:
        raise Invalid("the bundle", f"not JSON: {e}") from None
    read_shape(b)
    if b["format"] != FORMAT:
        raise Invalid("the bundle", f"format {b['format']!r} is not {FORMAT}")
    trust = key_chain(b["checkpoint_log"], trusted)
    checkpoints = check_checkpoint_log(b, trust)
    check_manifest(b, trust)
    check_event_list(b)
    decoded = check_events(b)
    if b["scope"] == "all":
        check_whole_chain(b, decoded)
    check_tasks(b, decoded)
    check_content(b, decoded)
    check_idempotency(b, decoded)
    seen = check_witnesses(b, witnesses)
    return {
        "trusted_key": trust.trusted.hex(),
        "trusted_key_from_bundle": trust.from_bundle,
        "tree_size": b["checkpoint"]["tree_size"],
        "events": len(b["events"]),
        "checkpoints": checkpoints,
        "witnesses": seen,
        "key_chain_breaks": trust.breaks,
    }


def read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise Unreadable(str(e)) from e
