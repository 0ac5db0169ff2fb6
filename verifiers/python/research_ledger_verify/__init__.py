"""A second verifier of research-ledger's published formats, written from docs/ledger-format.md,
docs/bundle-format.md and docs/event-payloads.md alone.

It checks export bundles completely (stored bytes, hash chain, RFC 6962 inclusion proofs,
checkpoints and key rotations as C2SP signed notes, witness cosignatures, the signed manifest,
payload decoding and the decoded views, content blobs, idempotency entries), proof files, and a
server's checkpoint note and tiles.
"""

from .errors import Invalid, Unreadable

__all__ = ["Invalid", "Unreadable"]
