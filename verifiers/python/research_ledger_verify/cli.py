"""`research-ledger-verify`: bundle, proof, checkpoint and tiles checks. Exit 0 valid, 1
invalid, 2 unreadable."""

import argparse
import json
import sys

from . import bundle, notes, proof
from .errors import Invalid, Unreadable


def trusted_key(text):
    if text is None:
        return None
    if "+" in text:
        return notes.VerifierKey.parse(text).key
    key = bytes.fromhex(text)
    if len(key) != 32:
        raise ValueError("a public key is 64 hex digits")
    return key


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="research-ledger-verify")
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("bundle", help="check an export bundle")
    b.add_argument("file")
    b.add_argument("--public-key")
    b.add_argument("--witness", action="append", default=[])
    b.add_argument("--json", action="store_true")
    f = sub.add_parser("proof", help="check a proof file")
    f.add_argument("file")
    f.add_argument("--public-key", required=True)
    c = sub.add_parser("checkpoint", help="check a checkpoint note")
    c.add_argument("file")
    c.add_argument("--vkey", required=True)
    c.add_argument("--witness", action="append", default=[])
    t = sub.add_parser("tiles", help="check a server's checkpoint, tiles and entries")
    t.add_argument("url")
    t.add_argument("--vkey", required=True)
    t.add_argument("--witness", action="append", default=[])
    args = p.parse_args(argv)
    try:
        witnesses = [notes.VerifierKey.parse(w) for w in getattr(args, "witness", [])]
        if args.command == "bundle":
            report = bundle.verify(bundle.read(args.file), trusted_key(args.public_key), witnesses)
            print(json.dumps(report) if args.json else f"valid: {report['events']} events in the tree of {report['tree_size']}")
        elif args.command == "proof":
            print("valid:", proof.verify_proof_file(bundle.read(args.file), trusted_key(args.public_key)))
        elif args.command == "checkpoint":
            origin, size, _, time = proof.open_checkpoint(bundle.read(args.file), notes.VerifierKey.parse(args.vkey), witnesses)
            print(f"valid: {origin} signed {size} events at {time}")
        else:
            print("valid:", proof.check_server(args.url.rstrip("/"), notes.VerifierKey.parse(args.vkey), witnesses))
        return 0
    except Invalid as e:
        print(f"INVALID at {e.location}: {e.problem}")
        return 1
    except (Unreadable, notes.NoteError, ValueError, KeyError, OSError) as e:
        print(f"cannot check: {e}", file=sys.stderr)
        return 2
