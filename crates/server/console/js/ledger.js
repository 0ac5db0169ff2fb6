// The ledger as an auditor checks it from the browser: size, root, checkpoints and the chain
// of keys, every signature checked here with WebCrypto; "verify now", which asks the server
// to verify the chain and the tree from where it last stopped; and a proof file checked here.

import {gql, save} from './api.js';
import {badge, failure, fill, h, note, section, short, table, when} from './dom.js';
import {checkCheckpoint, checkCosignature, checkInclusionFile, walkKeyChain} from './verify.js';

const TRUSTED_KEY = 'research-ledger.trusted-key';

/** The newest checkpoints shown and checked here: a ledger written all day signs one a second. */
const CHECKPOINTS_SHOWN = 20;

const LEDGER = `{
  ledger {
    size headHash root origin publicKey keyFingerprint refusingWrites
    keyChain { kind publicKey keyFingerprint origin treeSize root time oldKeyFingerprint signature reason }
    checkpointCount
    checkpoints(last: ${CHECKPOINTS_SHOWN}) { origin treeSize root time keyFingerprint signature json cosignatures { witness timestamp signature } }
  }
}`;

const VERIFY = `{ verify { intact size headHash root checkedFrom checked checkpointsChecked keyChainBreaks failure { seq problem } } }`;

/** The rotations of the key chain as the checkpoint log and proof files write them. */
export function rotationsOf(keyChain) {
  return keyChain.filter((l) => l.kind === 'ROTATION').map((l) => ({
    origin: l.origin, tree_size: l.treeSize, root: l.root, time: l.time,
    old_key_fingerprint: l.oldKeyFingerprint, new_public_key: l.publicKey, signature: l.signature,
  }));
}

/**
 * The key the reader trusts: one they gave (kept in this tab), or else the first key of the
 * chain the server names — which says that the server is trusted for it.
 */
export function trustAnchor(keyChain) {
  const given = sessionStorage.getItem(TRUSTED_KEY);
  if (given) return {key: given, source: 'given by you'};
  const first = keyChain.filter((l) => l.kind === 'INTRODUCED').pop();
  return first ? {key: first.publicKey, source: 'named by the server (give your own to check it)'} : null;
}

/** The checks of a proof as a list, with the verdict first. */
export function proofReport(result, what) {
  return h('div', {class: `proof ${result.ok ? 'ok' : 'bad'}`, dataset: {testid: 'proof-result', verdict: result.ok ? 'verified' : 'failed'}},
    h('p', {class: 'verdict-line', role: 'status'}, result.ok ? `✓ Verified in this browser: ${what}` : `✗ FAILED: ${what}`),
    h('ul', {class: 'checks'}, result.checks.map((c) => h('li', {class: c.ok ? 'ok' : 'bad'},
      h('span', {class: 'mark', 'aria-label': c.ok ? 'holds' : 'fails'}, c.ok ? '✓' : '✗'), ` ${c.name}: ${c.detail}`))));
}

function checkFilePanel(anchor) {
  const area = h('textarea', {id: 'proof-file', name: 'proof-file', rows: 8, spellcheck: 'false',
    placeholder: '{"kind":"inclusion", …}', 'aria-describedby': 'proof-file-help'});
  const picker = h('input', {id: 'proof-upload', type: 'file', accept: 'application/json,.json'});
  picker.addEventListener('change', async () => {
    if (picker.files[0]) area.value = await picker.files[0].text();
  });
  const out = h('div', {id: 'proof-file-result'});
  const form = h('form', {onsubmit: async (event) => {
    event.preventDefault();
    let file;
    try {
      file = JSON.parse(area.value);
    } catch (e) {
      fill(out, note('error', `not JSON: ${e.message}`));
      return;
    }
    if (!anchor) {
      fill(out, note('error', 'no key to check it with'));
      return;
    }
    const result = await checkInclusionFile(file, anchor.key);
    fill(out, proofReport(result, `event ${file.leaf_index} is in the tree of ${file.tree_size} events the checkpoint signs`));
  }},
  h('label', {for: 'proof-file'}, 'Inclusion proof file (JSON, as research-ledger prove or the task page saves it)'),
  area,
  h('p', {id: 'proof-file-help', class: 'muted'}, 'Checked here: the leaf hash, the RFC 6962 path up to the root, the checkpoint\'s Ed25519 signature and the key hand-overs, from the key trusted.'),
  h('label', {for: 'proof-upload'}, 'or load a file'), picker,
  h('div', {class: 'actions'}, h('button', {type: 'submit', id: 'check-proof'}, 'Check the proof')));
  return section('Check a proof file', form, out);
}

function trustPanel(anchor, rerender) {
  const input = h('input', {id: 'trusted-key', name: 'trusted-key', value: sessionStorage.getItem(TRUSTED_KEY) || '',
    placeholder: '64 hex digits', spellcheck: 'false', 'aria-describedby': 'trusted-key-help'});
  return section('Trusted key',
    h('p', {}, anchor ? ['Checking from key ', short(anchor.key, 16), `, ${anchor.source}.`] : 'The ledger has no key yet.'),
    h('form', {onsubmit: (event) => {
      event.preventDefault();
      const value = input.value.trim().toLowerCase();
      if (value && !/^[0-9a-f]{64}$/.test(value)) {
        input.setAttribute('aria-invalid', 'true');
        return;
      }
      if (value) sessionStorage.setItem(TRUSTED_KEY, value);
      else sessionStorage.removeItem(TRUSTED_KEY);
      rerender();
    }},
    h('label', {for: 'trusted-key'}, 'Public key you trust (hex, from research-ledger key show); empty trusts the server\'s'),
    input,
    h('p', {id: 'trusted-key-help', class: 'muted'}, 'Kept in this tab. Every signature on this page is checked from it.'),
    h('div', {class: 'actions'}, h('button', {type: 'submit'}, 'Use this key'))));
}

export async function render(ctx) {
  const data = await gql(LEDGER);
  if (!ctx.stillCurrent()) return null;
  const l = data.ledger;
  const anchor = trustAnchor(l.keyChain);
  const chain = anchor ? await walkKeyChain(anchor.key, rotationsOf(l.keyChain)) : {keys: [], steps: []};
  const verifyOut = h('div', {id: 'verify-result', 'aria-live': 'polite'});
  const overview = section('Ledger',
    h('dl', {class: 'facts'},
      h('dt', {}, 'Events'), h('dd', {dataset: {testid: 'ledger-size'}}, String(l.size)),
      h('dt', {}, 'Head hash'), h('dd', {}, short(l.headHash, 24)),
      h('dt', {}, 'Merkle root'), h('dd', {}, short(l.root, 24)),
      h('dt', {}, 'Origin'), h('dd', {}, h('code', {}, l.origin)),
      h('dt', {}, 'Signing key'), h('dd', {}, short(l.publicKey, 24), ` (fingerprint ${l.keyFingerprint})`),
      h('dt', {}, 'Writes'), h('dd', {}, l.refusingWrites ? note('error', `refused: ${l.refusingWrites}`) : 'accepted')),
    h('div', {class: 'actions'},
      h('button', {type: 'button', id: 'verify-now', onclick: async () => {
        fill(verifyOut, h('p', {class: 'muted'}, 'Verifying…'));
        try {
          const v = (await gql(VERIFY)).verify;
          const cps = await Promise.all(l.checkpoints.map((c) => checkCheckpoint(c.json, chain)));
          const browserOk = cps.every((c) => c.ok) && chain.steps.every((s) => s.ok !== false);
          fill(verifyOut,
            v.intact ? note('ok', `The server verified the ledger: intact, ${v.size} events (checked ${v.checked} from seq ${v.checkedFrom}), ${v.checkpointsChecked} checkpoints.`)
              : note('error', `The server's verification FAILED at seq ${v.failure ? v.failure.seq : '?'}: ${v.failure ? v.failure.problem : ''}`),
            v.keyChainBreaks.length ? note('error', `Key chain breaks: ${v.keyChainBreaks.join('; ')}`) : null,
            browserOk ? note('ok', `This browser checked the newest ${cps.length} checkpoint signature(s) and ${chain.steps.length} key hand-over(s) from the trusted key: all hold.`)
              : note('error', 'This browser found a checkpoint signature or key hand-over that does not hold (see below).'));
        } catch (error) {
          fill(verifyOut, failure(error));
        }
      }}, 'Verify now'),
      h('button', {type: 'button', class: 'secondary', disabled: !l.checkpoints.length, onclick: () => {
        const latest = l.checkpoints[l.checkpoints.length - 1];
        save(JSON.stringify(latest.json, null, 2), `checkpoint-${latest.treeSize}.json`);
      }}, 'Save the latest checkpoint')),
    verifyOut);

  const chainRows = [];
  let rotation = 0;
  for (const link of l.keyChain) {
    let status;
    if (link.kind === 'INTRODUCED') {
      status = link.publicKey === (anchor && anchor.key) ? 'the key trusted' : `introduced: ${link.reason}`;
    } else {
      const step = chain.steps[rotation++];
      status = step ? `${step.ok === null ? '·' : step.ok ? '✓' : '✗'} ${step.why}` : '';
    }
    chainRows.push(h('tr', {}, h('td', {}, badge(link.kind)), h('td', {}, short(link.publicKey, 16)), h('td', {}, link.keyFingerprint),
      h('td', {}, String(link.treeSize)), h('td', {}, when(link.time)), h('td', {}, status)));
  }
  const cpRows = await Promise.all(l.checkpoints.slice().reverse().map(async (c) => {
    const signed = await checkCheckpoint(c.json, chain);
    const cosigned = await Promise.all(c.cosignatures.map((s) => checkCosignature(s, c.json)));
    return h('tr', {},
      h('td', {}, String(c.treeSize)), h('td', {}, when(c.time)), h('td', {}, short(c.root, 16)), h('td', {}, c.keyFingerprint),
      h('td', {class: signed.ok ? 'ok' : 'bad', title: signed.why}, signed.ok ? '✓ verifies' : `✗ ${signed.why}`),
      h('td', {}, cosigned.length ? cosigned.map((s) => h('div', {class: s.ok ? 'ok' : 'bad'}, `${s.ok ? '✓' : '✗'} ${s.why}`)) : h('span', {class: 'muted'}, 'none')));
  }));
  const rerender = () => render(ctx);
  fill(ctx.main,
    h('h1', {}, 'Ledger and verification'),
    overview,
    trustPanel(anchor, rerender),
    section('Key chain', table(['How', 'Key', 'Fingerprint', 'From size', 'Time', 'Checked here'], chainRows)),
    section('Signed checkpoints', cpRows.length
      ? h('div', {},
        h('p', {class: 'muted', dataset: {testid: 'checkpoints-shown'}},
          `The newest ${cpRows.length} of ${l.checkpointCount}; the export bundle carries them all.`),
        table(['Tree size', 'Time', 'Root', 'Key', 'Signature (checked here)', 'Witness cosignatures (checked here)'], cpRows))
      : h('p', {class: 'muted'}, 'None yet: the server signs one when the ledger has grown.')),
    checkFilePanel(anchor));
  return null;
}
