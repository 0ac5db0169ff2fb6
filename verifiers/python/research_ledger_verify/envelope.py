"""Stored events (docs/ledger-format.md, "The event"): `body ‖ hash`, the body a postcard
envelope, the hash BLAKE3 over a domain string, the previous hash and the body."""

import datetime
import uuid

import blake3

from .postcard import DecodeError, Reader

DOMAIN = b"research-ledger/event/v1"


def event_hash(prev_hash: bytes, body: bytes) -> bytes:
    return blake3.blake3(DOMAIN + prev_hash + body).digest()


class Event:
    """One decoded stored event."""

    __slots__ = (
        "seq", "stream", "stream_version", "event_id", "kind", "recorded_at", "actor",
        "causation", "payload", "prev_hash", "hash",
    )


def decode_stored(stored: bytes) -> Event:
    """Splits, decodes and checks one stored event: its last 32 bytes must be the hash of the
    rest. Raises DecodeError."""
    if len(stored) < 32:
        raise DecodeError("shorter than a hash")
    body, stated = stored[:-32], stored[-32:]
    r = Reader(body)
    e = Event()
    e.seq = r.varint()
    e.stream = r.string()
    e.stream_version = r.varint()
    e.event_id = r.take(16)
    e.kind = r.string()
    e.recorded_at = r.zigzag()
    e.actor = r.string()
    count = r.varint()
    if count * 32 > r.left():
        raise DecodeError("more causes than bytes")
    e.causation = [r.raw32() for _ in range(count)]
    n = r.varint()
    e.payload = r.take(n)
    e.prev_hash = r.raw32()
    if r.left():
        raise DecodeError(f"{r.left()} bytes after the envelope")
    if event_hash(e.prev_hash, body) != stated:
        raise DecodeError("the stored hash is not the hash of the stored bytes")
    e.hash = stated
    return e


def recorded_at_text(micros: int) -> str:
    """RFC 3339 UTC with exactly six fractional digits and a capital Z."""
    seconds, fraction = divmod(micros, 1_000_000)
    t = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(seconds=seconds)
    return t.strftime("%Y-%m-%dT%H:%M:%S") + f".{fraction:06d}Z"


def view(e: Event, payload: dict) -> dict:
    """The decoded view of an event in a bundle."""
    return {
        "seq": e.seq,
        "stream": e.stream,
        "stream_version": e.stream_version,
        "event_id": str(uuid.UUID(bytes=e.event_id)),
        "kind": e.kind,
        "recorded_at": recorded_at_text(e.recorded_at),
        "actor": e.actor,
        "causation": [c.hex() for c in e.causation],
        "prev_hash": e.prev_hash.hex(),
        "hash": e.hash.hex(),
        "payload": payload,
    }
