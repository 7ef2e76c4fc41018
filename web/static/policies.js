// The policies in force, by name, from GET /api/v1/throttle/policies: what
// an alert or an active key cannot say itself, such as that a policy
// counts accounts that posted alike texts (algorithm similar). Asked once
// at start, and again when an alert or key names a policy not known (a
// reload), at most every ten seconds.

import { authFetch } from './auth.js';

const known = new Map();
let asked = 0;
// policyNamed is the policy called name, or undefined while not known;
// asking names it makes the page ask again, once a while.
export function policyNamed(name) {
  const p = known.get(name);
  if (!p) refresh();
  return p;
}

// startPolicies asks for the policies, before the first alert comes.
export function startPolicies() {
  refresh();
}

async function refresh() {
  if (Date.now() - asked < 10_000) return;
  asked = Date.now();
  try {
    const resp = await authFetch('api/v1/throttle/policies', { cache: 'no-store' }, { ask: false });
    if (!resp.ok) return;
    const body = await resp.json();
    known.clear();
    for (const p of body.policies || []) known.set(p.name, p);
  } catch {
    // Not reachable now: asked again with the next unknown name.
  }
}
