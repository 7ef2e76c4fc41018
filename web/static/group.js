// The group panel: who shares the work of a group (docs/group.md), and
// whether the views count every partition.
//
// A standalone chatpulse answers GET /api/v1/group with 404, and the
// browser logs every 404 it loads as an error. So the page asks only once
// it knows it talks to a group member: a member's views carry `complete`,
// a standalone instance's never do. From then on the panel is fetched
// every few seconds, and at once when a view comes back incomplete; a 404
// (the instance was restarted standalone) hides it again.
//
// A view that says `complete: false` counted only some partitions: its
// numbers are too low. showPartial puts that warning next to the view, and
// noteView tells the panel.

import { Rows } from './rows.js';

const POLL_MS = 3000;
const SOON_MS = 1000; // the fastest an incomplete view makes the panel refresh

const $ = (id) => document.getElementById(id);
const intFmt = new Intl.NumberFormat();
const fmtInt = (n) => intFmt.format(n);

const group = {
  on: false, // this is a group member: the panel is polled
  status: null, // the last GET /api/v1/group answer
  error: false, // the last poll failed
  viewMissing: 0, // partitions the shown views go without
  timer: 0,
  inFlight: false,
  last: 0, // when the last poll started
  getJSON: null, // (path, signal) => the answer, with the page's token
};

// startGroup polls the panel once a view showed that this is a member.
export function startGroup(getJSON) {
  if (group.on) return;
  group.on = true;
  group.getJSON = getJSON;
  render();
  poll();
}

// noteView records how many partitions the views on screen go without;
// a change makes the panel refresh soon, to say why.
export function noteView(missing) {
  if (missing === group.viewMissing) return;
  group.viewMissing = missing;
  render();
  if (missing > 0 && group.on) schedule(Math.max(0, group.last + SOON_MS - Date.now()));
}

function schedule(delay = POLL_MS) {
  clearTimeout(group.timer);
  group.timer = 0;
  if (!group.on || document.visibilityState !== 'visible') return;
  group.timer = setTimeout(poll, delay);
}

document.addEventListener('visibilitychange', () => schedule(0));

async function poll() {
  if (group.inFlight) return;
  group.inFlight = true;
  group.last = Date.now();
  const abort = new AbortController();
  const t = setTimeout(() => abort.abort(), 5000);
  try {
    group.status = await group.getJSON('api/v1/group', abort.signal);
    group.error = false;
  } catch (e) {
    if (e.status === 404) {
      // Standalone after all: no panel, no more polls.
      group.on = false;
      group.status = null;
    }
    group.error = true;
  } finally {
    clearTimeout(t);
    group.inFlight = false;
  }
  render();
  schedule();
}

// ranges writes sorted partition numbers compactly: 0-3, 6, 9-10.
function ranges(ps) {
  const out = [];
  for (let i = 0; i < ps.length; i++) {
    let j = i;
    while (j + 1 < ps.length && ps[j + 1] === ps[j] + 1) j++;
    out.push(j === i ? String(ps[i]) : `${ps[i]}-${ps[j]}`);
    i = j;
  }
  return out.join(', ');
}

// unowned lists the partitions no live member owns.
function unowned(st) {
  const owned = new Set(st.members.flatMap((m) => m.partitions || []));
  const out = [];
  for (let p = 0; p < st.partitions; p++) if (!owned.has(p)) out.push(p);
  return out;
}

const memberRows = new Rows($('group-members').tBodies[0], {
  key: (m) => m.instance,
  columns: [
    {
      name: 'instance',
      value: (m) => `${m.instance}\u0000${m.self}`,
      init: (td) => td.append(document.createElement('span'), document.createElement('span')),
      set: (td, v, m) => {
        td.firstChild.textContent = m.instance;
        td.firstChild.title = m.http;
        td.lastChild.className = 'self';
        td.lastChild.textContent = m.self ? 'this instance' : '';
      },
    },
    { name: 'owns', value: (m) => fmtInt(m.owns), cls: 'num' },
    { name: 'partitions', value: (m) => ranges(m.partitions || []), set: (td, v) => { td.textContent = v; td.title = v; }, cls: 'parts' },
    { name: 'lag', value: (m) => fmtInt(m.lag), cls: 'num' },
  ],
  rowInit: (tr, k) => { tr.dataset.instance = k; },
});

function render() {
  const card = $('group');
  const st = group.status;
  card.hidden = !group.on || !st;
  $('dashboard').classList.toggle('grouped', group.on); // room for the panel and the warning
  if (card.hidden) return;
  card.classList.toggle('stale', group.error);
  const members = st.members.map((m) => ({ ...m, self: m.instance === st.instance }));
  const self = members.find((m) => m.self);
  const plural = (n, one, many) => `${fmtInt(n)} ${n === 1 ? one : many}`;
  $('group-name').textContent = st.group;
  $('group-sub').textContent = [
    self ? `this instance: ${self.instance}` : '',
    plural(members.length, 'member', 'members'),
    plural(st.partitions, 'partition', 'partitions'),
    group.error ? 'not reachable' : '',
  ].filter(Boolean).join(' · ');
  memberRows.update(members);

  // Complete only if the group says every partition has a caught-up owner
  // and the views on screen agree: a member that died still looks alive to
  // the group until its lease runs out, but it no longer answers.
  const missing = unowned(st);
  let warning = '';
  if (!st.complete) {
    if (missing.length) {
      warning = `Views are partial: ${plural(missing.length, 'partition has', 'partitions have')} no owner (${ranges(missing)}).`;
    } else if (st.filer_ready === false) {
      warning = "Views are behind: the chat system's events are still being filed for the partitions.";
    } else {
      warning = 'Views are partial: partitions taken over are still being replayed.';
    }
  } else if (group.viewMissing > 0) {
    warning = `Views are partial: ${plural(group.viewMissing, 'partition did', 'partitions did')} not answer (a member is unreachable).`;
  }
  const complete = !warning;
  card.dataset.complete = String(complete);
  const badge = $('group-coverage');
  badge.textContent = complete ? 'complete' : 'incomplete';
  badge.title = complete ? 'every partition has a caught-up owner' : warning;
  const note = $('group-warning');
  note.hidden = complete;
  note.textContent = warning;
}

// showPartial shows, in the element with id, that the view on screen
// counted only some partitions ({n}: how many it went without), or, for
// null, hides the warning.
export function showPartial(id, partial) {
  const note = $(id);
  note.hidden = !partial;
  if (!partial) return;
  const of = group.status ? ` of ${fmtInt(group.status.partitions)}` : '';
  const what = partial.n > 0 ? `${fmtInt(partial.n)}${of} partitions are` : 'some partitions are';
  note.textContent = `Partial numbers: ${what} missing from this view (a member is down or taking over); the counts are too low until they are back.`;
}
