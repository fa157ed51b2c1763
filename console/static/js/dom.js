// Building DOM safely: every string becomes a text node or an attribute value, never HTML.

export function h(tag, props, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(props || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === 'class') element.className = value;
    else if (name === 'text') element.textContent = String(value);
    else if (name === 'dataset') Object.assign(element.dataset, value);
    else if (name.startsWith('on') && typeof value === 'function') element.addEventListener(name.slice(2), value);
    else if (['value', 'checked', 'disabled', 'selected', 'hidden', 'open'].includes(name)) element[name] = value;
    else element.setAttribute(name, value === true ? '' : String(value));
  }
  append(element, children);
  return element;
}

export function append(parent, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    parent.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return parent;
}

export function clear(element) {
  element.replaceChildren();
  return element;
}

export function replace(element, ...children) {
  element.replaceChildren();
  return append(element, children);
}

const pad = (n) => String(n).padStart(2, '0');

// The browser's zone as people read it ("UTC", "GMT+1", "CET"): every time shown says which zone it is in.
function zoneOf(d) {
  const part = new Intl.DateTimeFormat(undefined, { timeZoneName: 'short' }).formatToParts(d)
    .find((p) => p.type === 'timeZoneName');
  return part ? part.value : 'local time';
}

// ISO 8601 UTC from the API, shown in the browser's time zone, with the zone: 2026-11-22 10:15:00 GMT+1.
export function when(iso) {
  if (!iso) return '—';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())} ${zoneOf(d)}`;
}

export function timeOnly(iso) {
  return iso ? when(iso).slice(11) : '—';
}

// How far a due date is, in words: "in 3 h", "2 d ago".
export function fromNow(iso) {
  const ms = new Date(iso).getTime() - Date.now();
  const minutes = Math.round(Math.abs(ms) / 60000);
  const text = minutes < 60 ? `${minutes} min` : minutes < 48 * 60 ? `${Math.round(minutes / 60)} h` : `${Math.round(minutes / 1440)} d`;
  return ms >= 0 ? `in ${text}` : `${text} ago`;
}

export function plural(n, one, many = `${one}s`) {
  return `${n} ${n === 1 ? one : many}`;
}

export function humanize(word) {
  const text = String(word).replace(/[_-]+/g, ' ').trim();
  return text.charAt(0).toUpperCase() + text.slice(1);
}
