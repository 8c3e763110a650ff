// api.js: the dashboard's requests to sandboxd's API v1, on the page's own origin with the
// session cookie. Every request that is not GET carries the session's CSRF token.

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

let csrf = null;
let unauthorized = () => {};

export function setCsrf(token) {
  csrf = token || null;
}

export function getCsrf() {
  return csrf;
}

// Called when a request that needed the session got 401: it ended or was revoked.
export function onUnauthorized(fn) {
  unauthorized = fn;
}

export async function api(method, path, body, { quiet401 = false } = {}) {
  const headers = {};
  const opts = { method, headers, credentials: 'same-origin', cache: 'no-store' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    opts.body = JSON.stringify(body);
  }
  if (method !== 'GET' && method !== 'HEAD' && csrf) headers['X-CSRF-Token'] = csrf;
  let res;
  try {
    res = await fetch(path, opts);
  } catch (e) {
    throw new ApiError(0, 'network', 'sandboxd cannot be reached; check the connection');
  }
  let data = null;
  const text = res.status === 204 ? '' : await res.text();
  if (text) {
    try {
      data = JSON.parse(text);
    } catch (e) {
      data = null;
    }
  }
  if (!res.ok) {
    const err = data && data.error ? data.error : {};
    const e = new ApiError(res.status, err.code || 'http', err.message || `HTTP ${res.status}`);
    e.retryAfter = res.headers.get('Retry-After');
    if (res.status === 401 && !quiet401) unauthorized(e);
    throw e;
  }
  return data;
}

export const seg = encodeURIComponent;
