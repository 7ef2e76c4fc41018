// The dashboard's websocket (/ws), and the status in the header that
// says how it is.
//
// connect fetches what the page needs first (the windows), then opens a
// socket; when either fails, or the socket closes, retry connects again
// after a backoff. Once a socket is open, and after any change the page
// makes, reconcile sends the subscribe and unsubscribe requests that make
// the server's set of views the one the page wants. Frames are parsed and
// handed to the page; a view frame of a view unsubscribed since is
// dropped, the others light the status dot.

import { wsProtocols } from './auth.js';

const BACKOFF_BASE_MS = 500;
const BACKOFF_CAP_MS = 10000;

const $ = (id) => document.getElementById(id);

const conn = {
  ws: null,
  connecting: false, // fetching the windows before opening a socket
  state: 'connecting',
  attempt: 0,
  retryAt: 0,
  retryTimer: 0,
  countdown: 0,
  subscribed: new Map(), // key -> request, as the server has them
  outbox: [],
  tokens: 15,
  flushTimer: 0,
  page: null, // what startConnection was given
};

export const subKey = (view, window, room = '') => JSON.stringify([view, window, room]);

// startConnection shows the status and connects, for good. page is what
// the connection asks of the page:
//   - prepare(): a promise awaited before each socket opens (the windows);
//     if it fails, the connection retries;
//   - prepared(answer): what prepare resolved to;
//   - wanted(): the views the page wants, a Map from subKey to request;
//   - forget(request): a view is unsubscribed, drop what it left;
//   - opened(): a socket is open;
//   - onFrame(msg): a frame, parsed.
export function startConnection(page) {
  conn.page = page;
  showStatus();
  connect();
}

// reconcile sends the subscribe and unsubscribe requests that make the
// server's set of views the wanted one.
export function reconcile() {
  if (!conn.ws || conn.ws.readyState !== WebSocket.OPEN) return;
  const want = conn.page.wanted();
  for (const [k, m] of conn.subscribed) {
    if (!want.has(k)) {
      send({ type: 'unsubscribe', ...m });
      conn.subscribed.delete(k);
      conn.page.forget(m);
    }
  }
  for (const [k, m] of want) {
    if (!conn.subscribed.has(k)) {
      send({ type: 'subscribe', ...m });
      conn.subscribed.set(k, m);
    }
  }
}

// send queues a frame; frames go out at most ~10 a second (with a burst),
// well inside the server's limit, so a burst of clicks is never refused.
function send(msg) {
  conn.outbox.push(JSON.stringify(msg));
  flush();
}

function flush() {
  clearTimeout(conn.flushTimer);
  while (conn.outbox.length && conn.tokens >= 1) {
    if (!conn.ws || conn.ws.readyState !== WebSocket.OPEN) {
      conn.outbox.length = 0;
      return;
    }
    conn.ws.send(conn.outbox.shift());
    conn.tokens -= 1;
  }
  if (conn.outbox.length) conn.flushTimer = setTimeout(flush, 100);
}
setInterval(() => { conn.tokens = Math.min(15, conn.tokens + 1); }, 100);

async function connect() {
  clearTimeout(conn.retryTimer);
  if (conn.ws || conn.connecting) return;
  conn.connecting = true;
  setStatus(conn.attempt ? 'reconnecting' : 'connecting');
  let answer;
  try {
    answer = await conn.page.prepare();
  } catch {
    conn.connecting = false;
    retry();
    return;
  }
  conn.connecting = false;
  conn.page.prepared(answer);

  const url = new URL('ws', location.href);
  url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
  url.hash = '';
  let ws;
  try {
    ws = new WebSocket(url, wsProtocols());
  } catch {
    retry();
    return;
  }
  conn.ws = ws;
  ws.onopen = () => {
    conn.subscribed.clear();
    conn.outbox.length = 0;
    setStatus('connected');
    reconcile();
    conn.page.opened();
  };
  ws.onmessage = (e) => {
    conn.attempt = 0; // the server talks: a later drop starts the backoff afresh
    let msg;
    try {
      msg = JSON.parse(e.data);
    } catch {
      return;
    }
    if (msg.type === 'view') {
      if (!conn.subscribed.has(subKey(msg.view, msg.window, msg.room || ''))) return; // unsubscribed since
      pulse();
    }
    conn.page.onFrame(msg);
  };
  ws.onclose = () => {
    if (conn.ws !== ws) return;
    conn.ws = null;
    conn.subscribed.clear();
    retry();
  };
}

// retry reconnects after an exponential backoff with jitter, capped at 10 s,
// or as soon as the browser is back online.
function retry() {
  clearTimeout(conn.retryTimer);
  if (!navigator.onLine) {
    setStatus('offline');
    return;
  }
  const ceiling = Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** conn.attempt);
  const delay = ceiling / 2 + Math.random() * ceiling / 2;
  conn.attempt += 1;
  conn.retryAt = Date.now() + delay;
  conn.retryTimer = setTimeout(connect, delay);
  setStatus('waiting');
}

window.addEventListener('online', () => {
  conn.attempt = 0;
  connect();
});
window.addEventListener('offline', () => {
  // The browser knows the network is gone: say so now rather than when a
  // socket times out, and start afresh when it is back.
  clearTimeout(conn.retryTimer);
  if (conn.ws) conn.ws.close();
  else setStatus('offline');
});

function setStatus(s) {
  conn.state = s;
  clearInterval(conn.countdown);
  if (s === 'waiting') conn.countdown = setInterval(showStatus, 250);
  showStatus();
}

function showStatus() {
  const box = $('status');
  let state = conn.state;
  let text;
  switch (state) {
    case 'connected':
      text = 'connected';
      break;
    case 'offline':
      text = 'offline';
      break;
    case 'waiting': {
      const s = Math.max(1, Math.ceil((conn.retryAt - Date.now()) / 1000));
      text = `reconnecting in ${s}s`;
      state = 'reconnecting';
      break;
    }
    case 'reconnecting':
      text = 'reconnecting…';
      break;
    default:
      text = 'connecting…';
  }
  box.dataset.state = state;
  const t = $('status-text');
  if (t.textContent !== text) t.textContent = text;
  document.body.classList.toggle('stale', state !== 'connected');
}

// pulse lights the status dot for a moment when data arrives: a calm tick,
// and no animation left running between updates.
function pulse() {
  const dot = $('status').firstElementChild;
  dot.classList.add('beat');
  clearTimeout(pulse.timer);
  pulse.timer = setTimeout(() => dot.classList.remove('beat'), 350);
}
