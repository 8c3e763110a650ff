// dom.js: building the page without innerHTML: every string given here becomes text, never
// markup, so names, reasons and messages from the API cannot inject anything; and its control
// characters are shown escaped (visible), so a name a guest chose cannot hide or fake text.

// h('button', {class: 'x', onclick: fn, disabled: true}, 'Stop') -> <button class="x" disabled>
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === false || v === null || v === undefined) continue;
    if (k === 'class') el.className = v;
    else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'value') el.value = v;
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, String(v));
  }
  add(el, children);
  return el;
}

// s with its control characters (C0, DEL, C1) made visible: \n, \r, \t, the others \xNN;
// everything else as it is. A file name or a DNS name from a sandbox can hold a newline
// or an escape sequence: as text they would vanish or break a line, and hide what was there.
export function visible(s) {
  return String(s).replace(/[\u0000-\u001f\u007f-\u009f]/g, (c) => {
    if (c === '\n') return '\\n';
    if (c === '\r') return '\\r';
    if (c === '\t') return '\\t';
    return `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}`;
  });
}

function add(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : visible(c));
  }
}

// Replaces container's children and keeps the keyboard focus on the element with the same
// data-key, so live updates do not throw a keyboard user out of the page.
export function rerender(container, ...children) {
  const active = document.activeElement;
  const key = active && container.contains(active) ? active.dataset.key : undefined;
  container.replaceChildren();
  add(container, children);
  if (key) {
    const again = container.querySelector(`[data-key="${CSS.escape(key)}"]`);
    if (again && !again.disabled) again.focus();
  }
}

// A form's field: its label, the input, and a hint (its id ID-hint, for aria-describedby).
export function field(id, text, input, hint) {
  return h('div', { class: 'field' },
    h('label', { for: id }, text), input, hint ? h('small', { id: `${id}-hint` }, hint) : null);
}

// A launch form's environment: rows of a NAME and a value typed as a password (ids
// PREFIX-env-name-N and PREFIX-env-value-N), each with its Remove. rows and button (adds a
// row and focuses it) go in the form; values() is {NAME: value} for each row with a name.
export function envEditor(prefix) {
  const rows = h('div', { class: 'env-rows' });
  let count = 0;
  function add() {
    const i = count++;
    const row = h('div', { class: 'env-row' },
      h('label', { for: `${prefix}-env-name-${i}`, class: 'sr-only' }, 'Variable name'),
      h('input', { id: `${prefix}-env-name-${i}`, class: 'env-name mono', placeholder: 'NAME',
        pattern: '[A-Za-z_][A-Za-z0-9_]*', autocomplete: 'off', spellcheck: 'false' }),
      h('label', { for: `${prefix}-env-value-${i}`, class: 'sr-only' }, 'Value'),
      h('input', { id: `${prefix}-env-value-${i}`, class: 'env-value', type: 'password',
        placeholder: 'value', autocomplete: 'new-password' }),
      h('button', { type: 'button', class: 'quiet', 'aria-label': 'Remove this variable',
        onclick: () => row.remove() }, 'Remove'));
    rows.append(row);
    return row;
  }
  function values() {
    const env = {};
    for (const row of rows.querySelectorAll('.env-row')) {
      const k = row.querySelector('.env-name').value.trim();
      if (k) env[k] = row.querySelector('.env-value').value;
    }
    return env;
  }
  const button = h('button', { type: 'button', class: 'quiet', onclick: () =>
    add().querySelector('input').focus() }, 'Add a variable');
  return { rows, button, values };
}

export function mib(n) {
  if (n === null || n === undefined) return 'unknown';
  return n >= 1024 && n % 1024 === 0 ? `${n / 1024} GiB` : `${n} MiB`;
}

export function when(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  return isNaN(d) ? iso : d.toLocaleString();
}

export function plural(n, one, many) {
  return `${n} ${n === 1 ? one : many}`;
}
