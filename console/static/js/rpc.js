// The JSON-RPC client: every call goes to /v1/rpc with the API key kept in sessionStorage.
const KEY_NAME = 'baton.apiKey';
let nextId = 1;

export class RpcError extends Error {
  constructor(error) {
    super(error.message || 'The call failed.');
    this.code = error.code;
    this.data = error.data || {};
    this.reason = this.data.reason;
  }
}

export function storedKey() {
  return sessionStorage.getItem(KEY_NAME);
}

export function storeKey(key) {
  sessionStorage.setItem(KEY_NAME, key);
}

export function forgetKey() {
  sessionStorage.removeItem(KEY_NAME);
}

async function post(body, key) {
  let response;
  try {
    response = await fetch('/v1/rpc', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'X-API-Key': key || '' },
      body: JSON.stringify(body),
      credentials: 'omit',
      cache: 'no-store',
    });
  } catch (err) {
    throw new RpcError({ message: 'The server cannot be reached.', data: { reason: 'network' } });
  }
  let answer = null;
  try {
    answer = await response.json();
  } catch (err) {
    throw new RpcError({ message: `The server answered HTTP ${response.status} without JSON.`, data: { reason: 'http' } });
  }
  if (response.status === 401) {
    const error = new RpcError((answer && answer.error) || { message: 'The API key was refused.', data: { reason: 'unauthorized' } });
    window.dispatchEvent(new CustomEvent('baton:unauthorized', { detail: error }));
    throw error;
  }
  return answer;
}

// Several calls in one HTTP request; answers come back in the order of `calls`, each
// {result} or {error: RpcError}. At most 100 per batch (the server's limit).
export async function batch(calls, key = storedKey()) {
  if (calls.length === 0) return [];
  if (calls.length > 100) {
    const head = await batch(calls.slice(0, 100), key);
    return head.concat(await batch(calls.slice(100), key));
  }
  const requests = calls.map(([method, params]) => ({ jsonrpc: '2.0', id: nextId++, method, params: params || {} }));
  const answer = await post(requests.length === 1 ? requests[0] : requests, key);
  const answers = Array.isArray(answer) ? answer : [answer];
  const byId = new Map(answers.map((item) => [item.id, item]));
  return requests.map((request) => {
    const item = byId.get(request.id) || answers.find((a) => a.id === null);
    if (!item) return { error: new RpcError({ message: 'No answer for this call.', data: { reason: 'internal' } }) };
    return item.error ? { error: new RpcError(item.error) } : { result: item.result };
  });
}

export async function call(method, params = {}, key = storedKey()) {
  const [answer] = await batch([[method, params]], key);
  if (answer.error) throw answer.error;
  return answer.result;
}
