// Rooms under a raid (docs/contract.md section 12): a room is under a
// raid while a join_wave policy's key for it is active, that is listed by
// GET /api/v1/throttle/active. That list names policies, not algorithms,
// so the policies in force (GET /api/v1/throttle/policies) say which are
// join waves. Both are polled every few seconds while the page is
// visible, in the background: a 401 never asks for the token (the views'
// requests do), it waits for one to be given.
//
// onRaids hears the set of rooms under a raid each time it changes. Room
// names are anything printable: the caller shows them only as text.

import { authFetch, TOKEN_EVENT } from './auth.js';

const POLL_MS = 3000;

let rooms = new Set();
let timer = 0;
let inFlight = false;

async function getJSON(path) {
  const resp = await authFetch(path, { cache: 'no-store' }, { ask: false });
  if (!resp.ok) throw new Error(`${path}: ${resp.status}`);
  return resp.json();
}

// raided lists the rooms of active keys of join_wave policies.
function raided(policies, active) {
  const waves = new Set(policies.policies.filter((p) => p.algorithm === 'join_wave').map((p) => p.name));
  return new Set(active.active.filter((a) => waves.has(a.policy) && a.room).map((a) => a.room));
}

const same = (a, b) => a.size === b.size && [...a].every((x) => b.has(x));

export function startRaids(onRaids) {
  const poll = async () => {
    if (inFlight) return;
    inFlight = true;
    try {
      const [policies, active] = await Promise.all([getJSON('api/v1/throttle/policies'), getJSON('api/v1/throttle/active')]);
      const next = raided(policies, active);
      if (!same(next, rooms)) {
        rooms = next;
        onRaids(rooms);
      }
    } catch {
      // Not reachable, or not allowed yet: the marks stay as they were.
    } finally {
      inFlight = false;
    }
  };
  const update = () => {
    const want = document.visibilityState === 'visible';
    if (want && !timer) {
      poll();
      timer = setInterval(poll, POLL_MS);
    } else if (!want && timer) {
      clearInterval(timer);
      timer = 0;
    }
  };
  document.addEventListener('visibilitychange', update);
  window.addEventListener(TOKEN_EVENT, poll);
  update();
}
