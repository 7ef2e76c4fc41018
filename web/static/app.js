// The chatpulse dashboard.
//
// Everything live comes over one websocket (/ws, kept by conn.js): the
// overview of every configured window (for the top-talker strip), the rooms
// list of the selected window, a room's view in every window while its
// detail shows, the throttle alerts and the acts on the chat system (one
// frame per push each, with a count of those left out). The wanted subscriptions are derived from the route and
// the window; after any change, or after a reconnect, reconcile() sends what
// differs. Frames only record data and mark a part of the page dirty; the
// page is redrawn at most once per animation frame, writing only what
// changed.
//
// Data is only ever put in the page with textContent and attributes, never
// as HTML, and room names in URLs are encodeURIComponent'ed: a room can be
// called anything, "<script>" included.

import { addActs } from './acts.js';
import { authFetch } from './auth.js';
import { Chart, fmtSpan } from './chart.js';
import { el, setText } from './dom.js';
import { reconcile, startConnection, subKey } from './conn.js';
import { noteView, showPartial, startGroup } from './group.js';
import { isAction, setModerationRoom } from './moderation.js';
import { policyNamed, startPolicies } from './policies.js';
import { startRaids } from './raids.js';
import { Rows } from './rows.js';

const MAX_ALERTS = 50;
const ACTIVE_POLL_MS = 2000;
const STORE_WINDOW = 'chatpulse.window';

const $ = (id) => document.getElementById(id);

// ---- formatting ----

const intFmt = new Intl.NumberFormat();
const compactFmt = new Intl.NumberFormat(undefined, { notation: 'compact', maximumFractionDigits: 1 });
const clock = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit', hourCycle: 'h23' });
const fmtInt = (n) => intFmt.format(n);
const fmtCompact = (n) => (n < 10000 ? intFmt.format(n) : compactFmt.format(n));

// fmtRate writes msg/s with about three significant digits: 0.0044, 0.17,
// 10.4, 407.
function fmtRate(r) {
  if (!r) return '0';
  if (r < 0.1) return r.toLocaleString(undefined, { maximumSignificantDigits: 2 });
  const digits = r < 10 ? 2 : r < 100 ? 1 : 0;
  return r.toLocaleString(undefined, { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

function fmtAgo(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(s / 3600)}h ${String(Math.floor(s / 60) % 60).padStart(2, '0')}m`;
}

const plural = (n, one, many) => `${fmtInt(n)} ${n === 1 ? one : many}`;
const roomHref = (room) => `#/rooms/${encodeURIComponent(room)}`;

// ---- state ----

const state = {
  windows: [], // [{name, seconds, resolution_seconds}], the first is the default
  window: null, // the selected window's name
  route: { name: 'dashboard' },
  overview: new Map(), // window -> overview data
  rooms: null, // rooms view of the selected window
  room: new Map(), // window -> room view of the room in the route
  alerts: [], // newest first, at most MAX_ALERTS
  alertTotal: 0, // alerts since the page opened, shown or left out
  active: null, // the last /api/v1/throttle/active answer
  activeError: false,
  raids: new Set(), // rooms under a raid (raids.js)
};

const dirty = new Set();
let renderQueued = false;

function invalidate(...parts) {
  for (const p of parts) dirty.add(p);
  if (renderQueued) return;
  renderQueued = true;
  const run = () => {
    if (!renderQueued) return;
    renderQueued = false;
    render();
  };
  requestAnimationFrame(run);
  setTimeout(run, 250); // hidden tabs get no animation frames
}

const windowInfo = (name) => state.windows.find((w) => w.name === name);

// ---- the live views (conn.js keeps the websocket) ----

function wanted() {
  const want = new Map();
  const add = (m) => want.set(subKey(m.view, m.window, m.room), m);
  add({ view: 'alerts' });
  add({ view: 'acts' });
  for (const w of state.windows) add({ view: 'overview', window: w.name });
  if (state.route.name === 'dashboard' && state.window) add({ view: 'rooms', window: state.window });
  if (state.route.name === 'room') {
    for (const w of state.windows) add({ view: 'room', room: state.route.room, window: w.name });
  }
  return want;
}

function forget(m) {
  if (m.view === 'rooms' && state.rooms && state.rooms.window === m.window) state.rooms = null;
  if (m.view === 'room') state.room.delete(m.window);
}

async function getJSON(path, signal) {
  const resp = await authFetch(path, { cache: 'no-store', signal });
  if (!resp.ok) throw Object.assign(new Error(`${path}: ${resp.status}`), { status: resp.status });
  return resp.json();
}

// checkReady shows a note while chatpulse replays its stream after a start.
async function checkReady() {
  clearTimeout(checkReady.timer);
  let ready = true;
  try {
    const resp = await fetch('readyz', { cache: 'no-store' });
    ready = resp.ok;
  } catch {
    return; // the connection's own retry shows this
  }
  const note = $('notice');
  note.hidden = ready;
  if (!ready) {
    note.textContent = 'chatpulse is replaying its history: numbers are still filling in.';
    checkReady.timer = setTimeout(checkReady, 2000);
  }
}

// onFrame takes a frame; conn.js has dropped those of views unsubscribed
// since.
function onFrame(msg) {
  switch (msg.type) {
    case 'view': {
      if (msg.data && 'complete' in msg.data) startGroup(getJSON); // only a group member's views say it
      if (msg.view === 'overview') {
        state.overview.set(msg.window, msg.data);
        invalidate(msg.window === state.window ? 'overview' : 'strip');
      } else if (msg.view === 'rooms' && msg.window === state.window) {
        state.rooms = msg.data;
        invalidate('rooms');
      } else if (msg.view === 'room' && state.route.name === 'room' && msg.room === state.route.room) {
        state.room.set(msg.window, msg.data);
        invalidate('room');
      }
      break;
    }
    case 'alerts':
      // One frame per push, oldest first, with a count of those left out.
      for (const a of msg.data || []) addAlert(a);
      state.alertTotal += msg.omitted || 0;
      showAlertCount();
      if (visible.moderation) pollActive(); // show the new keys over their limits now
      break;
    case 'acts':
      addActs(msg); // acts.js
      break;
    case 'error':
      toast(msg.error);
      break;
  }
}

function toast(text) {
  const t = $('toast');
  t.textContent = text;
  t.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.hidden = true; }, 6000);
}

// ---- windows ----

function setWindows(list) {
  const names = list.map((w) => w.name);
  const same = names.join('\n') === state.windows.map((w) => w.name).join('\n');
  state.windows = list;
  for (const w of [...state.overview.keys()]) if (!names.includes(w)) state.overview.delete(w);
  let pick = state.window || localStorage.getItem(STORE_WINDOW);
  if (!names.includes(pick)) pick = names[0] || null;
  state.window = pick;
  if (!same) {
    const box = $('windows');
    box.replaceChildren(...list.map((w) => el('button', {
      type: 'button', class: 'win', text: w.name, data: { window: w.name },
      title: `last ${fmtSpan(w.seconds)}, ${fmtSpan(w.resolution_seconds)} buckets`,
    })));
    buildStrip($('talker-strip'));
    buildStrip($('room-strip'));
  }
  markWindow();
  invalidate('overview', 'rooms', 'room');
}

function selectWindow(name) {
  if (!windowInfo(name) || name === state.window) return;
  state.window = name;
  try { localStorage.setItem(STORE_WINDOW, name); } catch { /* private mode */ }
  state.rooms = null;
  markWindow();
  reconcile();
  invalidate('overview', 'rooms', 'room');
}

function markWindow() {
  for (const b of $('windows').children) b.setAttribute('aria-pressed', String(b.dataset.window === state.window));
  for (const strip of [$('talker-strip'), $('room-strip')]) {
    for (const li of strip.children) li.classList.toggle('current', li.dataset.window === state.window);
  }
}

$('windows').addEventListener('click', (e) => {
  const b = e.target.closest('button[data-window]');
  if (b) selectWindow(b.dataset.window);
});

function buildStrip(ol) {
  ol.replaceChildren(...state.windows.map((w) => el('li', { data: { window: w.name }, title: `last ${fmtSpan(w.seconds)}` },
    el('span', { class: 'w', text: w.name }),
    el('span', { class: 'who', text: '–' }),
    el('span', { class: 'n' }))));
}

for (const id of ['talker-strip', 'room-strip']) {
  $(id).addEventListener('click', (e) => {
    const li = e.target.closest('li[data-window]');
    if (li) selectWindow(li.dataset.window);
  });
}

// ---- routing ----

function parseRoute() {
  const m = /^#\/rooms\/(.+)$/.exec(location.hash);
  if (!m) return { name: 'dashboard' };
  let room = m[1];
  try { room = decodeURIComponent(room); } catch { /* keep it as typed */ }
  return { name: 'room', room };
}

let dashboardScroll = 0;

function onRoute() {
  const prev = state.route;
  const next = parseRoute();
  if (prev.name === next.name && prev.room === next.room) return;
  if (prev.name === 'dashboard') dashboardScroll = window.scrollY;
  state.route = next;
  if (next.name !== 'room' || prev.room !== next.room) clearRoom();
  $('dashboard').hidden = next.name !== 'dashboard';
  $('room-detail').hidden = next.name !== 'room';
  if (next.name === 'room') {
    $('room-title').textContent = next.room;
    document.title = `${next.room} · chatpulse`;
    window.scrollTo(0, 0);
  } else {
    document.title = 'chatpulse';
    requestAnimationFrame(() => window.scrollTo(0, dashboardScroll));
  }
  setModerationRoom(next.name === 'room' ? next.room : null);
  reconcile();
  updatePolling();
  invalidate('overview', 'rooms', 'room', 'raids');
}

window.addEventListener('hashchange', onRoute);

// clearRoom forgets the room detail's data and empties it, so that a room
// never shows, even for a moment, the numbers of the one before.
function clearRoom() {
  state.room.clear();
  roomTopUsers.clear();
  for (const id of ['room-messages', 'room-rate', 'room-users', 'room-joins', 'room-top-talker']) $(id).textContent = '–';
  for (const id of ['room-share', 'room-rate-sub', 'room-joins-sub', 'room-top-talker-count']) $(id).textContent = '\u00a0';
  if (roomChart) roomChart.set([], 1, 0);
}

// ---- rendering ----

function render() {
  const parts = new Set(dirty);
  dirty.clear();
  if (parts.has('overview') || parts.has('strip')) renderStrip();
  if (parts.has('overview')) renderOverview();
  if (state.route.name === 'dashboard') {
    if (parts.has('rooms')) renderRooms();
    if (parts.has('active')) renderActive();
  } else if (parts.has('room') || parts.has('overview')) {
    renderRoom();
  }
  if (parts.has('overview') || parts.has('rooms') || parts.has('room')) renderPartial();
  if (parts.has('raids')) renderRaids();
}

// renderPartial warns, next to the view on screen, when a group's view
// counted only some partitions (`complete: false`).
function renderPartial() {
  const missing = (...views) => {
    const partial = views.filter((v) => v && v.complete === false);
    return partial.length ? { n: Math.max(...partial.map((v) => v.missing_partitions || 0)) } : null;
  };
  const onScreen = state.route.name === 'dashboard'
    ? missing(state.overview.get(state.window), state.rooms)
    : missing(state.room.get(state.window));
  showPartial(state.route.name === 'dashboard' ? 'overview-partial' : 'room-partial', onScreen);
  noteView(onScreen ? onScreen.n : 0);
}

let overviewChart;
let roomChart;

// renderStrip shows each window's top talker.
function renderStrip() {
  for (const li of $('talker-strip').children) {
    const o = state.overview.get(li.dataset.window);
    const t = o && o.top_talker;
    setText(li.querySelector('.who'), t ? t.user : '–');
    setText(li.querySelector('.n'), t ? fmtCompact(t.messages) : '');
    li.title = t ? `${t.user}: ${fmtInt(t.messages)} messages in the last ${li.dataset.window}` : `nobody in the last ${li.dataset.window}`;
  }
}

function renderOverview() {
  const o = state.overview.get(state.window);
  const w = windowInfo(state.window);
  if (!o || !w) return;
  const span = `in the last ${w.name}`;
  setText($('messages'), fmtInt(o.messages));
  setText($('messages-sub'), span);
  setText($('rate'), fmtRate(o.rate));
  setText($('rate-sub'), `average over ${w.name}`);
  setText($('distinct-users'), fmtInt(o.distinct_users));
  setText($('active-rooms'), fmtInt(o.active_rooms));
  setText($('joins'), fmtInt(o.joins));
  setText($('joins-sub'), `${plural(o.leaves, 'leave', 'leaves')} ${span}`);
  const t = o.top_talker;
  setText($('top-talker'), t ? t.user : '–');
  $('top-talker').title = t ? t.user : '';
  setText($('top-talker-count'), t ? `${plural(t.messages, 'message', 'messages')} ${span}` : `nobody ${span}`);
  setText($('chart-caption'), `msg/s · last ${w.name} in ${fmtSpan(w.resolution_seconds)} buckets`);
  setText($('top-users-sub'), span);
  setText($('top-rooms-sub'), span);
  setText($('as-of'), `as of ${clock.format(new Date(o.as_of))}`);

  overviewChart ||= new Chart($('overview-chart'), { label: 'Messages' });
  overviewChart.set(o.series, w.resolution_seconds, Date.parse(o.as_of));

  const top = o.top_users[0] ? o.top_users[0].messages : 1;
  topUsers.update(o.top_users.map((u) => ({ ...u, top })));
  $('top-users-empty').hidden = o.top_users.length > 0;
  const topR = o.top_rooms[0] ? o.top_rooms[0].messages : 1;
  topRooms.update(o.top_rooms.map((r) => ({ ...r, top: topR })));
  $('top-rooms-empty').hidden = o.top_rooms.length > 0;
}

// Rows of a name (user or room, the key) with a bar behind it that shows
// its messages as a share of the first row's, and the count.
function barRows(tbody, name, link) {
  return new Rows(tbody, {
    key: (it) => it[name],
    columns: [
      {
        name,
        value: (it) => Math.round((1000 * it.messages) / Math.max(1, it.top)) / 10, // % of the first row
        init: (td) => td.append(el('span', { class: 'bar' }), el(link ? 'a' : 'span', { class: 'label' })),
        set: (td, v) => { td.firstChild.style.transform = `scaleX(${v / 100})`; },
        cls: 'bar-cell',
      },
      { name: 'messages', value: (it) => it.messages, set: (td, v) => { td.textContent = fmtInt(v); }, cls: 'num' },
    ],
    rowInit: (tr, k) => {
      tr.dataset[name] = k;
      const label = tr.firstChild.lastChild;
      label.textContent = k;
      label.title = k;
      if (link) label.href = roomHref(k);
    },
  });
}

const topUsers = barRows($('top-users').tBodies[0], 'user', false);
const topRooms = barRows($('top-rooms').tBodies[0], 'room', true);
const roomTopUsers = barRows($('room-top-users').tBodies[0], 'user', false);

// The rooms table.
const roomsRows = new Rows($('rooms-table').tBodies[0], {
  key: (r) => r.room,
  columns: [
    {
      name: 'room',
      value: (r) => r.room,
      init: (td) => td.append(el('a', { class: 'label' })),
      set: (td, v) => {
        const a = td.firstChild;
        a.textContent = v;
        a.title = v;
        a.href = roomHref(v);
      },
    },
    { name: 'messages', value: (r) => r.messages, set: (td, v) => { td.textContent = fmtInt(v); }, cls: 'num' },
    { name: 'rate', value: (r) => fmtRate(r.rate), cls: 'num hide-s' },
    { name: 'users', value: (r) => r.distinct_users, set: (td, v) => { td.textContent = fmtInt(v); }, cls: 'num hide-s' },
    {
      name: 'top-talker',
      value: (r) => (r.top_talker ? `${r.top_talker.user}\u0000${r.top_talker.messages}` : ''),
      init: (td) => td.append(el('span', { class: 'who' }), el('span', { class: 'n' })),
      set: (td, v) => {
        const [who, n] = v ? v.split('\u0000') : ['', ''];
        td.firstChild.textContent = who;
        td.firstChild.title = who;
        td.lastChild.textContent = n ? fmtInt(Number(n)) : '';
      },
      cls: 'talker-cell',
    },
  ],
  rowInit: (tr, k) => {
    tr.dataset.room = k;
    tr.hidden = !matchesFilter(k);
    // The rows are laid out as grids (see style.css): keep them a table to
    // assistive technology.
    tr.setAttribute('role', 'row');
    for (const td of tr.children) td.setAttribute('role', 'cell');
  },
});

let filter = '';
const matchesFilter = (room) => !filter || room.toLowerCase().includes(filter);

$('room-filter').addEventListener('input', (e) => {
  filter = e.target.value.trim().toLowerCase();
  for (const row of roomsRows) row.tr.hidden = !matchesFilter(row.key);
  renderRoomsCount();
});

function renderRooms() {
  const v = state.rooms;
  $('rooms').classList.toggle('loading', !v);
  if (!v) return;
  roomsRows.update(v.rooms);
  $('rooms-empty').hidden = v.rooms.length > 0;
  renderRoomsCount();
}

function renderRoomsCount() {
  const total = roomsRows.size;
  let shown = total;
  if (filter) {
    shown = 0;
    for (const row of roomsRows) if (!row.tr.hidden) shown++;
  }
  setText($('rooms-count'), filter ? `${fmtInt(shown)} of ${plural(total, 'room', 'rooms')}` : `${plural(total, 'room', 'rooms')} active in the last ${state.window}`);
}

// A click anywhere on a room row opens the room; the name is also a link.
for (const id of ['rooms-table', 'top-rooms']) {
  $(id).addEventListener('click', (e) => {
    if (e.target.closest('a')) return;
    const tr = e.target.closest('tr[data-room]');
    if (tr) location.hash = roomHref(tr.dataset.room);
  });
}

function renderRoom() {
  if (state.route.name !== 'room') return;
  const room = state.route.room;
  for (const li of $('room-strip').children) {
    const r = state.room.get(li.dataset.window);
    const t = r && r.top_talker;
    setText(li.querySelector('.who'), t ? t.user : '–');
    setText(li.querySelector('.n'), t ? fmtCompact(t.messages) : '');
    li.title = r ? `${plural(r.messages, 'message', 'messages')} here in the last ${li.dataset.window}` : '';
  }
  const r = state.room.get(state.window);
  const w = windowInfo(state.window);
  $('room-detail').classList.toggle('loading', !r);
  if (!r || !w || r.room !== room) return;
  const span = `in the last ${w.name}`;
  setText($('room-messages'), fmtInt(r.messages));
  const o = state.overview.get(state.window);
  setText($('room-share'), o && o.messages ? `${Math.round((100 * r.messages) / o.messages)}% of all ${span}` : span);
  setText($('room-rate'), fmtRate(r.rate));
  setText($('room-rate-sub'), `average over ${w.name}`);
  setText($('room-users'), fmtInt(r.distinct_users));
  setText($('room-joins'), fmtInt(r.joins));
  setText($('room-joins-sub'), `${plural(r.leaves, 'leave', 'leaves')} ${span}`);
  const t = r.top_talker;
  setText($('room-top-talker'), t ? t.user : '–');
  setText($('room-top-talker-count'), t ? `${plural(t.messages, 'message', 'messages')} ${span}` : `nobody ${span}`);
  setText($('room-chart-caption'), `msg/s · last ${w.name} in ${fmtSpan(w.resolution_seconds)} buckets`);
  setText($('room-top-users-sub'), span);
  roomChart ||= new Chart($('room-chart'), { label: 'Messages' });
  roomChart.set(r.series, w.resolution_seconds, Date.parse(r.as_of));
  const top = r.top_users[0] ? r.top_users[0].messages : 1;
  roomTopUsers.update(r.top_users.map((u) => ({ ...u, top })));
  $('room-top-users-empty').hidden = r.top_users.length > 0;
}

// ---- raids (docs/contract.md section 12) ----

// renderRaids marks the rooms under a raid: the room in view beside its
// title, and every one in the overview's joins card, each a link to it.
function renderRaids() {
  $('room-raid').hidden = !(state.route.name === 'room' && state.raids.has(state.route.room));
  const list = $('raids');
  list.replaceChildren(...[...state.raids].sort().map((room) =>
    el('li', {}, el('a', { href: roomHref(room), text: `raid: ${room}`, title: room, data: { testid: 'raid-room', room } }))));
  list.hidden = state.raids.size === 0;
}

startPolicies();
startRaids((rooms) => {
  state.raids = rooms;
  invalidate('raids');
});

// ---- moderation ----

function addAlert(a) {
  state.alerts.unshift(a);
  state.alertTotal += 1;
  const list = $('alerts');
  const when = new Date(a.at);
  const li = el('li', { class: 'alert new', data: { testid: 'alert', policy: a.policy, user: a.user, room: a.room } },
    el('time', { datetime: a.at, text: isNaN(when) ? '' : clock.format(when), title: isNaN(when) ? '' : when.toLocaleString() }),
    ...who(a.user, a.room, a.policy),
    el('span', { class: 'count', ...countOf(a) }));
  list.prepend(li);
  setTimeout(() => li.classList.remove('new'), 100);
  while (state.alerts.length > MAX_ALERTS) {
    state.alerts.pop();
    list.lastElementChild.remove();
  }
}

// countOf is the count of an alert or an active key, count/limit, and
// its title, which says why: a spike's ratio to the baseline's rate, what
// the message that crossed cost, how many accounts posted alike texts.
function countOf(a) {
  const text = `${fmtInt(a.count)}/${fmtInt(a.limit)}`;
  const p = policyNamed(a.policy);
  if (p && p.algorithm === 'similar') {
    const who = p.scope === 'user' ? 'earlier messages of this user' : 'accounts';
    return { text: `${text} alike`, title: `${a.count} ${who} posted texts alike (sharing ${p.similarity || 0.8} of their word pairs) within ${p.window}; limit ${a.limit}` };
  }
  const s = a.spike;
  if (a.cost) return { text: `${text} +${fmtInt(a.cost)}`, title: `${a.count} of the policy's cost held, limit ${a.limit}; the message that crossed cost ${a.cost}` };
  if (!s) return { text, title: `${a.count} messages, limit ${a.limit}` };
  const past = s.ratio
    ? `${s.ratio} times the ${s.expected} the baseline's rate expects (${s.baseline_messages} messages)`
    : 'none in the baseline';
  return { text: s.ratio ? `${text} \u00d7${s.ratio}` : text, title: `a spike: ${a.count} messages from ${s.users} users in the window, ${past}; over from ${a.limit}` };
}

// showAlertCount shows how many alerts came since the page opened, those
// the list shows and those it does not.
function showAlertCount() {
  if (!state.alertTotal) return;
  $('alerts-empty').hidden = true;
  const badge = $('alert-count');
  badge.hidden = false;
  badge.textContent = plural(state.alertTotal, 'alert', 'alerts');
  badge.title = state.alertTotal > state.alerts.length ? `the newest ${state.alerts.length} are listed` : '';
}

// who names a key the way alerts do: user in room, policy below.
function who(user, room, policy) {
  const where = room
    ? el('a', { class: 'room', href: roomHref(room), text: room, title: room })
    : el('span', { class: 'room any', text: 'all rooms' });
  return [
    el('span', { class: 'what' },
      el('span', { class: 'user', text: user || '(group)', title: user }),
      el('span', { class: 'in', text: ' in ' }),
      where),
    el('span', { class: 'policy', text: policy }),
  ];
}

const activeRows = new Rows($('active').tBodies[0], {
  key: (a) => `${a.policy}\u0000${a.room}\u0000${a.user}`,
  columns: [
    {
      name: 'who',
      value: (a) => a.user,
      init: (td, a) => td.append(...who(a.user, a.room, a.policy)),
      set: () => {},
      cls: 'who-cell',
    },
    {
      name: 'count',
      value: (a) => countOf(a).text,
      set: (td, v, a) => { td.textContent = v; td.title = countOf(a).title; },
      cls: 'num count',
    },
    { name: 'for', value: (a) => fmtAgo(a.age), cls: 'num for' },
  ],
  rowInit: (tr, k, a) => {
    tr.dataset.user = a.user;
    tr.dataset.room = a.room;
    tr.dataset.policy = a.policy;
  },
});

function renderActive() {
  const v = state.active;
  $('active-note').textContent = state.activeError ? '(not reachable)' : '';
  $('active').classList.toggle('stale', state.activeError);
  if (!v) return;
  const now = Date.parse(v.as_of);
  const over = v.active.filter((a) => !isAction(a)); // the actions have their own list (moderation.js)
  activeRows.update(over.map((a) => ({ ...a, age: now - Date.parse(a.since) })));
  $('active-empty').hidden = over.length > 0;
}

let activeTimer = 0;
let activeInFlight = null;
const visible = { moderation: false };

async function pollActive() {
  if (activeInFlight) return;
  activeInFlight = new AbortController();
  const t = setTimeout(() => activeInFlight && activeInFlight.abort(), 5000);
  try {
    state.active = await getJSON('api/v1/throttle/active', activeInFlight.signal);
    state.activeError = false;
  } catch {
    state.activeError = true;
  } finally {
    clearTimeout(t);
    activeInFlight = null;
  }
  invalidate('active');
}

// The active list is polled only while the moderation panel is on screen.
function updatePolling() {
  const want = visible.moderation && document.visibilityState === 'visible' && state.route.name === 'dashboard';
  if (want && !activeTimer) {
    pollActive();
    activeTimer = setInterval(pollActive, ACTIVE_POLL_MS);
  } else if (!want && activeTimer) {
    clearInterval(activeTimer);
    activeTimer = 0;
  }
}

new IntersectionObserver((entries) => {
  for (const e of entries) visible.moderation = e.isIntersecting;
  updatePolling();
}).observe($('moderation'));
document.addEventListener('visibilitychange', updatePolling);

// ---- theme: automatic (the system's), dark or light ----

const THEMES = ['auto', 'dark', 'light'];
const STORE_THEME = 'chatpulse.theme';

function applyTheme(theme) {
  if (theme === 'auto') delete document.documentElement.dataset.theme;
  else document.documentElement.dataset.theme = theme;
  const label = `Theme: ${theme === 'auto' ? 'automatic' : theme}`;
  $('theme').title = label;
  $('theme').setAttribute('aria-label', label);
  for (const c of [overviewChart, roomChart]) if (c) c.draw();
}

$('theme').addEventListener('click', () => {
  const cur = document.documentElement.dataset.theme || 'auto';
  const next = THEMES[(THEMES.indexOf(cur) + 1) % THEMES.length];
  try { localStorage.setItem(STORE_THEME, next); } catch { /* private mode */ }
  applyTheme(next);
});

// ---- start ----

try { applyTheme(THEMES.includes(localStorage.getItem(STORE_THEME)) ? localStorage.getItem(STORE_THEME) : 'auto'); } catch { applyTheme('auto'); }

onRoute();
startConnection({
  prepare: () => getJSON('api/v1/windows'),
  prepared: (windows) => {
    setWindows(windows.windows || []);
    checkReady();
  },
  wanted,
  forget,
  opened: () => {
    if (visible.moderation) pollActive(); // it may have failed while we were away
  },
  onFrame,
});
