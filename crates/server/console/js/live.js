// Live updates: a small client of the graphql-transport-ws protocol on `/graphql/ws`.
//
// The socket says who it is in `connection_init` (browsers cannot set headers on a WebSocket:
// the token goes in the payload as `Authorization: Bearer …`, which the server reads), then
// each subscription is a `subscribe` with an id, answered by `next` messages until `complete`
// or `error`. A socket that closes is opened again after a growing pause, and every
// subscription still wanted is sent again on it.

import {token} from './api.js';

export class Live {
  constructor() {
    this.subscriptions = new Map();
    this.nextId = 1;
    this.socket = null;
    this.acked = false;
    this.retryMs = 500;
    this.listeners = new Set();
    this.state = 'connecting';
    this.closedOnPurpose = false;
  }

  /** Calls `listener(state)` on every change: `connecting`, `live`, `offline`, `refused`. */
  onState(listener) {
    this.listeners.add(listener);
    listener(this.state);
  }

  setState(state, detail) {
    this.state = state;
    this.detail = detail;
    for (const listener of this.listeners) listener(state, detail);
  }

  start() {
    this.closedOnPurpose = false;
    const url = new URL('/graphql/ws', window.location.href);
    url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
    const socket = new WebSocket(url, 'graphql-transport-ws');
    this.socket = socket;
    this.acked = false;
    this.setState('connecting');
    socket.addEventListener('open', () => {
      const t = token();
      socket.send(JSON.stringify({type: 'connection_init', payload: t ? {Authorization: `Bearer ${t}`} : {}}));
    });
    socket.addEventListener('message', (event) => this.receive(socket, event.data));
    socket.addEventListener('close', (event) => {
      if (this.socket !== socket) return;
      this.acked = false;
      if (this.closedOnPurpose) return;
      // 4401/4403: the token was refused or changed; 4400/4408: the protocol was not kept.
      const refused = event.code === 4401 || event.code === 4403;
      this.setState(refused ? 'refused' : 'offline', event.reason);
      setTimeout(() => {
        if (this.socket === socket && !this.closedOnPurpose) this.start();
      }, this.retryMs);
      this.retryMs = Math.min(this.retryMs * 2, 10000);
    });
  }

  /** Closes the socket and opens a new one (after the token changed). */
  restart() {
    const old = this.socket;
    this.closedOnPurpose = true;
    this.socket = null;
    if (old) old.close(1000, 'the token changed');
    this.start();
  }

  receive(socket, data) {
    let message;
    try {
      message = JSON.parse(data);
    } catch (e) {
      return;
    }
    switch (message.type) {
      case 'connection_ack':
        this.acked = true;
        this.retryMs = 500;
        this.setState('live');
        for (const [id, sub] of this.subscriptions) this.sendSubscribe(id, sub);
        break;
      case 'ping':
        socket.send(JSON.stringify({type: 'pong'}));
        break;
      case 'next': {
        const sub = this.subscriptions.get(message.id);
        if (!sub) break;
        if (message.payload.errors && message.payload.errors.length) sub.onError(message.payload.errors[0]);
        else sub.onData(message.payload.data);
        break;
      }
      case 'error': {
        const sub = this.subscriptions.get(message.id);
        if (sub) sub.onError(message.payload[0] || {message: 'the subscription was refused'});
        this.subscriptions.delete(message.id);
        break;
      }
      case 'complete':
        this.subscriptions.delete(message.id);
        break;
      default:
        break;
    }
  }

  sendSubscribe(id, sub) {
    if (!this.socket || !this.acked) return;
    this.socket.send(JSON.stringify({id, type: 'subscribe', payload: {query: sub.query, variables: sub.variables}}));
  }

  /** Subscribes; returns the function that ends the subscription. */
  subscribe(query, variables, onData, onError = () => {}) {
    const id = String(this.nextId++);
    const sub = {query, variables, onData, onError};
    this.subscriptions.set(id, sub);
    this.sendSubscribe(id, sub);
    return () => {
      if (!this.subscriptions.delete(id)) return;
      if (this.socket && this.acked) this.socket.send(JSON.stringify({id, type: 'complete'}));
    };
  }
}
