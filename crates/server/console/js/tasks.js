// The task list: the index a page at a time, filtered by status, verdict and text (the server
// filters; Chinese matches as written), and updated live as events arrive.

import {gql} from './api.js';
import {badge, debounce, failure, fill, h, num, table, when} from './dom.js';

const QUERY = `query Tasks($status: TaskStatus, $stance: Verdict, $text: String, $first: Int, $after: String) {
  tasks(status: $status, stance: $stance, text: $text, first: $first, after: $after) {
    edges { cursor node { id question status sessionVersion openedAt openedBy mode
      conclusion { stance confidence stale } } }
    pageInfo { hasNextPage endCursor }
  }
}`;

const PAGE = 20;
const STATUSES = ['ACTIVE', 'CONCLUDED', 'STALE', 'CLOSED'];
const VERDICTS = ['SUPPORTIVE', 'OPPOSING', 'UNCERTAIN', 'EVIDENCE_INSUFFICIENT'];

function select(id, label, values, current) {
  return [
    h('label', {for: id}, label),
    h('select', {id, name: id},
      h('option', {value: ''}, 'any'),
      values.map((v) => h('option', {value: v, selected: v === current}, v.toLowerCase().replace(/_/g, ' ')))),
  ];
}

export async function render(ctx) {
  const params = ctx.params;
  const filters = {
    status: params.get('status') || '',
    stance: params.get('stance') || '',
    text: params.get('text') || '',
  };
  // Cursors of the pages before this one, so that "Previous" goes back.
  const cursors = (params.get('pages') || '').split(',').filter(Boolean);
  const after = cursors.length ? cursors[cursors.length - 1] : null;
  const go = (next) => {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(next.filters)) if (v) q.set(k, v);
    if (next.cursors.length) q.set('pages', next.cursors.join(','));
    window.location.hash = `#/tasks${q.toString() ? `?${q}` : ''}`;
  };
  const text = h('input', {id: 'text', name: 'text', type: 'search', value: filters.text, placeholder: 'words in the question or constraints'});
  const form = h('form', {class: 'filters', role: 'search', onsubmit: (event) => {
    event.preventDefault();
    const data = new FormData(form);
    go({filters: {status: data.get('status'), stance: data.get('stance'), text: String(data.get('text') || '').trim()}, cursors: []});
  }},
  select('status', 'Status', STATUSES, filters.status),
  select('stance', 'Verdict', VERDICTS, filters.stance),
  h('label', {for: 'text'}, 'Text'), text,
  h('button', {type: 'submit'}, 'Filter'));
  for (const el of form.querySelectorAll('select')) el.addEventListener('change', () => form.requestSubmit());

  const results = h('div', {id: 'task-results', 'aria-live': 'polite'});
  const updated = h('p', {class: 'muted', id: 'tasks-updated'});
  fill(ctx.main, h('h1', {}, 'Research tasks'), form, results, updated);

  const load = async () => {
    let data;
    try {
      data = await gql(QUERY, {
        status: filters.status || null, stance: filters.stance || null, text: filters.text || null,
        first: PAGE, after,
      });
    } catch (error) {
      fill(results, failure(error));
      return;
    }
    if (!ctx.stillCurrent()) return;
    const edges = data.tasks.edges;
    const rows = edges.map(({node}) => h('tr', {dataset: {task: node.id}},
      h('td', {class: 'question', lang: /[\u3400-\u9fff]/.test(node.question) ? 'zh' : null},
        h('a', {href: `#/task/${encodeURIComponent(node.id)}`}, node.question)),
      h('td', {}, badge(node.status)),
      h('td', {}, node.conclusion ? badge(node.conclusion.stance, 'verdict') : h('span', {class: 'muted'}, 'none yet')),
      h('td', {}, node.conclusion ? num(node.conclusion.confidence, 4) : null),
      h('td', {}, node.sessionVersion),
      h('td', {}, when(node.openedAt)),
      h('td', {}, node.openedBy)));
    const pager = h('nav', {class: 'pager', 'aria-label': 'Pages of tasks'},
      h('button', {type: 'button', disabled: cursors.length === 0,
        onclick: () => go({filters, cursors: cursors.slice(0, -1)})}, '← Previous'),
      h('span', {class: 'muted'}, ` page ${cursors.length + 1} `),
      h('button', {type: 'button', disabled: !data.tasks.pageInfo.hasNextPage,
        onclick: () => go({filters, cursors: [...cursors, data.tasks.pageInfo.endCursor]})}, 'Next →'));
    fill(results,
      edges.length
        ? table(['Question', 'Status', 'Verdict', 'Confidence', 'Version', 'Opened', 'By'], rows, `${edges.length} task(s) on this page`)
        : h('p', {class: 'muted'}, 'No task matches.'),
      pager);
    fill(updated, `Read at ${new Date().toLocaleTimeString()}; updated live as events arrive.`);
  };
  await load();
  const reload = debounce(load, 250);
  const stop = ctx.live.subscribe('subscription { events { seq taskId kind } }', {}, reload);
  return stop;
}
