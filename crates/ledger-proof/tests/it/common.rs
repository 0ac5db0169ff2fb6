//! What the tests share: a SHA-256 tree hasher for the published RFC 6962 vectors, a
//! naive reference tree computed straight from RFC 9162's recursive definitions, and fixtures.

use std::cell::RefCell;
use std::collections::HashMap;

use ledger_proof::{Digest, MerkleHasher, SigningKey, Timestamp};

/// A second tree hash, BLAKE3 with the RFC 6962 prefixes: the generic tree code is checked with
/// it too, so that nothing in it depends on SHA-256 by accident.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Blake3;

impl MerkleHasher for Blake3 {
    fn empty_root(&self) -> Digest {
        Digest(*blake3::hash(&[]).as_bytes())
    }

    fn leaf(&self, data: &[u8]) -> Digest {
        let mut hasher = blake3::Hasher::new();
        hasher.update(&[0x00]);
        hasher.update(data);
        Digest(*hasher.finalize().as_bytes())
    }

    fn node(&self, left: &Digest, right: &Digest) -> Digest {
        let mut hasher = blake3::Hasher::new();
        hasher.update(&[0x01]);
        hasher.update(left.as_bytes());
        hasher.update(right.as_bytes());
        Digest(*hasher.finalize().as_bytes())
    }
}

/// The largest power of two strictly below `n` (`n >= 2`), as RFC 9162 §2.1.1 defines `k`.
fn split(n: usize) -> usize {
    let mut k = 1;
    while k * 2 < n {
        k *= 2;
    }
    k
}

/// The reference tree: RFC 9162 §2.1.1 `MTH`, §2.1.3.1 `PATH` and §2.1.4.1 `PROOF`, transcribed
/// as recursion over a list of leaf data. Only the memo table makes it fast enough to compare
/// every proof of every tree up to a few hundred leaves; it does not change what is computed.
pub(crate) struct Naive<H> {
    hasher: H,
    leaves: Vec<Vec<u8>>,
    memo: RefCell<HashMap<(usize, usize), Digest>>,
}

impl<H: MerkleHasher> Naive<H> {
    pub(crate) fn new(hasher: H, leaves: Vec<Vec<u8>>) -> Self {
        Self {
            hasher,
            leaves,
            memo: RefCell::new(HashMap::new()),
        }
    }

    /// `MTH(D[lo:hi])`.
    pub(crate) fn mth(&self, lo: usize, hi: usize) -> Digest {
        if let Some(hash) = self.memo.borrow().get(&(lo, hi)) {
            return *hash;
        }
        let hash = match hi - lo {
            0 => self.hasher.empty_root(),
            1 => self.hasher.leaf(&self.leaves[lo]),
            n => {
                let k = split(n);
                self.hasher
                    .node(&self.mth(lo, lo + k), &self.mth(lo + k, hi))
            }
        };
        self.memo.borrow_mut().insert((lo, hi), hash);
        hash
    }

    /// `PATH(m, D[lo:hi])`, with `m` counted from `lo`.
    pub(crate) fn path(&self, m: usize, lo: usize, hi: usize) -> Vec<Digest> {
        let n = hi - lo;
        if n <= 1 {
            return Vec::new();
        }
        let k = split(n);
        if m < k {
            let mut path = self.path(m, lo, lo + k);
            path.push(self.mth(lo + k, hi));
            path
        } else {
            let mut path = self.path(m - k, lo + k, hi);
            path.push(self.mth(lo, lo + k));
            path
        }
    }

    /// `PROOF(m, D[0:n])` for `0 < m <= n`.
    pub(crate) fn proof(&self, m: usize, n: usize) -> Vec<Digest> {
        self.subproof(m, 0, n, true)
    }

    /// `SUBPROOF(m, D[lo:hi], b)`.
    fn subproof(&self, m: usize, lo: usize, hi: usize, b: bool) -> Vec<Digest> {
        let n = hi - lo;
        if m == n {
            return if b {
                Vec::new()
            } else {
                vec![self.mth(lo, hi)]
            };
        }
        let k = split(n);
        if m <= k {
            let mut proof = self.subproof(m, lo, lo + k, b);
            proof.push(self.mth(lo + k, hi));
            proof
        } else {
            let mut proof = self.subproof(m - k, lo + k, hi, false);
            proof.push(self.mth(lo, lo + k));
            proof
        }
    }
}

/// `n` distinct 32-byte leaves shaped like event hashes.
pub(crate) fn event_hashes(n: usize) -> Vec<Digest> {
    (0..n)
        .map(|i| Digest(*blake3::hash(format!("event {i}").as_bytes()).as_bytes()))
        .collect()
}

/// The same as byte strings, for the naive tree.
pub(crate) fn leaf_data(n: usize) -> Vec<Vec<u8>> {
    event_hashes(n).iter().map(|d| d.0.to_vec()).collect()
}

/// A fixed signing key for tests; `seed` tells keys apart.
pub(crate) fn key(seed: u8) -> SigningKey {
    SigningKey::from_secret_bytes(&[seed; 32])
}

/// A time in canonical form.
pub(crate) fn time(text: &str) -> Timestamp {
    Timestamp::parse(text).unwrap()
}

/// `digest` with one bit flipped.
pub(crate) fn flip(digest: &Digest, byte: usize, bit: u8) -> Digest {
    let mut bytes = digest.0;
    bytes[byte] ^= 1 << bit;
    Digest(bytes)
}
