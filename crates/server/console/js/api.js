// The console's one way to the server: GraphQL over fetch, with the reader's token, and the
// downloads of export bundles and proof files. The token lives in sessionStorage: it is gone
// when the tab closes, and is sent on every request as `Authorization: Bearer`.

const TOKEN_KEY = 'research-ledger.token';

/** The token the reader signed in with, or null. */
export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

/** Keeps the token for this tab (null signs out). */
export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
  window.dispatchEvent(new Event('research-ledger:token'));
}

/** The headers every request carries. */
export function authHeaders() {
  const t = token();
  return t ? {Authorization: `Bearer ${t}`} : {};
}

/** A refusal or failure, with the server's SPEC code (`UNAUTHENTICATED`, `FORBIDDEN`, …). */
export class ApiError extends Error {
  constructor(message, code, details) {
    super(message);
    this.code = code;
    this.details = details;
  }
}

/** Runs one GraphQL query or mutation; its `data`, or an ApiError with the first error. */
export async function gql(query, variables = {}) {
  let response;
  try {
    response = await fetch('/graphql', {
      method: 'POST',
      headers: {'Content-Type': 'application/json', Accept: 'application/json', ...authHeaders()},
      body: JSON.stringify({query, variables}),
    });
  } catch (e) {
    throw new ApiError(`the server cannot be reached: ${e.message}`, 'UNAVAILABLE');
  }
  let body;
  try {
    body = await response.json();
  } catch (e) {
    throw new ApiError(`the server answered ${response.status} without JSON`, 'UNAVAILABLE');
  }
  // The access check in front of every route answers with the REST body.
  if (body && typeof body.error === 'string') {
    throw new ApiError(body.message || body.error, body.error.toUpperCase(), body);
  }
  if (body.errors && body.errors.length) {
    const first = body.errors[0];
    const code = (first.extensions && first.extensions.code) || 'ERROR';
    throw new ApiError(first.message, code, first.extensions);
  }
  return body.data;
}

/** Saves bytes or text as a file in the reader's downloads. */
export function save(content, filename, type = 'application/json') {
  const blob = content instanceof Blob ? content : new Blob([content], {type});
  const url = URL.createObjectURL(blob);
  const a = document.createElement('a');
  a.href = url;
  a.download = filename;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

/** Fetches a file of the server with the reader's token and saves it. */
export async function download(path, filename) {
  const response = await fetch(path, {headers: authHeaders()});
  if (!response.ok) {
    let message = `${response.status}`;
    try {
      const body = await response.json();
      message = body.message || body.error || message;
    } catch (e) {
      // Not JSON: the status says enough.
    }
    throw new ApiError(`the download was refused: ${message}`, 'DOWNLOAD');
  }
  save(await response.blob(), filename);
}

/** A fresh idempotency key for one write the reader asked for. */
export function idempotencyKey() {
  return `console-${crypto.randomUUID()}`;
}
