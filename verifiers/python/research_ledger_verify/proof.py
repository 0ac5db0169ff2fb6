"""Proof files (docs/ledger-format.md, "Proof files") and a server's checkpoint and tiles."""

import json
import urllib.request

from . import chain, merkle, notes
from .errors import Invalid


def chain_from(trusted: bytes, rotations: list) -> chain.KeyChain:
    """The chain from the trusted key through the rotations after the one that introduced it
    (or all of them, when they start from it)."""
    fp = notes.fingerprint(trusted)
    start = 0
    if rotations and rotations[0]["old_key_fingerprint"] != fp:
        introduced = [i for i, r in enumerate(rotations) if bytes.fromhex(r["new_public_key"]) == trusted]
        if introduced:
            start = introduced[0] + 1
        elif not any(r["old_key_fingerprint"] == fp for r in rotations):
            raise Invalid("key rotation", "the statements neither start from nor introduce the trusted key")
    keychain = chain.KeyChain(trusted)
    for r in rotations[start:]:
        try:
            keychain.rotate(r)
        except chain.ChainError as e:
            raise Invalid("key rotation", str(e)) from None
    return keychain


def _checkpoint(keychain, c, where):
    try:
        keychain.verify_checkpoint(c)
    except chain.ChainError as e:
        raise Invalid(where, str(e)) from None


def verify_proof_file(text: str, trusted: bytes) -> str:
    f = json.loads(text)
    keychain = chain_from(trusted, f.get("key_rotations", []))
    if f["kind"] == "inclusion":
        _checkpoint(keychain, f["checkpoint"], "checkpoint")
        if f["tree_size"] != f["checkpoint"]["tree_size"]:
            raise Invalid("proof", "the proof's tree size is not its checkpoint's")
        leaf = merkle.leaf_hash(bytes.fromhex(f["event_hash"]))
        if leaf.hex() != f["leaf_hash"]:
            raise Invalid("proof", "the leaf hash is not the event hash's")
        try:
            merkle.verify_inclusion(f["leaf_index"], f["tree_size"], leaf, [bytes.fromhex(p) for p in f["path"]], bytes.fromhex(f["checkpoint"]["root"]))
        except merkle.ProofError as e:
            raise Invalid("proof", f"inclusion: {e}") from None
        return f"event {f['event_hash']} is seq {f['leaf_index']} of {f['tree_size']} signed events"
    if f["kind"] == "consistency":
        a, b = f["first_checkpoint"], f["second_checkpoint"]
        _checkpoint(keychain, a, "first checkpoint")
        _checkpoint(keychain, b, "second checkpoint")
        if (f["first_size"], f["second_size"]) != (a["tree_size"], b["tree_size"]):
            raise Invalid("proof", "the proof's sizes are not its checkpoints'")
        try:
            merkle.verify_consistency(a["tree_size"], b["tree_size"], bytes.fromhex(a["root"]), bytes.fromhex(b["root"]), [bytes.fromhex(p) for p in f["path"]])
        except merkle.ProofError as e:
            raise Invalid("proof", f"consistency: {e}") from None
        return f"the {a['tree_size']} events are the first of the {b['tree_size']}: the log only grew"
    raise Invalid("proof", f"unknown kind {f['kind']!r}")


def open_checkpoint(note_text: str, vkey: notes.VerifierKey, witnesses=()) -> tuple:
    """A checkpoint note: the log's signature under `vkey` (lines of other keys ignored, a line
    of the key that fails refused), and a valid cosignature by each witness."""
    body, sigs = notes.parse_note(note_text)
    origin, size, root, time = notes.parse_checkpoint_body(body)
    if origin != vkey.name:
        raise Invalid("checkpoint", "the origin is not the key's name")
    mine = [s for s in sigs if s[0] == vkey.name and s[1] == vkey.id]
    if not mine or not all(notes.verify_ed25519(vkey.key, body.encode(), s[2]) for s in mine):
        raise Invalid("checkpoint", "the log's signature does not verify")
    for w in witnesses:
        lines = [s for s in sigs if s[0] == w.name and s[1] == w.id and len(s[2]) == 72]
        good = [s for s in lines if notes.verify_ed25519(w.key, notes.cosigned_message(body, int.from_bytes(s[2][:8], "big")), s[2][8:])]
        if not good:
            raise Invalid("checkpoint", f"no valid cosignature by {w.name}")
    return origin, size, root, time


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.read()


def tile_path(level: int, index: int, width: int) -> str:
    groups = []
    n = index
    while True:
        groups.append(n % 1000)
        n //= 1000
        if n == 0:
            break
    groups.reverse()
    parts = [f"x{g:03d}" for g in groups[:-1]] + [f"{groups[-1]:03d}"]
    path = f"{level}/" + "/".join(parts)
    return path + (f".p/{width}" if width < 256 else "")


def check_server(url: str, vkey: notes.VerifierKey, witnesses=()) -> str:
    """GET /checkpoint, then the level-0 tiles and the entry bundles of the whole tree: every
    leaf hash is the hash of its entry, and they hash to the signed root."""
    _, size, root, _ = open_checkpoint(_get(url + "/checkpoint").decode(), vkey, witnesses)
    leaves = []
    for index in range((size + 255) // 256):
        width = min(256, size - index * 256)
        tile = _get(f"{url}/tile/{tile_path(0, index, width)}")
        entries = _get(f"{url}/tile/entries/{tile_path(0, index, width)[2:]}")
        if len(tile) != 32 * width or len(entries) != 34 * width:
            raise Invalid("tiles", f"tile {index} is not {width} hashes wide")
        for i in range(width):
            entry = entries[34 * i : 34 * i + 34]
            if entry[:2] != b"\x00\x20" or merkle.leaf_hash(entry[2:]) != tile[32 * i : 32 * i + 32]:
                raise Invalid("tiles", f"leaf {index * 256 + i} is not the hash of its entry")
            leaves.append(tile[32 * i : 32 * i + 32])
    if merkle.root_of(leaves) != root:
        raise Invalid("tiles", "the tiles do not hash to the signed root")
    # A tile of level 1 holds the roots of the full tiles below.
    if size >= 256:
        full = size // 256
        upper = _get(f"{url}/tile/{tile_path(1, 0, min(full, 256))}")
        for i in range(min(full, 256)):
            if upper[32 * i : 32 * i + 32] != merkle.root_of(leaves[256 * i : 256 * i + 256]):
                raise Invalid("tiles", f"tile 1/000 hash {i} is not the root of tile 0/{i:03d}")
    return f"checkpoint of {size} events, tiles and entries check out"
