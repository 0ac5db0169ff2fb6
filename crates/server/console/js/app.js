// The console's shell: the views addressed by the URL's fragment (`#/tasks`, `#/task/ID`,
// `#/review`, `#/ledger`, `#/signin`), the live connection shared by every view, and what the
// header says of it and of the reader's token.

import {token} from './api.js';
import {failure, fill, h} from './dom.js';
import {Live} from './live.js';
import * as ledger from './ledger.js';
import * as review from './review.js';
import * as signin from './signin.js';
import * as task from './task.js';
import * as tasks from './tasks.js';

const live = new Live();
const main = document.getElementById('main');
let cleanup = null;
let generation = 0;

function parse() {
  const hash = window.location.hash || '#/tasks';
  const [path, query] = hash.slice(1).split('?');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  return {parts, params: new URLSearchParams(query || '')};
}

async function route() {
  const mine = ++generation;
  if (cleanup) {
    try { cleanup(); } catch (e) { /* a view's cleanup never stops the next */ }
    cleanup = null;
  }
  const {parts, params} = parse();
  const view = parts[0] || 'tasks';
  for (const link of document.querySelectorAll('header nav a, #who')) {
    if (link.dataset.view === view) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  const ctx = {live, params, main, parts, stillCurrent: () => mine === generation};
  fill(main, h('p', {class: 'muted'}, 'Loading…'));
  try {
    let done;
    switch (view) {
      case 'task': done = await task.render(ctx, parts[1]); break;
      case 'review': done = await review.render(ctx); break;
      case 'ledger': done = await ledger.render(ctx); break;
      case 'signin': done = await signin.render(ctx); break;
      default: done = await tasks.render(ctx); break;
    }
    if (mine === generation) cleanup = done || null;
    else if (done) done();
  } catch (error) {
    if (mine === generation) fill(main, failure(error));
  }
  if (mine === generation) {
    const heading = main.querySelector('h1');
    if (heading) {
      heading.setAttribute('tabindex', '-1');
      heading.focus({preventScroll: true});
    }
  }
}

function showReader() {
  const who = document.getElementById('who');
  const t = token();
  who.textContent = t ? `Signed in · …${t.slice(-4)}` : 'Sign in';
}

function showLive(state, detail) {
  const el = document.getElementById('live');
  const text = {
    connecting: 'live: connecting…',
    live: 'live: connected',
    offline: 'live: offline, reconnecting…',
    refused: `live: refused${detail ? ` (${detail})` : ''}`,
  }[state] || state;
  el.textContent = text;
  el.className = `live ${state}`;
}

window.addEventListener('hashchange', route);
window.addEventListener('research-ledger:token', () => {
  showReader();
  live.restart();
});
live.onState(showLive);
live.start();
showReader();
route();
