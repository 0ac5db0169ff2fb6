// Sign-in: the reader's access token, kept in this tab's sessionStorage and sent on every
// request and in the WebSocket's connection_init. On a server in open mode (loopback, no
// tokens made) none is needed.

import {ApiError, gql, setToken, token} from './api.js';
import {fill, h, note} from './dom.js';

export async function render(ctx) {
  const status = h('div', {id: 'signin-status'});
  const input = h('input', {id: 'token', name: 'token', type: 'password', autocomplete: 'off', spellcheck: 'false',
    placeholder: 'rl_…', 'aria-describedby': 'token-help', required: true});
  const form = h('form', {class: 'signin', onsubmit: async (event) => {
    event.preventDefault();
    const value = input.value.trim();
    if (!value) return;
    setToken(value);
    try {
      await gql('{ ledger { size } }');
      input.value = '';
      fill(status, note('ok', 'Signed in: the token is kept in this tab until it closes.'));
      window.location.hash = '#/tasks';
    } catch (error) {
      setToken(null);
      fill(status, note('error', error instanceof ApiError ? error.message : String(error)));
    }
  }},
  h('label', {for: 'token'}, 'Access token'),
  input,
  h('p', {id: 'token-help', class: 'muted'},
    'A token made with research-ledger token add NAME --role auditor|writer|reviewer|admin. ',
    'It stays in this tab (sessionStorage) and goes with every request.'),
  h('div', {class: 'actions'},
    h('button', {type: 'submit'}, 'Sign in'),
    h('button', {type: 'button', class: 'secondary', onclick: () => {
      setToken(null);
      fill(status, note('info', 'Signed out.'));
    }}, 'Sign out')));
  fill(ctx.main, h('h1', {}, 'Sign in'), form, status);
  // Whether the server wants one at all.
  if (!token()) {
    try {
      await gql('{ ledger { size } }');
      fill(status, note('info', 'This server answers without a token (open mode on loopback); sign in only to act as a token\'s holder.'));
    } catch (error) {
      fill(status, note('info', error.message));
    }
  } else {
    fill(status, note('info', `Signed in with a token ending …${token().slice(-4)}.`));
  }
  return null;
}
