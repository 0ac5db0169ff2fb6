// One task: its question and rules, the conclusion card with its confidence drawn component
// by component, the history of conclusions and what changed between two, the evidence (full
// texts checked against their content hashes here), the conflicts and their decisions, the
// explanation with every line linked to its event, the why-graph, the timeline with the state
// at any version, and the proof, checked here, that its last event is in the signed tree.
// Updated live from the task's stream of events.

import {download, gql, save} from './api.js';
import {announce, badge, bar, debounce, failure, fill, h, note, num, section, short, table, when} from './dom.js';
import {blake3Hex} from './blake3.js';
import {drawWhyGraph} from './graph.js';
import {proofReport, rotationsOf, trustAnchor} from './ledger.js';
import {CONFLICT_FIELDS, decider, decisionForm, decisionInForce, decisionsList, sides, waitsForPerson} from './review.js';
import {checkCosignature, checkInclusionFile, fingerprint, hexToBytes, walkKeyChain} from './verify.js';

const CARD = `fragment Card on Conclusion {
  conclusionId stance rule confidence components { relevance consistency recency diversity } distinctSources
  evidence { evidenceId contentHash stance source origin } adjudications { conflictId tier winner resolution }
  clientShare stale staleCause { kind subject event { seq version } } supersedes supersededBy current
  issued { seq version hash actor recordedAt }
}`;

const TASK = `query Task($id: ID!) {
  task(id: $id) {
    id sessionVersion question constraints researchDate mode rules status openedAt openedBy summary
    subQuestions { id text }
    pendingActions { tool reason }
    conclusion { ...Card }
    conclusions { ...Card }
    evidence { evidenceId origin source url publishDate publishDateDefaulted sourceType citationCount summary
      contentHash relevance relevanceBasis stance subQuestion status authority reliability recency ageDays
      screeningReason retractionReason added { seq version } statusSetBy { seq version } }
    conflicts { ${CONFLICT_FIELDS} }
    explanation { explanationId conclusionId lines { index parent text cites { seq version hash } } }
  }
}
${CARD}`;

const WHY = `query Why($id: ID!) { task(id: $id) { whyGraph {
  conclusionId asOfVersion root nodes { id label kind cite { seq version hash } actor recordedAt detail } edges { from to kind } } } }`;

const EVENTS = `query Events($id: ID!, $after: String) { task(id: $id) { events(first: 100, after: $after) {
  edges { node { seq streamVersion kind actor recordedAt hash prevHash } } pageInfo { hasNextPage endCursor } } } }`;

const STATE_AT = `query At($id: ID!, $v: Int) { task(id: $id) { state(atVersion: $v) {
  version status summary evidence { evidenceId status stance source } conflicts(currentOnly: true) { conflictId tier winner resolution }
  conclusion { conclusionId stance confidence stale } pendingActions { tool reason } } } }`;

const EVENT = `query Event($seq: Int) { event(seq: $seq) {
  seq taskId streamVersion eventId kind actor recordedAt hash prevHash causation payload payloadError } }`;

const CONTENT = `query Content($id: ID!) { task(id: $id) { evidence { evidenceId contentHash content } } }`;

const PROOF_BASE = `{ ledger { latestCheckpoint { treeSize } keyChain { kind publicKey keyFingerprint origin treeSize root time oldKeyFingerprint signature reason } } }`;

const PROOF = `query Proof($seq: Int!) { inclusionProof(seq: $seq) { file checkpoint { treeSize cosignatures { witness timestamp signature } } } }`;

const isChinese = (text) => /[\u3400-\u9fff]/.test(text || '');

async function allEvents(id) {
  const events = [];
  let after = null;
  for (let page = 0; page < 50; page++) {
    const data = await gql(EVENTS, {id, after});
    const c = data.task.events;
    events.push(...c.edges.map((e) => e.node));
    if (!c.pageInfo.hasNextPage) break;
    after = c.pageInfo.endCursor;
  }
  return events;
}

function header(t) {
  const rules = t.rules || {};
  return h('header', {class: 'task-head'},
    h('h1', {lang: isChinese(t.question) ? 'zh' : null, dataset: {testid: 'question'}}, t.question),
    h('p', {class: 'meta'},
      badge(t.status), ' ', h('span', {dataset: {testid: 'task-status'}, class: 'visually-hidden'}, t.status),
      ` · task `, h('code', {}, t.id), ` · version ${t.sessionVersion} · mode `, badge(t.mode),
      ` · rule set `, h('strong', {}, rules.id || '?'), ` · research date ${t.researchDate} · opened `, when(t.openedAt), ` by ${t.openedBy}`),
    t.constraints.length ? h('div', {}, h('h2', {class: 'small'}, 'Constraints'),
      h('ul', {}, t.constraints.map((c) => h('li', {lang: isChinese(c) ? 'zh' : null}, c)))) : null,
    t.subQuestions.length ? h('div', {}, h('h2', {class: 'small'}, 'Sub-questions'),
      h('ul', {}, t.subQuestions.map((s) => h('li', {lang: isChinese(s.text) ? 'zh' : null}, h('strong', {}, s.id), ` ${s.text}`)))) : null,
    t.pendingActions.length ? note('info', 'Next: ', t.pendingActions.map((a) => `${a.tool} (${a.reason})`).join('; ')) : null);
}

function warningsOf(t, card) {
  const out = [];
  if (card.stale) {
    const cause = card.staleCause;
    out.push(`Stale: ${cause ? `${cause.kind.replace(/_/g, ' ')} on ${cause.subject} (event #${cause.event.seq})` : 'its inputs'} changed after it was issued.`);
  }
  for (const c of t.conflicts.filter((x) => x.current)) {
    if (c.tier === 'PENDING') out.push(`${c.conflictId} waits for a person.`);
    const d = decisionInForce(c);
    if (d && d.decidedBy !== 'person') out.push(`${c.conflictId} was decided by ${d.decidedBy || 'someone not recorded'} ${d.actor}, not by a person.`);
  }
  if (card.clientShare > 0) out.push(`${(card.clientShare * 100).toFixed(0)}% of the items used were added by clients, not returned by sources.`);
  const used = new Set(card.evidence.map((e) => e.evidenceId));
  const defaulted = t.evidence.filter((e) => used.has(e.evidenceId) && e.publishDateDefaulted).map((e) => e.evidenceId);
  if (defaulted.length) out.push(`Publish dates given by default, not by the source: ${defaulted.join(', ')}.`);
  const rule = {
    BELOW_CONFIDENCE_FLOOR: 'The confidence did not reach the floor.',
    NO_SIDE_TAKEN: 'No item used takes a side.',
    PENDING_CONFLICT: 'A conflict awaits a person.',
    TOO_LITTLE_SIDED_EVIDENCE: 'The larger side has too few items or too little relevance.',
    DIVIDED: 'Neither side prevails clearly.',
  }[card.rule];
  if (rule) out.push(rule);
  return out;
}

function conclusionCard(t, card, cite) {
  const w = (t.rules && t.rules.weights) || {};
  const warnings = warningsOf(t, card);
  return h('div', {class: 'card', dataset: {testid: 'conclusion-card'}},
    h('div', {class: 'verdict-box'},
      h('div', {}, h('span', {class: 'label'}, 'Verdict'), h('span', {class: 'verdict', dataset: {testid: 'verdict'}}, badge(card.stance, 'verdict'))),
      h('div', {}, h('span', {class: 'label'}, 'Confidence'),
        h('span', {class: 'confidence', dataset: {testid: 'confidence'}, title: String(card.confidence)}, card.confidence.toFixed(4))),
      h('div', {}, h('span', {class: 'label'}, 'By the clause'), badge(card.rule)),
      h('div', {}, h('span', {class: 'label'}, 'Issued'), `${card.conclusionId} at `, cite(card.issued), ` by ${card.issued.actor}`)),
    h('div', {class: 'bars', 'aria-label': 'The four components of the confidence'},
      ['relevance', 'consistency', 'recency', 'diversity'].map((k) => bar(k, card.components[k], w[k]))),
    warnings.length ? h('div', {class: 'warnings', role: 'note'}, h('h3', {}, 'Warnings'), h('ul', {}, warnings.map((x) => h('li', {}, x)))) : null,
    h('div', {class: 'two'},
      h('div', {}, h('h3', {}, `Evidence used (${card.evidence.length}, ${card.distinctSources} sources)`),
        h('ul', {}, card.evidence.map((e) => h('li', {}, h('strong', {}, e.evidenceId), ' ', badge(e.stance), ` ${e.source} · ${e.origin} · `, short(e.contentHash, 10))))),
      h('div', {}, h('h3', {}, 'Adjudications'),
        card.adjudications.length ? h('ul', {}, card.adjudications.map((a) => h('li', {}, h('strong', {}, a.conflictId), ' ', badge(a.tier, 'tier'),
          a.winner ? [' → ', badge(a.winner)] : a.resolution ? [' → ', badge(a.resolution)] : ' (no winner)'))) : h('p', {class: 'muted'}, 'none'))));
}

/** What changed from conclusion `a` to `b`. */
export function compareConclusions(a, b) {
  const lines = [];
  if (a.stance !== b.stance) lines.push(`verdict ${a.stance.toLowerCase()} → ${b.stance.toLowerCase()}`);
  const dc = b.confidence - a.confidence;
  lines.push(`confidence ${a.confidence.toFixed(4)} → ${b.confidence.toFixed(4)} (${dc >= 0 ? '+' : ''}${dc.toFixed(4)})`);
  for (const k of ['relevance', 'consistency', 'recency', 'diversity']) {
    const d = b.components[k] - a.components[k];
    if (Math.abs(d) > 1e-12) lines.push(`${k} ${a.components[k].toFixed(4)} → ${b.components[k].toFixed(4)} (${d >= 0 ? '+' : ''}${d.toFixed(4)})`);
  }
  const ea = new Map(a.evidence.map((e) => [e.evidenceId, e]));
  const eb = new Map(b.evidence.map((e) => [e.evidenceId, e]));
  for (const [id, e] of eb) if (!ea.has(id)) lines.push(`uses ${id} (${e.stance.toLowerCase()}, ${e.source}) newly`);
  for (const [id, e] of ea) if (!eb.has(id)) lines.push(`no longer uses ${id} (${e.stance.toLowerCase()}, ${e.source})`);
  const adj = (x) => `${x.tier.toLowerCase()}${x.winner ? ` → ${x.winner.toLowerCase()}` : x.resolution ? ` → ${x.resolution.toLowerCase()}` : ''}`;
  const aa = new Map(a.adjudications.map((x) => [x.conflictId, x]));
  const ab = new Map(b.adjudications.map((x) => [x.conflictId, x]));
  for (const [id, x] of ab) {
    if (!aa.has(id)) lines.push(`adjudication ${id} (${adj(x)}) newly in force`);
    else if (adj(aa.get(id)) !== adj(x)) lines.push(`${id}: ${adj(aa.get(id))} → ${adj(x)}`);
  }
  for (const [id] of aa) if (!ab.has(id)) lines.push(`adjudication ${id} no longer in force`);
  return lines;
}

function history(t, cite) {
  if (!t.conclusions.length) return h('p', {class: 'muted'}, 'No conclusion yet.');
  const rows = t.conclusions.map((c) => h('tr', {},
    h('td', {}, c.conclusionId), h('td', {}, badge(c.stance, 'verdict')), h('td', {}, num(c.confidence, 4)),
    h('td', {}, cite(c.issued)), h('td', {}, c.current ? 'current' : c.supersededBy ? `superseded by ${c.supersededBy}` : ''),
    h('td', {}, c.stale ? 'stale' : '')));
  const out = h('div', {'aria-live': 'polite'});
  const pick = (id, label, selected) => [h('label', {for: id}, label), h('select', {id},
    t.conclusions.map((c, i) => h('option', {value: String(i), selected: i === selected}, `${c.conclusionId} (${c.stance.toLowerCase()}, ${c.confidence.toFixed(3)})`)))];
  const n = t.conclusions.length;
  const form = h('form', {class: 'inline', onsubmit: (event) => {
    event.preventDefault();
    const a = t.conclusions[Number(form.querySelector('#cmp-a').value)];
    const b = t.conclusions[Number(form.querySelector('#cmp-b').value)];
    const lines = compareConclusions(a, b);
    fill(out, h('h3', {}, `From ${a.conclusionId} to ${b.conclusionId}`), h('ul', {dataset: {testid: 'conclusion-diff'}}, lines.map((l) => h('li', {}, l))));
  }}, pick('cmp-a', 'From', Math.max(0, n - 2)), pick('cmp-b', 'to', n - 1), h('button', {type: 'submit'}, 'Compare'));
  return [table(['Conclusion', 'Verdict', 'Confidence', 'Issued at', 'Standing', ''], rows), form, out];
}

function evidenceTable(t, cite) {
  let contents = null;
  const loadContents = async () => {
    if (!contents) {
      const data = await gql(CONTENT, {id: t.id});
      contents = new Map(data.task.evidence.map((e) => [e.evidenceId, e]));
    }
    return contents;
  };
  const rows = [];
  for (const e of t.evidence) {
    const textRow = h('tr', {class: 'fulltext', hidden: true}, h('td', {colspan: 10}));
    const button = h('button', {type: 'button', class: 'small', 'aria-expanded': 'false',
      'aria-label': `Full text of ${e.evidenceId}`, onclick: async () => {
        const open = button.getAttribute('aria-expanded') === 'true';
        button.setAttribute('aria-expanded', String(!open));
        textRow.hidden = open;
        if (open) return;
        const cell = textRow.firstChild;
        fill(cell, h('p', {class: 'muted'}, 'Reading…'));
        try {
          const item = (await loadContents()).get(e.evidenceId);
          const computed = blake3Hex(item.content);
          const ok = computed === e.contentHash;
          fill(cell,
            h('p', {class: ok ? 'ok' : 'bad', dataset: {testid: 'content-check', verdict: ok ? 'matches' : 'differs'}},
              ok ? `✓ BLAKE3 of this text, computed here, is the content hash the ledger cites (${e.contentHash.slice(0, 16)}…).`
                : `✗ BLAKE3 of this text is ${computed.slice(0, 16)}…, not the content hash ${e.contentHash.slice(0, 16)}… the ledger cites.`),
            h('div', {class: 'content', lang: isChinese(item.content) ? 'zh' : null}, item.content));
        } catch (error) {
          fill(cell, failure(error));
        }
      }}, 'Full text');
    const statusCell = [badge(e.status, 'status'),
      e.retractionReason ? h('div', {class: 'muted small'}, e.retractionReason) : null,
      e.screeningReason ? h('div', {class: 'muted small', lang: isChinese(e.screeningReason) ? 'zh' : null}, e.screeningReason) : null];
    rows.push(h('tr', {dataset: {evidence: e.evidenceId}},
      h('td', {}, h('strong', {}, e.evidenceId), h('div', {class: 'muted small'}, e.subQuestion || 'main')),
      h('td', {}, statusCell),
      h('td', {class: 'source'}, h('div', {lang: isChinese(e.source) ? 'zh' : null}, e.url ? h('span', {title: e.url}, e.source) : e.source),
        h('div', {class: 'muted small'}, `from ${e.origin}`),
        h('div', {class: 'summary', lang: isChinese(e.summary) ? 'zh' : null, title: e.summary}, e.summary)),
      h('td', {}, badge(e.sourceType)),
      h('td', {}, num(e.authority, 2)),
      h('td', {}, num(e.relevance, 3), h('div', {class: 'muted small'}, e.relevanceBasis.toLowerCase().replace(/_/g, ' '))),
      h('td', {}, num(e.recency, 3), h('div', {class: 'muted small'}, `${e.ageDays} d`)),
      h('td', {}, e.stance ? badge(e.stance) : h('span', {class: 'muted'}, '—')),
      h('td', {}, e.publishDate, e.publishDateDefaulted ? h('span', {class: 'defaulted', title: 'a default date given at ingest, not by the source'}, ' (default)') : null),
      h('td', {}, cite(e.added), h('br'), button)));
    rows.push(textRow);
  }
  return table(['Item', 'Status', 'Source and summary', 'Type', 'Authority', 'Relevance', 'Recency', 'Stance', 'Published', 'Added'], rows);
}

function conflictsPanel(t, cite, refresh) {
  if (!t.conflicts.length) return h('p', {class: 'muted'}, 'No conflict.');
  return t.conflicts.map((c) => {
    const d = decisionInForce(c);
    const open = h('div', {class: 'decide-slot'});
    const canDecide = c.current && !c.dissolved;
    return h('article', {class: `conflict ${c.current ? '' : 'past'}`, dataset: {conflict: c.conflictId}},
      h('h3', {}, `${c.conflictId} · scope ${c.scope || 'main question'} `, badge(c.tier, 'tier'),
        c.current ? null : h('span', {class: 'muted'}, c.supersededBy ? ` superseded by ${c.supersededBy}` : c.dissolved ? ' dissolved' : '')),
      h('p', {}, 'Rules: ', badge(c.automaticTier, 'tier'), c.automaticWinner ? [' → ', badge(c.automaticWinner)] : '',
        ' · in force: ', c.winner ? badge(c.winner) : c.resolution ? badge(c.resolution) : h('span', {class: 'muted'}, 'no winner'),
        d ? [' by ', decider(d)] : null, ' · adjudicated at ', cite(c.adjudicated)),
      h('p', {class: 'muted'}, `authority ${c.compared.supportsAuthority} vs ${c.compared.opposesAuthority} (gap `, num(c.compared.authorityGap, 2),
        `) · latest ${c.compared.supportsLatest} vs ${c.compared.opposesLatest} (${c.compared.recencyGapDays} days)`),
      sides(c),
      decisionsList(c),
      canDecide ? h('button', {type: 'button', class: 'secondary', onclick: (event) => {
        event.currentTarget.remove();
        fill(open, decisionForm(t.id, t.sessionVersion, c, refresh));
      }}, c.automaticTier === 'PENDING' ? (waitsForPerson(c) ? 'Resolve…' : 'Decide again…') : 'Appeal…') : null,
      open);
  });
}

function explanationPanel(t, cite) {
  const e = t.explanation;
  if (!e) return h('p', {class: 'muted'}, 'No explanation recorded yet (explainReasoning records one).');
  const children = new Map();
  for (const line of e.lines) {
    const key = line.parent === null ? -1 : line.parent;
    if (!children.has(key)) children.set(key, []);
    children.get(key).push(line);
  }
  const list = (parent) => {
    const lines = children.get(parent) || [];
    if (!lines.length) return null;
    return h('ul', {}, lines.map((line) => h('li', {},
      h('span', {lang: isChinese(line.text) ? 'zh' : null}, line.text), ' ',
      h('span', {class: 'cites'}, line.cites.map((c) => cite(c))),
      list(line.index))));
  };
  return [h('p', {class: 'muted'}, `${e.explanationId}, of ${e.conclusionId}; every line links to the events it rests on.`), list(-1)];
}

function timeline(t, events, showEvent, travel) {
  const rows = events.map((ev) => h('tr', {dataset: {seq: ev.seq}, id: `ev-${ev.seq}`},
    h('td', {}, String(ev.seq)), h('td', {}, String(ev.streamVersion)), h('td', {}, ev.kind), h('td', {}, ev.actor),
    h('td', {}, when(ev.recordedAt)), h('td', {}, short(ev.hash, 16)),
    h('td', {},
      h('button', {type: 'button', class: 'small', onclick: () => showEvent(ev.seq), 'aria-label': `Event ${ev.seq} whole`}, 'Event'), ' ',
      h('button', {type: 'button', class: 'small', onclick: () => travel(ev.streamVersion), 'aria-label': `State after version ${ev.streamVersion}`}, 'State'))));
  return table(['Seq', 'Version', 'Kind', 'Actor', 'Recorded', 'Hash', ''], rows, `${events.length} events`);
}

function stateView(s) {
  const counts = {};
  for (const e of s.evidence) counts[e.status] = (counts[e.status] || 0) + 1;
  return h('div', {class: 'state-at', dataset: {testid: 'state-at', version: s.version}},
    h('h3', {}, `The task after its first ${s.version} events`),
    h('p', {}, 'Status ', badge(s.status), ' · conclusion ',
      s.conclusion ? [s.conclusion.conclusionId, ' ', badge(s.conclusion.stance, 'verdict'), ` ${s.conclusion.confidence.toFixed(4)}`, s.conclusion.stale ? ' (stale)' : ''] : 'none'),
    h('p', {}, 'Evidence: ', Object.entries(counts).map(([k, n]) => `${n} ${k.toLowerCase()}`).join(', ') || 'none'),
    h('p', {}, 'Conflicts in force: ', s.conflicts.map((c) => `${c.conflictId} ${c.tier.toLowerCase()}${c.winner ? ` → ${c.winner.toLowerCase()}` : c.resolution ? ` → ${c.resolution.toLowerCase()}` : ''}`).join('; ') || 'none'),
    s.pendingActions.length ? h('p', {}, 'Next then: ', s.pendingActions.map((a) => a.tool).join(', ')) : null,
    s.summary ? h('pre', {class: 'summary-text'}, s.summary) : null);
}

async function proveLast(t, events, out) {
  fill(out, h('p', {class: 'muted'}, 'Checking the proof in this browser…'));
  try {
    const base = (await gql(PROOF_BASE)).ledger;
    if (!base.latestCheckpoint) {
      fill(out, note('info', 'The ledger has no signed checkpoint yet: nothing to prove against.'));
      return;
    }
    const size = base.latestCheckpoint.treeSize;
    const last = events[events.length - 1];
    const target = [...events].reverse().find((e) => e.seq < size);
    if (!target) {
      fill(out, note('info', `No event of this task is covered yet by the latest signed checkpoint (${size} events).`));
      return;
    }
    const proof = (await gql(PROOF, {seq: target.seq})).inclusionProof;
    const anchor = trustAnchor(base.keyChain);
    const result = await checkInclusionFile(proof.file, anchor.key, {eventHash: target.hash, seq: target.seq});
    const cosigned = await Promise.all(proof.checkpoint.cosignatures.map((s) => checkCosignature(s, proof.file.checkpoint)));
    const chain = await walkKeyChain(anchor.key, rotationsOf(base.keyChain));
    fill(out,
      target !== last ? note('info', `The task's last event, #${last.seq}, is newer than the latest signed checkpoint (${size} events); the server signs one as the ledger grows. Proved here: its last event the checkpoint covers, #${target.seq}.`) : null,
      proofReport(result, `event #${target.seq} (${target.kind}, the task's ${target === last ? 'last' : 'last checkpointed'} event) is in the tree of ${proof.file.tree_size} events the checkpoint signs`),
      h('p', {class: 'muted'}, `Key trusted: ${anchor.key.slice(0, 16)}… (fingerprint ${fingerprint(hexToBytes(anchor.key))}), ${anchor.source}; ${chain.keys.length} key(s) in its chain.`),
      h('h3', {}, 'Witness cosignatures'),
      cosigned.length ? h('ul', {}, cosigned.map((c) => h('li', {class: c.ok ? 'ok' : 'bad'}, `${c.ok ? '✓' : '✗'} ${c.why}`))) : h('p', {class: 'muted'}, 'None kept of this checkpoint.'),
      h('div', {class: 'actions'},
        h('button', {type: 'button', class: 'secondary', onclick: () => save(JSON.stringify(proof.file, null, 2), `proof-${target.seq}.json`)}, 'Save the proof file')));
  } catch (error) {
    fill(out, failure(error));
  }
}

export async function render(ctx, id) {
  const banner = h('div', {class: 'live-banner', 'aria-live': 'polite', dataset: {testid: 'live-banner'}});
  const body = h('div', {});
  fill(ctx.main, banner, body);
  let version = -1;
  const load = async () => {
    const [data, events] = await Promise.all([gql(TASK, {id}), allEvents(id)]);
    if (!ctx.stillCurrent()) return;
    const t = data.task;
    if (!t) {
      fill(body, h('h1', {}, 'No such task'), note('error', `The ledger has no task ${id}.`));
      return;
    }
    version = t.sessionVersion;
    const scrollY = window.scrollY;
    const eventPanel = h('div', {class: 'event-detail', 'aria-live': 'polite'});
    const statePanel = h('div', {'aria-live': 'polite'});
    const showEvent = async (seq) => {
      const row = body.querySelector(`tr[data-seq="${seq}"]`);
      for (const r of body.querySelectorAll('tr.highlight')) r.classList.remove('highlight');
      if (row) {
        row.classList.add('highlight');
        row.scrollIntoView({block: 'center'});
      }
      try {
        const ev = (await gql(EVENT, {seq})).event;
        fill(eventPanel, h('h3', {}, `Event #${ev.seq}: ${ev.kind}`),
          h('dl', {class: 'facts'},
            h('dt', {}, 'Stream version'), h('dd', {}, String(ev.streamVersion)),
            h('dt', {}, 'Actor'), h('dd', {}, ev.actor), h('dt', {}, 'Recorded'), h('dd', {}, when(ev.recordedAt)),
            h('dt', {}, 'Hash'), h('dd', {}, h('code', {}, ev.hash)), h('dt', {}, 'Links to'), h('dd', {}, h('code', {}, ev.prevHash)),
            h('dt', {}, 'Derived from'), h('dd', {}, ev.causation.length ? ev.causation.map((c) => h('div', {}, short(c, 16))) : 'nothing')),
          h('pre', {class: 'payload'}, ev.payload ? JSON.stringify(ev.payload, null, 2) : ev.payloadError));
      } catch (error) {
        fill(eventPanel, failure(error));
      }
    };
    const cite = (c) => h('a', {href: `#/task/${encodeURIComponent(id)}`, class: 'cite', title: c.hash || '', onclick: (event) => {
      event.preventDefault();
      showEvent(c.seq);
    }}, `#${c.seq}`);
    const versionInput = h('input', {id: 'at-version', type: 'number', min: 0, max: t.sessionVersion, value: t.sessionVersion, required: true});
    const travel = async (v) => {
      versionInput.value = String(v);
      try {
        const s = (await gql(STATE_AT, {id, v})).task.state;
        fill(statePanel, stateView(s));
        statePanel.scrollIntoView({block: 'nearest'});
      } catch (error) {
        fill(statePanel, failure(error));
      }
    };
    const proofOut = h('div', {id: 'proof-out', 'aria-live': 'polite'});
    const why = h('div', {}, h('p', {class: 'muted'}, t.conclusion ? 'Reading the why-graph…' : 'No conclusion yet.'));
    const sections = [
      ['Conclusion', t.conclusion ? conclusionCard(t, t.conclusion, cite) : h('p', {class: 'muted'}, 'No conclusion yet.')],
      ['History of conclusions', history(t, cite)],
      ['Evidence', evidenceTable(t, cite)],
      ['Conflicts', conflictsPanel(t, cite, () => setTimeout(load, 300))],
      ['Explanation', explanationPanel(t, cite)],
      ['Why-graph', why],
      ['Timeline', [timeline(t, events, showEvent, travel), eventPanel,
        h('form', {class: 'inline', onsubmit: (event) => { event.preventDefault(); travel(Number(versionInput.value)); }},
          h('label', {for: 'at-version'}, 'State after version'), versionInput, h('button', {type: 'submit'}, 'Show')), statePanel]],
      ['Verification', [proofOut, h('div', {class: 'actions'},
        h('button', {type: 'button', onclick: () => proveLast(t, events, proofOut)}, 'Check again'),
        h('button', {type: 'button', class: 'secondary', onclick: () => download(`/v1/export?task=${encodeURIComponent(id)}`, `bundle-${id}.json`).catch((e) => fill(proofOut, failure(e)))}, 'Download the task\'s bundle'),
        h('a', {href: '#/ledger', class: 'button secondary'}, 'Check a proof file…'))]],
    ];
    const built = sections.map(([title, content]) => section(title, content));
    const toc = h('nav', {class: 'toc', 'aria-label': 'Sections of the task'}, h('ul', {}, built.map((s, i) => h('li', {},
      h('a', {href: `#/task/${encodeURIComponent(id)}`, onclick: (event) => {
        event.preventDefault();
        s.scrollIntoView();
        s.querySelector('h2').setAttribute('tabindex', '-1');
        s.querySelector('h2').focus();
      }}, sections[i][0])))));
    fill(body, header(t), toc, h('p', {class: 'muted'}, t.summary ? t.summary.split('\n')[1] || '' : ''), built);
    window.scrollTo(0, scrollY);
    proveLast(t, events, proofOut);
    if (t.conclusion) {
      gql(WHY, {id}).then((d) => fill(why, drawWhyGraph(d.task.whyGraph, cite))).catch((e) => fill(why, failure(e)));
    }
  };
  await load();
  const reload = debounce(() => load().catch((e) => fill(banner, failure(e))), 300);
  const stop = ctx.live.subscribe('subscription Ev($id: ID) { events(taskId: $id) { seq kind actor sessionVersion } }', {id}, (d) => {
    const n = d.events;
    if (n.sessionVersion <= version) return;
    fill(banner, note('info', `Live: event #${n.seq} ${n.kind} by ${n.actor}; the task is now at version ${n.sessionVersion}.`));
    announce(`The task changed: ${n.kind}`);
    reload();
  });
  return stop;
}
