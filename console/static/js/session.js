// Who is signed in: the key's description from auth.whoami, and which methods it may call.
let me = null;

export function signedIn(description) {
  me = description;
}

export function signedOut() {
  me = null;
}

export function current() {
  return me;
}

export function can(method) {
  return Boolean(me && me.methods.includes(method));
}
