// The console's few DOM helpers: elements built from data with textContent only (no HTML
// strings, so no text from the ledger can become markup), and number and time formatting.

import {ApiError} from './api.js';

/** An element: `h('a', {href: '#/', class: 'x', onclick: f}, 'text', child, [more])`. */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith('on') && typeof value === 'function') {
      el.addEventListener(name.slice(2), value);
    } else if (name === 'class') {
      el.className = value;
    } else if (name === 'dataset') {
      Object.assign(el.dataset, value);
    } else if (value === true) {
      el.setAttribute(name, '');
    } else {
      el.setAttribute(name, String(value));
    }
  }
  append(el, children);
  return el;
}

/** Appends children: nodes, strings, numbers, arrays of them; null and false are skipped. */
export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** Replaces an element's children. */
export function fill(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

/** A number with `digits` decimals; the unrounded value in the title. */
export function num(value, digits = 3) {
  if (value === null || value === undefined) return h('span', {class: 'muted'}, '—');
  return h('span', {class: 'num', title: String(value)}, Number(value).toFixed(digits));
}

/** The first `n` characters of a hash, the whole in the title. */
export function short(hash, n = 12) {
  if (!hash) return h('span', {class: 'muted'}, '—');
  return h('code', {class: 'hash', title: hash}, hash.slice(0, n));
}

/** A time as the reader's locale writes it, the RFC 3339 text in the title. */
export function when(text) {
  if (!text) return h('span', {class: 'muted'}, '—');
  const date = new Date(text);
  const shown = Number.isNaN(date.getTime()) ? text : date.toLocaleString();
  return h('time', {datetime: text, title: text}, shown);
}

/** A labelled bar for a value in [0, 1]. */
export function bar(label, value, weight) {
  const pct = Math.max(0, Math.min(1, Number(value) || 0)) * 100;
  const id = `bar-${label.replace(/\W+/g, '-')}-${Math.random().toString(36).slice(2, 8)}`;
  return h('div', {class: 'bar-row'},
    h('span', {class: 'bar-label', id}, label, weight !== undefined ? h('span', {class: 'muted'}, ` ×${weight}`) : null),
    h('div', {class: 'bar', role: 'meter', 'aria-labelledby': id, 'aria-valuemin': 0, 'aria-valuemax': 1,
      'aria-valuenow': Number(value).toFixed(4)},
      fillBar(pct)),
    num(value, 3));
}

// The width is set through the CSSOM: the policy refuses style attributes in markup, not this.
function fillBar(pct) {
  const el = h('div', {class: 'bar-fill'});
  el.style.width = `${pct.toFixed(1)}%`;
  return el;
}

/** A badge naming an enum value, styled by it. */
export function badge(value, kind = '') {
  if (value === null || value === undefined) return h('span', {class: 'muted'}, '—');
  const text = String(value).toLowerCase().replace(/_/g, ' ');
  return h('span', {class: `badge ${kind} v-${String(value).toLowerCase()}`}, text);
}

/** A section with a heading (of the given level) and content. */
export function section(title, ...content) {
  const id = `s-${title.toLowerCase().replace(/[^a-z0-9]+/g, '-')}`;
  return h('section', {class: 'panel', 'aria-labelledby': id}, h('h2', {id}, title), ...content);
}

/** A table from column titles and rows of cells. */
export function table(columns, rows, caption) {
  return h('table', {},
    caption ? h('caption', {}, caption) : null,
    h('thead', {}, h('tr', {}, columns.map((c) => h('th', {scope: 'col'}, c)))),
    h('tbody', {}, rows));
}

/** A message for the reader: `kind` is `error`, `ok` or `info`. */
export function note(kind, ...text) {
  return h('p', {class: `note ${kind}`, role: kind === 'error' ? 'alert' : 'status'}, ...text);
}

/** Says `text` to screen readers (and nothing on screen). */
export function announce(text) {
  const el = document.getElementById('announce');
  if (!el) return;
  el.textContent = '';
  setTimeout(() => { el.textContent = text; }, 50);
}

/** The message of a failed request: a sign-in prompt when the server wants a token. */
export function failure(error) {
  if (error instanceof ApiError && error.code === 'UNAUTHENTICATED') {
    return note('error', `${error.message} `, h('a', {href: '#/signin'}, 'Sign in with a token'), '.');
  }
  if (error instanceof ApiError && error.code === 'FORBIDDEN') {
    return note('error', `${error.message} (the token's role does not allow this)`);
  }
  return note('error', (error && error.message) || String(error));
}

/** Calls `f` at most once per `ms`, after the last call. */
export function debounce(f, ms) {
  let timer = null;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => f(...args), ms);
  };
}
