"""The key chain and the standing of checkpoint-log entries (docs/ledger-format.md, "The key
chain", "Recovery statements")."""

from . import notes


class ChainError(Exception):
    pass


def hexbytes(text: str) -> bytes:
    return bytes.fromhex(text)


class KeyChain:
    """Epochs: [key bytes, from (size, time, root) or None, until or None]."""

    def __init__(self, first: bytes):
        self.epochs = [[first, None, None]]

    def fingerprints(self) -> list[str]:
        return [notes.fingerprint(e[0]) for e in self.epochs]

    def rotate(self, r: dict) -> None:
        current = self.epochs[-1]
        if r["old_key_fingerprint"] != notes.fingerprint(current[0]):
            raise ChainError("the rotation hands over from another key than the one in force")
        body = notes.rotation_body(r["origin"], r["tree_size"], hexbytes(r["root"]), r["time"], hexbytes(r["new_public_key"]))
        if not notes.verify_ed25519(current[0], body.encode(), hexbytes(r["signature"])):
            raise ChainError("the rotation is not signed by the key in force")
        start = current[1]
        if start and (r["tree_size"] < start[0] or r["time"] < start[1]):
            raise ChainError("the rotation goes back before the key in force was introduced")
        new = hexbytes(r["new_public_key"])
        if notes.fingerprint(new) in self.fingerprints():
            raise ChainError("the rotation introduces a key the chain already used")
        handover = (r["tree_size"], r["time"], r["root"])
        current[2] = handover
        self.epochs.append([new, handover, None])

    def key_of(self, fp: str):
        for rank, e in enumerate(self.epochs):
            if notes.fingerprint(e[0]) == fp:
                return rank, e[0]
        return None

    def verify_checkpoint(self, c: dict) -> None:
        found = self.key_of(c["key_fingerprint"])
        if found is None:
            raise ChainError(f"the checkpoint names key {c['key_fingerprint']}, which is not in the chain")
        rank, key = found
        body = notes.checkpoint_body(c["origin"], c["tree_size"], hexbytes(c["root"]), c["time"])
        if not notes.verify_ed25519(key, body.encode(), hexbytes(c["signature"])):
            raise ChainError("the checkpoint's signature does not verify")
        _, start, until = self.epochs[rank]
        if start and (c["tree_size"] < start[0] or c["time"] < start[1]):
            raise ChainError("the checkpoint's key was not yet introduced")
        if until and (c["tree_size"] > until[0] or c["time"] > until[1]):
            raise ChainError("the checkpoint's key was retired")
        for e in self.epochs:
            if e[2] and e[2][0] == c["tree_size"] and e[2][2] != c["root"]:
                raise ChainError("another root than the handover's at the same size: a fork")


def signed_size(entry: dict):
    return None if entry["entry"] == "key_introduced" else entry["tree_size"]


def standings(log: list[dict]) -> list[str]:
    """'counts', 'superseded' or 'disowned' for each entry."""
    out = ["counts"] * len(log)
    for j, e in enumerate(log):
        if e["entry"] != "recovery" or e["action"] != "loss_accepted":
            continue
        for i in range(j):
            if out[i] != "counts":
                continue
            if i + 1 in e["disowned_entries"]:
                out[i] = "disowned"
            elif (signed_size(log[i]) or 0) > e["tree_size"]:
                out[i] = "superseded"
    return out


def eras(log: list[dict]) -> list[dict]:
    """The log cut at each key introduced: {entry, first, origin, rotations: [(i, entry)]}."""
    out = []
    for i, e in enumerate(log):
        if e["entry"] == "key_introduced":
            out.append({"entry": i, "first": hexbytes(e["public_key"]), "origin": e["origin"], "rotations": []})
        elif e["entry"] == "rotation" and out:
            out[-1]["rotations"].append((i, e))
    return out
