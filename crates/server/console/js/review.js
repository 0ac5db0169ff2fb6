// The review queue: the conflicts in force that wait for a person — those the rules left
// pending, and those only an assistant decided — with both sides, every decision so far (who,
// and whether a person or an assistant), and the form to resolve or appeal with a reason.

import {gql, idempotencyKey} from './api.js';
import {announce, badge, failure, fill, h, note, num, when} from './dom.js';

export const CONFLICT_FIELDS = `
  conflictId scope tier automaticTier winner resolution automaticWinner current dissolved supersededBy
  compared { supportsAuthority opposesAuthority authorityGap supportsLatest opposesLatest recencyGapDays }
  participants { evidenceId side source publishDate authority }
  divergence { scopeText supports { evidenceId source sourceType publishDate authority summary }
    opposes { evidenceId source sourceType publishDate authority summary } }
  humanDecisions { kind outcome reason actor decidedBy decidedVia superseded decided { seq version recordedAt } }
  adjudicated { seq version }`;

const QUEUE = `query Queue($after: String) {
  tasks(first: 25, after: $after) {
    edges { node { id question sessionVersion status subQuestions { id text }
      conflicts(currentOnly: true) { ${CONFLICT_FIELDS} } } }
    pageInfo { hasNextPage endCursor }
  }
}`;

/** The decision in force on a conflict: the last that was not superseded. */
export function decisionInForce(conflict) {
  const live = conflict.humanDecisions.filter((d) => !d.superseded);
  return live.length ? live[live.length - 1] : null;
}

/** Whether a conflict in force waits for a person. */
export function waitsForPerson(conflict) {
  if (conflict.tier === 'PENDING') return true;
  const decision = decisionInForce(conflict);
  return Boolean(decision) && decision.decidedBy !== 'person';
}

/** Who decided, and whether a person or an assistant did. */
export function decider(d) {
  const by = d.decidedBy || 'not recorded';
  return h('span', {class: 'decider'}, h('strong', {}, d.actor), ' ', badge(by, 'by'),
    d.decidedVia ? h('span', {class: 'muted'}, ` via ${d.decidedVia}`) : null);
}

export function decisionsList(conflict) {
  if (!conflict.humanDecisions.length) return h('p', {class: 'muted'}, 'No human decision.');
  return h('ol', {class: 'decisions'}, conflict.humanDecisions.map((d) => h('li', {},
    badge(d.kind), ' ', badge(d.outcome), ' by ', decider(d), ' · ', when(d.decided.recordedAt),
    ` · event #${d.decided.seq}`, d.superseded ? h('span', {class: 'muted'}, ' (superseded)') : null,
    h('blockquote', {}, d.reason))));
}

function side(items, title) {
  return h('div', {class: 'side'}, h('h4', {}, title),
    h('ul', {}, items.map((i) => h('li', {},
      h('strong', {}, i.evidenceId), ` · ${i.source} · ${i.sourceType ? `${i.sourceType.toLowerCase()} · ` : ''}${i.publishDate} · authority `,
      num(i.authority, 2), i.summary ? h('p', {class: 'summary'}, i.summary) : null))));
}

/** Both sides of a conflict: the divergence summary while one exists, else its participants. */
export function sides(conflict) {
  const d = conflict.divergence;
  const supports = d ? d.supports : conflict.participants.filter((p) => p.side === 'SUPPORTS');
  const opposes = d ? d.opposes : conflict.participants.filter((p) => p.side === 'OPPOSES');
  return h('div', {class: 'sides'}, side(supports, 'Supporting'), side(opposes, 'Opposing'));
}

/**
 * The form a reviewer decides a conflict with: a pending one is resolved, one the rules decided
 * is appealed. `done(result)` after the write.
 */
export function decisionForm(taskId, sessionVersion, conflict, done) {
  const appeal = conflict.automaticTier !== 'PENDING';
  const base = `decide-${taskId.slice(-8)}-${conflict.conflictId}`;
  const out = h('div', {class: 'decision-out', 'aria-live': 'polite'});
  const reason = h('textarea', {id: `${base}-reason`, name: 'reason', rows: 3, required: true,
    placeholder: 'Why: what the evidence shows, for whoever audits this later'});
  const outcomes = [['SUPPORTS', 'The supporting side wins'], ['OPPOSES', 'The opposing side wins'], ['BOTH_STAND', 'Both stand']];
  const form = h('form', {class: 'decision', dataset: {conflict: conflict.conflictId, task: taskId}, onsubmit: async (event) => {
    event.preventDefault();
    const winner = new FormData(form).get('winner');
    if (!winner || !reason.value.trim()) {
      fill(out, note('error', 'Choose an outcome and give the reason.'));
      return;
    }
    const button = form.querySelector('button[type=submit]');
    button.disabled = true;
    const mutation = appeal ? 'appealAdjudication' : 'resolveConflict';
    try {
      const data = await gql(`mutation Decide($task: ID!, $conflict: ID!, $winner: HumanOutcome!, $reason: String!, $version: Int, $key: String) {
        ${mutation}(taskId: $task, conflictId: $conflict, winner: $winner, reason: $reason, expectedVersion: $version, idempotencyKey: $key) {
          sessionVersion replayed text } }`,
      {task: taskId, conflict: conflict.conflictId, winner, reason: reason.value.trim(), version: sessionVersion, key: idempotencyKey()});
      const result = data[mutation];
      fill(out, note('ok', `Recorded: ${result.text} (the task is now at version ${result.sessionVersion}).`));
      announce(`Decision on ${conflict.conflictId} recorded`);
      if (done) done(result);
    } catch (error) {
      button.disabled = false;
      fill(out, failure(error));
    }
  }},
  h('fieldset', {},
    h('legend', {}, appeal ? `Appeal ${conflict.conflictId} (decided by ${conflict.automaticTier.toLowerCase()})` : `Resolve ${conflict.conflictId}`),
    outcomes.map(([value, label]) => h('label', {class: 'choice'},
      h('input', {type: 'radio', name: 'winner', value, required: true}), ` ${label}`))),
  h('label', {for: `${base}-reason`}, 'Reason'), reason,
  h('div', {class: 'actions'}, h('button', {type: 'submit'}, appeal ? 'Record the appeal' : 'Record the resolution')),
  out);
  return form;
}

function scopeText(task, conflict) {
  if (!conflict.scope) return 'the main question';
  const sq = task.subQuestions.find((s) => s.id === conflict.scope);
  return sq ? `${conflict.scope}: ${sq.text}` : conflict.scope;
}

export async function render(ctx) {
  const list = h('div', {id: 'queue'});
  const more = h('div', {class: 'actions'});
  const status = h('p', {class: 'muted', 'aria-live': 'polite'});
  fill(ctx.main, h('h1', {}, 'Review queue'),
    h('p', {}, 'Conflicts in force that wait for a person: those the rules left pending, and those only an assistant decided. ',
      'A decision here is recorded as a person\'s, under your token\'s name.'),
    status, list, more);
  let found = 0;
  let scanned = 0;
  const scan = async (after) => {
    let data;
    try {
      data = await gql(QUEUE, {after});
    } catch (error) {
      fill(list, failure(error));
      return;
    }
    if (!ctx.stillCurrent()) return;
    for (const {node: task} of data.tasks.edges) {
      scanned += 1;
      for (const conflict of task.conflicts.filter(waitsForPerson)) {
        found += 1;
        const decision = decisionInForce(conflict);
        list.append(h('article', {class: 'panel queue-item', dataset: {task: task.id, conflict: conflict.conflictId}},
          h('h2', {}, h('a', {href: `#/task/${encodeURIComponent(task.id)}`}, task.question), ` · ${conflict.conflictId}`),
          h('p', {}, `Scope: ${scopeText(task, conflict)} · rules: `, badge(conflict.automaticTier, 'tier'),
            decision ? [' · in force: ', badge(decision.outcome), ' by ', decider(decision)] : ' · waiting for a person'),
          h('p', {class: 'muted'}, `Authority ${conflict.compared.supportsAuthority} against ${conflict.compared.opposesAuthority} (gap `,
            num(conflict.compared.authorityGap, 2), `); latest ${conflict.compared.supportsLatest} against ${conflict.compared.opposesLatest} (${conflict.compared.recencyGapDays} days)`),
          sides(conflict),
          h('h3', {}, 'Decisions so far'), decisionsList(conflict),
          decisionForm(task.id, task.sessionVersion, conflict, () => setTimeout(() => render(ctx), 1200))));
      }
    }
    fill(status, `${found} conflict(s) waiting, in ${scanned} task(s) read.`);
    fill(more, data.tasks.pageInfo.hasNextPage
      ? h('button', {type: 'button', onclick: () => scan(data.tasks.pageInfo.endCursor)}, 'Read more tasks')
      : null);
    if (!found && !data.tasks.pageInfo.hasNextPage) fill(list, note('ok', 'Nothing waits for a person.'));
  };
  await scan(null);
  return null;
}

