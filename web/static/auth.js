// The token of a chatpulse started with --auth-token.
//
// The page asks for it once, when the API first answers 401, and keeps it
// in sessionStorage: for this tab while it is open, reloads included, never
// in other tabs and never after the tab closes. API requests carry it as
// `Authorization: Bearer <token>`. A browser's WebSocket cannot set that
// header, so the websocket offers two subprotocols instead: `chatpulse`,
// which the server picks, and `chatpulse.bearer.<the token in unpadded
// base64url>`, which it reads and never echoes (a token in the URL would
// end up in access logs).

const KEY = 'chatpulse.token';

const token = () => sessionStorage.getItem(KEY) || '';

// authFetch is fetch with the token. On 401 it forgets the token it sent,
// asks for one and tries again; it throws an error with status 401 if the
// user cancels. With ask false it never asks: a 401 is returned, for a
// request made in the background that must not pop a prompt up (it can
// listen for TOKEN_EVENT instead).
export async function authFetch(path, opts = {}, { ask: asks = true } = {}) {
  for (;;) {
    const sent = token();
    const headers = new Headers(opts.headers);
    if (sent) headers.set('Authorization', `Bearer ${sent}`);
    const resp = await fetch(path, { ...opts, headers });
    if (resp.status !== 401 || !asks) return resp;
    if (token() === sent) {
      // Not answered meanwhile by a prompt for another request.
      sessionStorage.removeItem(KEY);
      await ask(sent ? 'That token was refused. Token:' : 'This chatpulse needs a token:');
    }
  }
}

// wsProtocols are the subprotocols the dashboard's websocket offers.
export function wsProtocols() {
  const t = token();
  if (!t) return ['chatpulse'];
  const b64 = btoa(t).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
  return ['chatpulse', `chatpulse.bearer.${b64}`];
}

// TOKEN_EVENT is dispatched on window when the prompt has stored a token.
export const TOKEN_EVENT = 'chatpulse-token';

let asking = null; // the open prompt: requests refused together share it

// ask shows the token prompt and resolves once a token is stored; it
// rejects if the user cancels.
function ask(message) {
  asking ??= new Promise((resolve, reject) => {
    const dialog = document.createElement('dialog');
    dialog.className = 'token-prompt';
    dialog.dataset.testid = 'token-prompt';
    const form = document.createElement('form');
    const label = document.createElement('label');
    label.textContent = message;
    const input = document.createElement('input');
    input.type = 'password';
    input.name = 'token';
    input.required = true;
    input.autocomplete = 'off';
    input.spellcheck = false;
    const button = document.createElement('button');
    button.type = 'submit';
    button.textContent = 'Open';
    label.append(input);
    form.append(label, button);
    dialog.append(form);
    const done = (ok) => {
      asking = null;
      dialog.remove();
      if (ok) resolve();
      else reject(Object.assign(new Error('no token'), { status: 401 }));
    };
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      sessionStorage.setItem(KEY, input.value.trim());
      done(true);
      window.dispatchEvent(new Event(TOKEN_EVENT));
    });
    dialog.addEventListener('cancel', () => done(false));
    document.body.append(dialog);
    dialog.showModal();
  });
  return asking;
}
