"""The RFC 6962 tree with SHA-256 (docs/ledger-format.md, "The Merkle tree"): leaf and node
hashes, and the RFC 9162 checks of inclusion and consistency proofs."""

import hashlib


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


EMPTY_ROOT = hashlib.sha256(b"").digest()


class ProofError(Exception):
    pass


def root_from_inclusion(index: int, size: int, leaf: bytes, path: list[bytes]) -> bytes:
    """RFC 9162 §2.1.3.2."""
    if index >= size:
        raise ProofError(f"leaf {index} is not in a tree of {size}")
    fn, sn = index, size - 1
    r = leaf
    for p in path:
        if sn == 0:
            raise ProofError("the path is too long")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("the path is too short")
    return r


def verify_inclusion(index: int, size: int, leaf: bytes, path: list[bytes], root: bytes) -> None:
    if root_from_inclusion(index, size, leaf, path) != root:
        raise ProofError("the path does not lead to the root")


def verify_consistency(first: int, second: int, first_root: bytes, second_root: bytes, path: list[bytes]) -> None:
    """RFC 9162 §2.1.4.2."""
    if first > second:
        raise ProofError("the first tree is larger than the second")
    if first == second:
        if path or first_root != second_root:
            raise ProofError("equal sizes need equal roots and no path")
        return
    if first == 0:
        raise ProofError("nothing to prove from the empty tree")
    if not path:
        raise ProofError("an empty path")
    if first & (first - 1) == 0:
        path = [first_root] + path
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError("the path is too long")
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0 or fr != first_root or sr != second_root:
        raise ProofError("the path does not join the two roots")


def root_of(leaves: list[bytes]) -> bytes:
    """MTH over leaf hashes (RFC 9162 §2.1.1)."""
    if not leaves:
        return EMPTY_ROOT
    level = list(leaves)
    while len(level) > 1:
        nxt = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]
