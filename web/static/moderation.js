// Moderators' actions on the dashboard (docs/contract.md section 11).
//
// A room's detail has a panel to act from: set and lift the room's slow
// mode, time a user out (in the room or everywhere) and lift it, and see
// what holds there; the room's title says when a slow mode holds. The
// overview's moderation card lists every action in force, each with a
// button to lift it. Both read GET /api/v1/moderation: every few seconds
// while the page is visible, and at once after acting. "Until" is shown in
// local time with a countdown that runs from the server's clock (its
// `as_of`), not the browser's, which may be off.
//
// Acting carries the page's token, as reading does (auth.js): a 401 asks
// for it and the request is tried again with it; if the prompt is
// dismissed, the form says the action was not done and why. The list's
// polls never ask (a prompt popping up on its own, in the middle of
// something else, would be rude): a 401 there says "needs the token" and
// stops the polling until a token is given, the moderator acts, or the
// room changes.
//
// Room and user names can hold anything printable ("<", "&", quotes, a
// Matrix id's "!", "@", ":"): they go into the page only as text or
// attribute values, never as HTML, and into URLs only through
// encodeURIComponent or URLSearchParams.

import { authFetch, TOKEN_EVENT } from './auth.js';
import { el, setText } from './dom.js';
import { Rows } from './rows.js';

const POLL_MS = 3000;
const STORE_ACTOR = 'chatpulse.actor';
const SHOWN_MAX = 200; // rows of the overview's list; the rest are counted

const $ = (id) => document.getElementById(id);

const mod = {
  room: null, // the room in view, or null on the overview
  actions: new Map(), // key -> action, as the server last said (and as this page changed it since)
  skew: 0, // the server's clock minus the browser's, in ms
  loaded: false, // one answer has come
  error: '', // why the last poll failed, or ''
  paused: false, // a poll got 401: none until a token is given, an action or another room
  gen: 0, // counts this page's own changes: a poll sent before one is stale
  timer: 0,
  inFlight: null,
};

const keyOf = (a) => `${a.kind}\u0000${a.room || ''}\u0000${a.user || ''}`;
const serverNow = () => Date.now() + mod.skew;
const untilMs = (a) => (a.until ? Date.parse(a.until) : Infinity);

// ---- formatting ----

const clock = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit', hourCycle: 'h23' });
const dayClock = new Intl.DateTimeFormat(undefined, { weekday: 'short', day: 'numeric', month: 'short', hour: '2-digit', minute: '2-digit', hourCycle: 'h23' });

// fmtUntil is a local time: the clock alone within a day (the countdown
// beside it says which day), the day too after that.
function fmtUntil(ms) {
  return ms - serverNow() < 86400e3 ? clock.format(new Date(ms)) : dayClock.format(new Date(ms));
}

// fmtLeft is a countdown: 42s, 9m 58s, 1h 05m, 2d 03h.
function fmtLeft(ms) {
  const s = Math.max(0, Math.ceil(ms / 1000));
  const pad = (n) => String(n).padStart(2, '0');
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${pad(s % 60)}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${pad(Math.floor(s / 60) % 60)}m`;
  return `${Math.floor(s / 86400)}d ${pad(Math.floor(s / 3600) % 24)}h`;
}

// fmtInterval writes a slow mode's interval as the API reads one: 30s, 2m, 1h30m.
function fmtInterval(ms) {
  if (ms % 1000) return `${ms}ms`;
  let s = ms / 1000;
  let out = '';
  for (const [unit, n] of [['h', 3600], ['m', 60], ['s', 1]]) {
    if (s >= n) {
      out += `${Math.floor(s / n)}${unit}`;
      s %= n;
    }
  }
  return out;
}

const roomLink = (room) => el('a', { class: 'room', href: `#/rooms/${encodeURIComponent(room)}`, text: room, title: room });

// what describes an action: what it does and to whom, then who set it and why.
function what(a) {
  const line = a.kind === 'slowmode'
    ? el('span', { class: 'what' }, el('span', { class: 'kind', text: 'slow mode' }), ` 1 per ${fmtInterval(a.interval_ms)} in `, roomLink(a.room))
    : el('span', { class: 'what' },
      el('span', { class: 'user', text: a.user, title: a.user }),
      el('span', { class: 'kind', text: ' timed out ' }),
      a.room ? el('span', {}, 'in ', roomLink(a.room)) : el('span', { class: 'any', text: 'everywhere' }));
  line.title = line.textContent;
  const by = [a.actor ? `by ${a.actor}` : 'by someone unnamed', a.reason].filter(Boolean).join(' · ');
  return [line, el('span', { class: 'by', text: by, title: by })];
}

// ---- the lists ----

function listRows(table, errorId) {
  const rows = new Rows(table.tBodies[0], {
    key: keyOf,
    columns: [
      {
        name: 'what',
        value: (a) => JSON.stringify([a.interval_ms, a.actor, a.reason]), // what can change in place
        set: (td, v, a) => td.replaceChildren(...what(a)),
        cls: 'what-cell',
      },
      {
        // When it ends: the countdown, and below it the local time.
        name: 'ends',
        value: (a) => (a.until ? `${fmtLeft(untilMs(a) - serverNow())}\u0000${a.until}` : ''),
        init: (td) => td.append(el('span', { class: 'left' }), el('time', { class: 'until' })),
        set: (td, v, a) => {
          const [left, until] = [td.firstChild, td.lastChild];
          if (!a.until) {
            left.textContent = '';
            until.textContent = 'until lifted';
            until.removeAttribute('datetime');
            until.title = '';
            return;
          }
          const ms = untilMs(a);
          left.textContent = fmtLeft(ms - serverNow());
          if (until.dateTime !== a.until) {
            until.dateTime = a.until;
            until.textContent = fmtUntil(ms);
            until.title = new Date(ms).toLocaleString();
          }
        },
        cls: 'num ends',
      },
      {
        name: 'lift',
        value: () => '',
        init: (td) => td.append(el('button', { type: 'button', class: 'lift', text: 'Lift' })),
        set: () => {},
        cls: 'lift-cell',
      },
    ],
    rowInit: (tr, k, a) => {
      tr.dataset.kind = a.kind;
      tr.dataset.room = a.room || '';
      tr.dataset.user = a.user || '';
      tr.dataset.testid = 'action';
      tr.querySelector('button.lift').setAttribute('aria-label', `Lift: ${tr.firstChild.textContent}`);
    },
  });
  table.tBodies[0].addEventListener('click', async (e) => {
    const button = e.target.closest('button.lift');
    const tr = button && button.closest('tr');
    if (!tr) return;
    const a = mod.actions.get(keyOf({ kind: tr.dataset.kind, room: tr.dataset.room, user: tr.dataset.user }));
    if (a) await lift(a, $(errorId), [button]);
  });
  return rows;
}

const allRows = listRows($('actions'), 'actions-error');
const roomRows = listRows($('act-actions'), 'act-actions-error');

// holdsHere: the actions that decide checks in room: its slow mode, and the
// timeouts in it or everywhere.
const holdsHere = (a, room) => (a.kind === 'slowmode' ? a.room === room : !a.room || a.room === room);

function byEnd(a, b) {
  return untilMs(a) - untilMs(b) || keyOf(a).localeCompare(keyOf(b));
}

// ---- rendering ----

function render() {
  const now = serverNow();
  let expired = false;
  for (const [k, a] of mod.actions) {
    if (untilMs(a) <= now) {
      mod.actions.delete(k); // it has ended by itself; the next poll agrees
      expired = true;
    }
  }
  if (expired) schedule(0);
  const all = [...mod.actions.values()].sort(byEnd);
  const note = mod.error ? `(${mod.error})` : all.length > SHOWN_MAX ? `the first ${SHOWN_MAX} of ${all.length} to end` : '';
  setText($('actions-note'), note);
  $('actions').classList.toggle('stale', !!mod.error);
  allRows.update(all.slice(0, SHOWN_MAX));
  $('actions').hidden = all.length === 0;
  $('actions-empty').hidden = all.length > 0 || !mod.loaded;
  if (mod.room !== null) renderRoom(all, now);
}

function renderRoom(all, now) {
  const room = mod.room;
  const here = all.filter((a) => holdsHere(a, room));
  setText($('act-actions-note'), mod.error ? `(${mod.error})` : '');
  $('act-actions').classList.toggle('stale', !!mod.error);
  roomRows.update(here);
  $('act-actions').hidden = here.length === 0;
  $('act-actions-empty').hidden = here.length > 0 || !mod.loaded;

  // The room's slow mode: in the form, and beside the room's title.
  const slow = mod.actions.get(keyOf({ kind: 'slowmode', room }));
  const badge = slowBadge();
  badge.hidden = !slow;
  $('slowmode-lift').disabled = !slow || busy.has($('slowmode-form'));
  setText($('slowmode-set'), slow ? 'Change slow mode' : 'Set slow mode');
  if (slow) {
    const left = slow.until ? fmtLeft(untilMs(slow) - now) : '';
    setText(badge, `slow mode · 1 per ${fmtInterval(slow.interval_ms)}${left ? ` · ${left}` : ''}`);
    badge.title = slow.until ? `until ${new Date(untilMs(slow)).toLocaleString()}` : 'until lifted';
    setText($('slowmode-state'), `On: one message per user per ${fmtInterval(slow.interval_ms)}, ${slow.until ? `until ${fmtUntil(untilMs(slow))} (${left} left)` : 'until lifted'}${slow.actor ? `, set by ${slow.actor}` : ''}.`);
  } else {
    setText($('slowmode-state'), 'Off: users post as the policies let them.');
  }
  $('act').dataset.slowmode = String(!!slow);

  // The typed user's timeouts here.
  const user = $('timeout-user').value;
  const scoped = { kind: 'timeout', user, room: scope() === 'room' ? room : '' };
  const held = user ? here.filter((a) => a.kind === 'timeout' && a.user === user) : [];
  $('timeout-lift').disabled = !user || !mod.actions.has(keyOf(scoped)) || busy.has($('timeout-form'));
  let state = 'Click a top talker, or type a user.';
  if (user) {
    state = held.length
      ? `${user} is timed out ${held.map((a) => `${a.room ? 'here' : 'everywhere'} ${a.until ? `until ${fmtUntil(untilMs(a))}` : 'until lifted'}`).join(' and ')}.`
      : `${user} is not timed out here.`;
  }
  setText($('timeout-state'), state);
}

// slowBadge is the mark beside the room's title, made here so that the
// page's own markup needs nothing for it.
function slowBadge() {
  let b = $('room-slowmode');
  if (!b) {
    b = el('span', { id: 'room-slowmode', class: 'badge slowmode', 'data-testid': 'room-slowmode' });
    b.hidden = true;
    $('room-title').after(b);
  }
  return b;
}

// ---- polling ----

async function poll() {
  if (mod.inFlight) return;
  mod.inFlight = new AbortController();
  const t = setTimeout(() => mod.inFlight && mod.inFlight.abort(), 5000);
  const gen = mod.gen;
  let stale = false;
  try {
    const sent = Date.now();
    const resp = await authFetch('api/v1/moderation', { cache: 'no-store', signal: mod.inFlight.signal }, { ask: false });
    if (!resp.ok) throw Object.assign(new Error(`status ${resp.status}`), { status: resp.status });
    const v = await resp.json();
    // An answer sent before this page's own last change may not have seen
    // it: ask again rather than show an action come back or vanish.
    stale = gen !== mod.gen;
    if (!stale) {
      mod.skew = Date.parse(v.as_of) - (sent + Date.now()) / 2;
      mod.actions = new Map(v.actions.map((a) => [keyOf(a), a]));
      mod.loaded = true;
      mod.error = '';
    }
  } catch (e) {
    if (e.status === 401) mod.paused = true;
    mod.error = e.status === 401 ? 'needs the token' : 'not reachable';
  } finally {
    clearTimeout(t);
    mod.inFlight = null;
  }
  render();
  schedule(stale ? 0 : POLL_MS);
}

function schedule(delay = POLL_MS) {
  clearTimeout(mod.timer);
  mod.timer = 0;
  if (mod.paused || document.visibilityState !== 'visible') return;
  mod.timer = setTimeout(poll, delay);
}

document.addEventListener('visibilitychange', () => schedule(0));
window.addEventListener(TOKEN_EVENT, () => {
  mod.paused = false;
  schedule(0);
});

// The countdowns tick every second.
setInterval(() => {
  if (document.visibilityState === 'visible' && mod.actions.size) render();
}, 1000);

// ---- acting ----

const busy = new Set(); // the forms with a request in flight

// request sends one action to the API and says, in errBox, why it was not
// done: the API's own {"error"} with its status, a token not given, or
// chatpulse not answering. It returns the answer, or null.
async function request(method, path, body, errBox, buttons) {
  errBox.hidden = true;
  errBox.textContent = '';
  for (const b of buttons) b.disabled = true;
  mod.paused = false; // acting asks for the token again if need be
  try {
    const opts = { method, cache: 'no-store' };
    if (body) {
      opts.headers = { 'Content-Type': 'application/json' };
      opts.body = JSON.stringify(body);
    }
    const resp = await authFetch(path, opts);
    let answer = null;
    try { answer = await resp.json(); } catch { /* not JSON: said below */ }
    if (!resp.ok) {
      fail(errBox, `${resp.status}: ${(answer && answer.error) || resp.statusText || 'refused'}`);
      return null;
    }
    return answer || {};
  } catch (e) {
    fail(errBox, e.status === 401
      ? 'Not done: this chatpulse needs its token (401), and none was given.'
      : `Not done: chatpulse did not answer (${e.message}).`);
    return null;
  } finally {
    for (const b of buttons) b.disabled = false;
    schedule(0); // show what is in force now, whatever happened
  }
}

function fail(errBox, text) {
  errBox.textContent = text;
  errBox.hidden = false;
}

const actor = () => $('act-actor').value.trim();

function actionPath(a) {
  return a.kind === 'slowmode'
    ? `api/v1/rooms/${encodeURIComponent(a.room)}/slowmode`
    : `api/v1/users/${encodeURIComponent(a.user)}/timeout`;
}

// put sets an action; body is its request without the actor.
async function put(a, body, form) {
  const who = actor();
  if (who) body.actor = who;
  busy.add(form);
  const got = await request('PUT', actionPath(a), body, form.querySelector('.act-error'), form.querySelectorAll('button'));
  busy.delete(form);
  if (got && got.kind) {
    mod.actions.set(keyOf(got), got);
    mod.gen++;
  }
  render();
  return got;
}

// lift ends an action.
async function lift(a, errBox, buttons) {
  const q = new URLSearchParams();
  if (a.kind === 'timeout' && a.room) q.set('room', a.room);
  const who = actor();
  if (who) q.set('actor', who);
  const query = q.toString();
  const got = await request('DELETE', actionPath(a) + (query ? `?${query}` : ''), null, errBox, buttons);
  if (got) {
    mod.actions.delete(keyOf(a));
    mod.gen++;
  }
  render();
}

const scope = () => ($('timeout-everywhere').checked ? 'all' : 'room');

$('slowmode-form').addEventListener('submit', (e) => {
  e.preventDefault();
  if (mod.room === null) return;
  const body = { interval: $('slowmode-interval').value.trim() };
  const span = $('slowmode-for').value.trim();
  if (span) body.for = span;
  put({ kind: 'slowmode', room: mod.room }, body, e.currentTarget);
});

$('slowmode-lift').addEventListener('click', async (e) => {
  const form = $('slowmode-form');
  busy.add(form);
  await lift({ kind: 'slowmode', room: mod.room }, form.querySelector('.act-error'), [e.currentTarget, $('slowmode-set')]);
  busy.delete(form);
  render();
});

$('timeout-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const form = e.currentTarget;
  if (mod.room === null) return;
  const user = $('timeout-user').value;
  if (!user) {
    fail(form.querySelector('.act-error'), 'Name a user: click one of the top talkers, or type one.');
    return;
  }
  const body = {};
  if (scope() === 'room') body.room = mod.room;
  const span = $('timeout-for').value.trim();
  if (span) body.for = span;
  const reason = $('timeout-reason').value.trim();
  if (reason) body.reason = reason;
  put({ kind: 'timeout', user }, body, form);
});

$('timeout-lift').addEventListener('click', async (e) => {
  const form = $('timeout-form');
  const a = { kind: 'timeout', user: $('timeout-user').value, room: scope() === 'room' ? mod.room : '' };
  busy.add(form);
  await lift(a, form.querySelector('.act-error'), [e.currentTarget, $('timeout-set')]);
  busy.delete(form);
  render();
});

$('timeout-user').addEventListener('input', () => render());
for (const id of ['timeout-here', 'timeout-everywhere']) $(id).addEventListener('change', () => render());

// A click on one of the room's top talkers picks them for a timeout.
$('room-top-users').addEventListener('click', (e) => {
  const tr = e.target.closest('tr[data-user]');
  if (!tr) return;
  pickUser(tr.dataset.user);
});

function pickUser(user) {
  $('timeout-user').value = user;
  $('timeout-form').querySelector('.act-error').hidden = true;
  render();
  $('timeout-form').scrollIntoView({ block: 'nearest', behavior: 'smooth' });
}

// The actor is remembered for the next visit: a moderator is the same
// person from one page to the next.
try { $('act-actor').value = localStorage.getItem(STORE_ACTOR) || ''; } catch { /* private mode */ }
$('act-actor').addEventListener('change', () => {
  try { localStorage.setItem(STORE_ACTOR, actor()); } catch { /* private mode */ }
});

// setModerationRoom tells the panel which room is in view (null: none).
export function setModerationRoom(room) {
  if (room === mod.room) return;
  mod.room = room;
  for (const form of [$('slowmode-form'), $('timeout-form')]) form.querySelector('.act-error').hidden = true;
  $('act-actions-error').hidden = true;
  $('timeout-user').value = '';
  if (room !== null) slowBadge().hidden = true; // until this room's state is drawn
  mod.paused = false;
  render();
  schedule(0);
}

// isAction tells an action apart from a key over a policy's limit in
// GET /api/v1/throttle/active, which lists both.
export const isAction = (a) => a.limit === 0 && (a.policy === 'slowmode' || a.policy === 'timeout');

schedule(0);
