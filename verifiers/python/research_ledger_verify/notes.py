"""C2SP signed notes, verifier keys, checkpoints, key rotations and witness cosignatures as
docs/ledger-format.md ("Notes, checkpoints and the key chain", "Witnesses") gives them."""

import base64
import binascii
import hashlib

import blake3
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

TYPE_ED25519 = 0x01
TYPE_COSIGNATURE = 0x04
DASH = "\u2014"


class NoteError(Exception):
    pass


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def unb64(text: str) -> bytes:
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as e:
        raise NoteError(f"not base64: {text[:40]!r}") from e
    if b64(raw) != text:
        raise NoteError(f"not canonical base64: {text[:40]!r}")
    return raw


def check_key_name(name: str) -> None:
    if not name or any(c.isspace() or c == "+" or ord(c) < 0x20 for c in name):
        raise NoteError(f"{name!r} is not a key name")


def key_id(name: str, sig_type: int, key: bytes) -> bytes:
    return hashlib.sha256(name.encode() + b"\n" + bytes([sig_type]) + key).digest()[:4]


def fingerprint(key: bytes) -> str:
    return blake3.blake3(key).digest()[:8].hex()


def verify_ed25519(key: bytes, message: bytes, signature: bytes) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(key).verify(signature, message)
        return True
    except (InvalidSignature, ValueError):
        return False


class VerifierKey:
    def __init__(self, name: str, sig_type: int, key: bytes):
        check_key_name(name)
        self.name, self.sig_type, self.key = name, sig_type, key

    @property
    def id(self) -> bytes:
        return key_id(self.name, self.sig_type, self.key)

    def __str__(self) -> str:
        return f"{self.name}+{self.id.hex()}+{b64(bytes([self.sig_type]) + self.key)}"

    def __eq__(self, other) -> bool:
        return isinstance(other, VerifierKey) and str(self) == str(other)

    @staticmethod
    def parse(text: str) -> "VerifierKey":
        parts = text.strip().split("+", 2)
        if len(parts) != 3:
            raise NoteError("a verifier key is name+id+key")
        name, ident, material = parts
        raw = unb64(material)
        if len(raw) != 33 or raw[0] not in (TYPE_ED25519, TYPE_COSIGNATURE):
            raise NoteError("a verifier key holds a type byte and a 32-byte key")
        vkey = VerifierKey(name, raw[0], raw[1:])
        if vkey.id.hex() != ident:
            raise NoteError("the key ID is not the hash of the name and key")
        return vkey


def parse_note(text: str) -> tuple[str, list[tuple[str, bytes, bytes]]]:
    """The note's text and its signature lines (name, key ID, bytes after the ID)."""
    if any(ord(c) < 0x20 and c != "\n" for c in text) or not text.endswith("\n"):
        raise NoteError("not a note")
    split = text.rfind("\n\n")
    if split < 0:
        raise NoteError("no blank line before the signatures")
    body, lines = text[: split + 1], text[split + 2 :]
    sigs = []
    for line in lines.splitlines():
        if not line.startswith(DASH + " "):
            raise NoteError(f"not a signature line: {line[:40]!r}")
        name, _, sig = line[2:].partition(" ")
        check_key_name(name)
        raw = unb64(sig)
        if len(raw) < 5:
            raise NoteError("a signature too short")
        sigs.append((name, raw[:4], raw[4:]))
    if not sigs:
        raise NoteError("no signature lines")
    return body, sigs


def checkpoint_body(origin: str, size: int, root: bytes, time: str) -> str:
    return f"{origin}\n{size}\n{b64(root)}\ntime {time}\n"


def rotation_body(origin: str, size: int, root: bytes, time: str, new_key: bytes) -> str:
    new = VerifierKey(origin, TYPE_ED25519, new_key)
    return checkpoint_body(origin, size, root, time) + f"rotate-to {new}\n"


def cosigned_message(body: str, timestamp: int) -> bytes:
    return f"cosignature/v1\ntime {timestamp}\n{body}".encode()


def recovery_text(r: dict) -> str:
    disowned = ",".join(str(n) for n in r["disowned_entries"])
    return (
        f"research-ledger recovery v1\n{r['action']}\n{r['tree_size']}\n{r['root']}\n{r['time']}\n"
        f"{r['claimed_size']}\n{disowned}\n{r['detail']}\n{r['reason']}\n"
    )


def parse_checkpoint_body(body: str) -> tuple[str, int, bytes, str]:
    lines = body[:-1].split("\n") if body.endswith("\n") else []
    if len(lines) != 4 or not lines[3].startswith("time "):
        raise NoteError("not a checkpoint of four lines")
    origin, size, root, time = lines[0], lines[1], lines[2], lines[3][5:]
    check_key_name(origin)
    if not size.isdigit() or (len(size) > 1 and size[0] == "0"):
        raise NoteError("the size is not decimal")
    raw = unb64(root)
    if len(raw) != 32:
        raise NoteError("the root is not 32 bytes")
    return origin, int(size), raw, time
