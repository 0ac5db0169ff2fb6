// What an auditor checks, done in the browser with WebCrypto (SHA-256 and Ed25519) and nothing
// the server computed taken on trust: an RFC 6962 inclusion proof recomputed up to the root of
// a checkpoint, the checkpoint's C2SP signed note checked under a key of the chain of keys,
// that chain walked from the key trusted, and witness cosignatures checked under their keys.
// The formats are those of docs/ledger-format.md.

import {blake3} from './blake3.js';

const encoder = new TextEncoder();

export function hexToBytes(hex) {
  if (typeof hex !== 'string' || hex.length % 2 !== 0 || /[^0-9a-fA-F]/.test(hex)) {
    throw new Error(`not hex: ${String(hex).slice(0, 20)}`);
  }
  return Uint8Array.from({length: hex.length / 2}, (_, i) => parseInt(hex.slice(2 * i, 2 * i + 2), 16));
}

export function bytesToHex(bytes) {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}

export function bytesToBase64(bytes) {
  let text = '';
  for (const b of bytes) text += String.fromCharCode(b);
  return btoa(text);
}

export function base64ToBytes(text) {
  return Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
}

function concat(...parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

function equal(a, b) {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

export async function sha256(bytes) {
  return new Uint8Array(await crypto.subtle.digest('SHA-256', bytes));
}

/** RFC 6962's leaf hash of an event hash: SHA-256(0x00 ‖ hash). */
export function leafHash(eventHash) {
  return sha256(concat(Uint8Array.of(0), eventHash));
}

function nodeHash(left, right) {
  return sha256(concat(Uint8Array.of(1), left, right));
}

/**
 * The root an inclusion path leads to (RFC 9162 §2.1.3.2), or null when the path cannot be
 * one for leaf `index` of a tree of `size` leaves.
 */
export async function rootFromInclusion(index, size, leaf, path) {
  if (!(index >= 0 && index < size)) return null;
  let fn = index;
  let sn = size - 1;
  let r = leaf;
  for (const p of path) {
    if (sn === 0) return null;
    if (fn % 2 === 1 || fn === sn) {
      r = await nodeHash(p, r);
      while (fn % 2 === 0 && fn !== 0) {
        fn = Math.floor(fn / 2);
        sn = Math.floor(sn / 2);
      }
    } else {
      r = await nodeHash(r, p);
    }
    fn = Math.floor(fn / 2);
    sn = Math.floor(sn / 2);
  }
  return sn === 0 ? r : null;
}

/** A key's fingerprint: the first 16 hex digits of BLAKE3 of the 32-byte key. */
export function fingerprint(publicKey) {
  return bytesToHex(blake3(publicKey)).slice(0, 16);
}

/** A C2SP key ID: SHA-256(name ‖ 0x0A ‖ type ‖ key)[:4]. */
export async function keyId(name, type, publicKey) {
  return (await sha256(concat(encoder.encode(name), Uint8Array.of(0x0a, type), publicKey))).slice(0, 4);
}

/** The text a checkpoint's signature covers. */
export function checkpointText(c) {
  return `${c.origin}\n${c.tree_size}\n${bytesToBase64(hexToBytes(c.root))}\ntime ${c.time}\n`;
}

/** The text the old key signs to hand over to a new one. */
export async function rotationText(r) {
  const key = hexToBytes(r.new_public_key);
  const id = bytesToHex(await keyId(r.origin, 0x01, key));
  const vkey = `${r.origin}+${id}+${bytesToBase64(concat(Uint8Array.of(0x01), key))}`;
  return `${checkpointText(r)}rotate-to ${vkey}\n`;
}

/** Whether `signature` (bytes) is `key`'s Ed25519 signature of `message` (text or bytes). */
export async function ed25519Verify(key, message, signature) {
  const imported = await crypto.subtle.importKey('raw', key, {name: 'Ed25519'}, false, ['verify']);
  const bytes = typeof message === 'string' ? encoder.encode(message) : message;
  return crypto.subtle.verify({name: 'Ed25519'}, imported, signature, bytes);
}

/** Parses a C2SP verifier key `name+hex key ID+base64(type ‖ key)`. */
export function parseVerifierKey(text) {
  const first = text.indexOf('+');
  const second = text.indexOf('+', first + 1);
  if (first < 1 || second < 0) throw new Error(`not a verifier key: ${text}`);
  const raw = base64ToBytes(text.slice(second + 1));
  return {name: text.slice(0, first), id: hexToBytes(text.slice(first + 1, second)), type: raw[0], key: raw.slice(1)};
}

/**
 * The chain of keys from `trusted` (hex) through `rotations` (JSON as the checkpoint log and
 * proof files write them), each handover checked under the key in force: the keys with the
 * tree sizes they sign from and to, and a line per rotation saying whether it held.
 */
export async function walkKeyChain(trusted, rotations) {
  const keys = [{key: trusted, fingerprint: fingerprint(hexToBytes(trusted)), from: 0, to: Infinity}];
  const steps = [];
  for (const r of rotations) {
    const current = keys[keys.length - 1];
    if (r.old_key_fingerprint !== current.fingerprint) {
      // A rotation before the trusted key came in is history the reader does not rely on.
      if (keys.length === 1 && !keys.some((k) => k.key === r.new_public_key)) {
        steps.push({rotation: r, ok: null, why: 'before the trusted key'});
        continue;
      }
      steps.push({rotation: r, ok: false, why: `names old key ${r.old_key_fingerprint}, but ${current.fingerprint} is in force`});
      continue;
    }
    const ok = r.tree_size >= current.from &&
      !keys.some((k) => k.key === r.new_public_key) &&
      await ed25519Verify(hexToBytes(current.key), await rotationText(r), hexToBytes(r.signature));
    steps.push({rotation: r, ok, why: ok ? 'signed by the key in force' : 'the old key\'s signature does not verify'});
    if (ok) {
      current.to = r.tree_size;
      keys.push({key: r.new_public_key, fingerprint: fingerprint(hexToBytes(r.new_public_key)), from: r.tree_size, to: Infinity});
    }
  }
  return {keys, steps};
}

/** Checks a checkpoint's signature under the chain: the key it names, in its range. */
export async function checkCheckpoint(checkpoint, chain) {
  const key = chain.keys.find((k) => k.fingerprint === checkpoint.key_fingerprint);
  if (!key) return {ok: false, why: `signed by key ${checkpoint.key_fingerprint}, which is not in the chain of the key trusted`};
  if (checkpoint.tree_size < key.from || checkpoint.tree_size > key.to) {
    return {ok: false, why: `key ${key.fingerprint} signs tree sizes ${key.from} to ${key.to}, not ${checkpoint.tree_size}`};
  }
  const ok = await ed25519Verify(hexToBytes(key.key), checkpointText(checkpoint), hexToBytes(checkpoint.signature));
  return {ok, why: ok ? `Ed25519 signature by key ${key.fingerprint} verifies` : `the Ed25519 signature does not verify under key ${key.fingerprint}`};
}

/** Checks a witness cosignature of a checkpoint: its key ID, then its Ed25519 signature. */
export async function checkCosignature(cosignature, checkpoint) {
  const vkey = parseVerifierKey(cosignature.witness);
  if (vkey.type !== 0x04) return {ok: false, why: 'not a cosigner key (type 0x04)'};
  if (!equal(vkey.id, await keyId(vkey.name, 0x04, vkey.key))) return {ok: false, why: 'the key ID does not match the key'};
  const message = `cosignature/v1\ntime ${cosignature.timestamp}\n${checkpointText(checkpoint)}`;
  const ok = await ed25519Verify(vkey.key, message, hexToBytes(cosignature.signature));
  return {ok, witness: vkey.name, why: ok ? `cosigned by ${vkey.name}` : `the cosignature of ${vkey.name} does not verify`};
}

/**
 * Checks an inclusion proof file (`{"kind":"inclusion", …}`, as `research-ledger prove`
 * writes it) from the key `trusted`: every check with whether it held, and `ok` for all.
 * `expected` may name the event hash and seq the reader expects it to prove.
 */
export async function checkInclusionFile(file, trusted, expected = {}) {
  const checks = [];
  const check = (name, ok, detail) => checks.push({name, ok: Boolean(ok), detail});
  try {
    check('kind', file.kind === 'inclusion', `the file is a proof of kind ${JSON.stringify(file.kind)}`);
    const c = file.checkpoint;
    check('sizes', file.tree_size === c.tree_size, `the proof is for tree size ${file.tree_size}, its checkpoint signs ${c.tree_size}`);
    if (expected.eventHash !== undefined) {
      check('event', file.event_hash === expected.eventHash && file.leaf_index === expected.seq,
        `proves event ${file.leaf_index} with hash ${file.event_hash.slice(0, 12)}…; the task's last event is ${expected.seq}, ${expected.eventHash.slice(0, 12)}…`);
    }
    const leaf = await leafHash(hexToBytes(file.event_hash));
    check('leaf', bytesToHex(leaf) === file.leaf_hash, `SHA-256(0x00 ‖ event hash) = ${bytesToHex(leaf).slice(0, 16)}…`);
    const root = await rootFromInclusion(file.leaf_index, file.tree_size, leaf, file.path.map(hexToBytes));
    const rootHex = root ? bytesToHex(root) : null;
    check('path', rootHex !== null && rootHex === c.root,
      rootHex === null ? 'the path has the wrong length for this leaf and tree size'
        : `the ${file.path.length} hashes of the path lead to root ${rootHex.slice(0, 16)}…; the checkpoint signs ${c.root.slice(0, 16)}…`);
    const chain = await walkKeyChain(trusted, file.key_rotations || []);
    for (const step of chain.steps) {
      if (step.ok !== null) check('rotation', step.ok, `hand-over to ${step.rotation.new_public_key.slice(0, 16)}… at size ${step.rotation.tree_size}: ${step.why}`);
    }
    const signed = await checkCheckpoint(c, chain);
    check('signature', signed.ok, signed.why);
  } catch (e) {
    check('format', false, `the file cannot be read as a proof: ${e.message}`);
  }
  return {ok: checks.length > 0 && checks.every((x) => x.ok), checks};
}
