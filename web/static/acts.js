// Acts on the chat system (docs/contract.md section 14), in the
// overview's moderation panel.
//
// With --act, chatpulse mutes, redacts and locks on the homeserver as the
// policies say, and undoes each mute and lock when due. Each act and undo
// comes over the websocket as chatpulse publishes it (the `acts` feed: one
// frame per push). The list shows them newest first: what was done, to
// whom, where, the policy that asked for it, and until when. A skipped act
// says why nothing was done. In shadow mode each says what would have been
// done.
//
// GET /api/v1/act adds the mode, the rooms where the bot lacks a power,
// the queue and the undos due. A chatpulse without --act answers it 404,
// and the browser logs every 404 it loads as an error. So the page asks
// only once it knows chatpulse acts: an act came, or a policy in force
// names one. From then on it asks every few seconds while the page is
// visible, and at once after each frame of acts (at most once a push). A
// 404 stops that again. A 401 never asks for the token: it waits for one.
//
// Names go into the page only as text (dom.js).

import { authFetch, TOKEN_EVENT } from './auth.js';
import { el, setText } from './dom.js';

const POLL_MS = 3000;
const MAX_ACTS = 50;

const $ = (id) => document.getElementById(id);
const clock = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit', hourCycle: 'h23' });

const acting = {
  on: false, // chatpulse acts, as far as the page knows: the status is polled
  status: null, // the last GET /api/v1/act answer
  error: '', // why the last poll failed, or ''
  total: 0, // acts since the page opened, listed or left out
  timer: 0,
  inFlight: false,
};

// What a kind did, and the verb for what it would have done or did not do.
const DID = { mute: 'muted', unmute: 'unmuted', redact: 'redacted a message of', lock: 'locked', unlock: 'unlocked' };
const DO = { mute: 'mute', unmute: 'unmute', redact: 'redact a message of', lock: 'lock', unlock: 'unlock' };

// Why an act was skipped.
const WHY = {
  moderator: 'a moderator of the room',
  bot: 'the bot itself',
  exempt: 'exempt from the policy',
  unchanged: 'nothing to change',
  no_power: 'the bot lacks the power here',
  failed: 'failed',
};

// What a power the bot lacks is for.
const POWER = {
  redact: 'redact',
  'm.room.power_levels': 'mute (m.room.power_levels)',
  'm.room.join_rules': 'lock (m.room.join_rules)',
  member: 'not in the room',
};

const roomLink = (room) => el('a', { class: 'room', href: `#/rooms/${encodeURIComponent(room)}`, text: room, title: room });

function fmtClock(iso) {
  const d = new Date(iso);
  return isNaN(d) ? '' : clock.format(d);
}

function why(a) {
  if (a.skipped === 'unchanged' && (a.kind === 'unmute' || a.kind === 'unlock')) return 'changed since by someone else: left as it is';
  if (a.skipped === 'failed') return a.error ? `failed: ${a.error}` : 'failed';
  return WHY[a.skipped] || a.skipped;
}

// entry is the list's item of an act: when, what to whom where, the
// policy, and until when (or why it was skipped).
function entry(a) {
  const verb = a.skipped ? `did not ${DO[a.kind] || a.kind}` : `${a.shadow ? 'would have ' : ''}${DID[a.kind] || a.kind}`;
  const whom = a.user ? [el('span', { class: 'user', text: a.user, title: a.user }), el('span', { class: 'in', text: ' in ' })] : [];
  const what = el('span', { class: 'what' }, el('span', { class: 'verb', text: `${verb} ` }), ...whom, roomLink(a.room));
  what.title = what.textContent;
  let end = el('span', { class: 'end' });
  if (a.skipped) {
    end = el('span', { class: 'end why', text: why(a), title: why(a) });
  } else if (a.until) {
    end = el('time', { class: 'end until', datetime: a.until, text: `until ${fmtClock(a.until)}`, title: new Date(a.until).toLocaleString() });
  }
  const cls = ['alert', 'acted', 'new', a.shadow && 'shadow', a.skipped && 'skipped'].filter(Boolean).join(' ');
  return el('li', { class: cls, data: { testid: 'acted', kind: a.kind, room: a.room, user: a.user || '', policy: a.policy, shadow: String(!!a.shadow), skipped: a.skipped || '' } },
    el('time', { datetime: a.at, text: fmtClock(a.at), title: new Date(a.at).toLocaleString() }),
    what,
    el('span', { class: 'policy', text: a.policy }),
    end);
}

// addActs takes a frame of the acts feed: the acts since the last push,
// oldest first, and a count of those left out.
export function addActs(msg) {
  const list = $('acts');
  for (const a of msg.data || []) {
    const li = entry(a);
    list.prepend(li);
    setTimeout(() => li.classList.remove('new'), 100);
  }
  while (list.childElementCount > MAX_ACTS) list.lastElementChild.remove();
  acting.total += (msg.data || []).length + (msg.omitted || 0);
  start(); // what the acts changed: the undos due, the rooms without power
  render();
}

function render() {
  const s = acting.status;
  $('acting').hidden = !s && acting.total === 0;
  $('acting-shadow').hidden = !(s && s.mode === 'shadow');
  $('acts-empty').hidden = acting.total > 0;

  const notes = [];
  const listed = $('acts').childElementCount;
  if (acting.total > listed) notes.push(`the newest ${listed} of ${acting.total}`);
  if (s) {
    if (s.pending.length) notes.push(`${s.pending.length} ${s.pending.length === 1 ? 'undo' : 'undos'} due`);
    if (s.queue) notes.push(`${s.queue} waiting`);
    if (s.dropped) notes.push(`${s.dropped} dropped`);
  }
  if (acting.error) notes.push(`(${acting.error})`);
  setText($('acting-note'), notes.join(' · '));

  const lacking = s ? s.rooms.filter((r) => !r.can_act) : [];
  $('no-power').replaceChildren(...lacking.map((r) =>
    el('li', { data: { testid: 'no-power-room', room: r.room } },
      roomLink(r.room),
      el('span', { class: 'missing', text: ` cannot ${r.missing.map((m) => POWER[m] || m).join(', ')}` }))));
  $('no-power-box').hidden = lacking.length === 0;
}

// start polls the status, now and from then on.
function start() {
  acting.on = true;
  schedule(0);
}

function schedule(delay = POLL_MS) {
  clearTimeout(acting.timer);
  acting.timer = 0;
  if (!acting.on || document.visibilityState !== 'visible') return;
  acting.timer = setTimeout(poll, delay);
}

async function getJSON(path, signal) {
  const resp = await authFetch(path, { cache: 'no-store', signal }, { ask: false });
  if (!resp.ok) throw Object.assign(new Error(`${path}: ${resp.status}`), { status: resp.status });
  return resp.json();
}

async function poll() {
  if (acting.inFlight) return;
  acting.inFlight = true;
  const abort = new AbortController();
  const t = setTimeout(() => abort.abort(), 5000);
  try {
    acting.status = await getJSON('api/v1/act', abort.signal);
    acting.error = '';
  } catch (e) {
    if (e.status === 404 || e.status === 401) {
      acting.on = false; // no --act (after a restart, say); or wait for the token
      acting.status = null;
    }
    acting.error = e.status === 404 ? '' : e.status === 401 ? 'needs the token' : 'not reachable';
  } finally {
    clearTimeout(t);
    acting.inFlight = false;
  }
  render();
  schedule();
}

// look asks the policies in force whether one acts: then chatpulse may
// well act, and the status is worth asking for before the first act.
async function look() {
  try {
    const policies = await getJSON('api/v1/throttle/policies');
    if (policies.policies.some((p) => p.act && p.act.length)) start();
  } catch {
    // Not reachable, or not allowed yet: the first act starts the polls.
  }
}

document.addEventListener('visibilitychange', () => schedule(0));
window.addEventListener(TOKEN_EVENT, () => (acting.status || acting.error ? start() : look()));

look();
