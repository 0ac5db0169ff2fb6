// BLAKE3 (the default 32-byte hash), as its specification states it, for checking in the
// browser that a text is the one an event cites by its content hash: WebCrypto has no BLAKE3.
// Written for clarity over speed; evidence texts are small.

const IV = new Uint32Array([
  0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
]);
const PERMUTATION = [2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8];
const CHUNK_START = 1;
const CHUNK_END = 2;
const PARENT = 4;
const ROOT = 8;
const CHUNK_LEN = 1024;
const BLOCK_LEN = 64;

function rotr(x, n) {
  return ((x >>> n) | (x << (32 - n))) >>> 0;
}

function g(s, a, b, c, d, x, y) {
  s[a] = (s[a] + s[b] + x) >>> 0;
  s[d] = rotr(s[d] ^ s[a], 16);
  s[c] = (s[c] + s[d]) >>> 0;
  s[b] = rotr(s[b] ^ s[c], 12);
  s[a] = (s[a] + s[b] + y) >>> 0;
  s[d] = rotr(s[d] ^ s[a], 8);
  s[c] = (s[c] + s[d]) >>> 0;
  s[b] = rotr(s[b] ^ s[c], 7);
}

function round(s, m) {
  g(s, 0, 4, 8, 12, m[0], m[1]);
  g(s, 1, 5, 9, 13, m[2], m[3]);
  g(s, 2, 6, 10, 14, m[4], m[5]);
  g(s, 3, 7, 11, 15, m[6], m[7]);
  g(s, 0, 5, 10, 15, m[8], m[9]);
  g(s, 1, 6, 11, 12, m[10], m[11]);
  g(s, 2, 7, 8, 13, m[12], m[13]);
  g(s, 3, 4, 9, 14, m[14], m[15]);
}

/** The compression function: the first 8 words of its output are the next chaining value. */
function compress(cv, words, counter, blockLen, flags) {
  const s = new Uint32Array(16);
  s.set(cv, 0);
  s.set(IV.subarray(0, 4), 8);
  s[12] = counter % 0x100000000;
  s[13] = Math.floor(counter / 0x100000000);
  s[14] = blockLen;
  s[15] = flags;
  let m = Uint32Array.from(words);
  for (let r = 0; r < 7; r++) {
    round(s, m);
    if (r < 6) m = Uint32Array.from(PERMUTATION, (i) => m[i]);
  }
  for (let i = 0; i < 8; i++) {
    s[i] ^= s[i + 8];
    s[i + 8] ^= cv[i];
  }
  return s;
}

/** A block of up to 64 bytes as 16 little-endian words, zero-padded. */
function blockWords(bytes) {
  const padded = new Uint8Array(BLOCK_LEN);
  padded.set(bytes);
  const view = new DataView(padded.buffer);
  return Uint32Array.from({length: 16}, (_, i) => view.getUint32(4 * i, true));
}

/** What a chunk leaves for its parent or the root: the inputs of its last compression. */
function chunkOutput(chunk, counter) {
  let cv = IV;
  const blocks = Math.max(1, Math.ceil(chunk.length / BLOCK_LEN));
  for (let b = 0; b < blocks - 1; b++) {
    const flags = b === 0 ? CHUNK_START : 0;
    cv = compress(cv, blockWords(chunk.subarray(b * BLOCK_LEN, (b + 1) * BLOCK_LEN)), counter, BLOCK_LEN, flags).subarray(0, 8);
  }
  const last = chunk.subarray((blocks - 1) * BLOCK_LEN);
  return {
    cv,
    words: blockWords(last),
    counter,
    blockLen: last.length,
    flags: (blocks === 1 ? CHUNK_START : 0) | CHUNK_END,
  };
}

function chainingValue(output) {
  return compress(output.cv, output.words, output.counter, output.blockLen, output.flags).subarray(0, 8);
}

function parentOutput(left, right) {
  const words = new Uint32Array(16);
  words.set(left, 0);
  words.set(right, 8);
  return {cv: IV, words, counter: 0, blockLen: BLOCK_LEN, flags: PARENT};
}

/** BLAKE3 of `bytes` (a Uint8Array), 32 bytes. */
export function blake3(bytes) {
  const chunks = Math.max(1, Math.ceil(bytes.length / CHUNK_LEN));
  const stack = [];
  let output = null;
  for (let c = 0; c < chunks; c++) {
    output = chunkOutput(bytes.subarray(c * CHUNK_LEN, (c + 1) * CHUNK_LEN), c);
    if (c === chunks - 1) break;
    // A completed chunk merges with the subtrees it completes: one per trailing zero bit of
    // the number of chunks so far.
    let cv = chainingValue(output);
    let total = c + 1;
    while (total % 2 === 0) {
      cv = chainingValue(parentOutput(stack.pop(), cv));
      total /= 2;
    }
    stack.push(cv);
  }
  while (stack.length) output = parentOutput(stack.pop(), chainingValue(output));
  const root = compress(output.cv, output.words, 0, output.blockLen, output.flags | ROOT);
  const out = new Uint8Array(32);
  const view = new DataView(out.buffer);
  for (let i = 0; i < 8; i++) view.setUint32(4 * i, root[i], true);
  return out;
}

/** BLAKE3 of a text's UTF-8 bytes, as hex. */
export function blake3Hex(text) {
  const bytes = typeof text === 'string' ? new TextEncoder().encode(text) : text;
  return Array.from(blake3(bytes), (b) => b.toString(16).padStart(2, '0')).join('');
}
