// agents.js: "Start an agent on a task" (#/agent), and what the list and a sandbox's page show
// of an agent sandbox (docs/dashboard.md, "Agents"). The launch is one create with an `agent`
// field (docs/api.md); the credential is the caller's saved secret (GET /v1/secrets: names
// only, PUT /v1/secrets/NAME: write-only), never shown back.
import { api, seg } from './api.js';
import { envEditor, field, h, rerender, visible, when } from './dom.js';

// The server's table (daemon/core/agents.c): the variables that carry each agent's credential
// (any one of them) and the hosts its sandbox may reach without asking.
export const AGENTS = {
  claude: { env: ['ANTHROPIC_API_KEY', 'CLAUDE_CODE_OAUTH_TOKEN'], hosts: ['api.anthropic.com'] },
  codex: { env: ['OPENAI_API_KEY'], hosts: ['api.openai.com'] },
  gemini: { env: ['GEMINI_API_KEY', 'GOOGLE_API_KEY'],
    hosts: ['generativelanguage.googleapis.com'] },
  opencode: { env: ['ANTHROPIC_API_KEY', 'OPENAI_API_KEY', 'GEMINI_API_KEY'],
    hosts: ['api.anthropic.com', 'api.openai.com', 'generativelanguage.googleapis.com',
      'models.dev'] },
};
const TASK_MAX = 32 * 1024;
const SHORT = 72; // a task on a card: this many characters, the rest on hover

// What app.js lends this module (set once by useShell): app, toast, submitting, page, label,
// launchBlocked, capsText, fillImages.
let shell = null;
export function useShell(s) {
  shell = s;
}

// ---- what an agent sandbox shows ----

// "running", "exited 3", "failed", "starting", "cloning"
export function agentStateText(a) {
  if (a.state === 'exited') return a.exit_code === null || a.exit_code === undefined
    ? 'exited' : `exited ${a.exit_code}`;
  return a.state || 'unknown';
}

function agentBadge(a) {
  return h('span', { class: `state state-${a.state} agent-state`,
    title: a.state === 'failed' && a.message ? visible(a.message) : false },
  agentStateText(a));
}

// The task in one line of at most SHORT characters, control characters escaped.
export function shortTask(task) {
  const one = visible(task);
  return one.length > SHORT ? `${one.slice(0, SHORT - 1)}…` : one;
}

// The facts (dt/dd pairs) a card shows of an agent sandbox; [] for any other.
export function agentCardFacts(sb) {
  const a = sb.agent;
  if (!a) return [];
  return [
    h('dt', {}, 'agent'), h('dd', { class: 'agent' }, a.name, ' ', agentBadge(a)),
    h('dt', {}, 'task'), a.task
      ? h('dd', { class: 'task', title: visible(a.task) }, shortTask(a.task))
      : h('dd', { class: 'task hint' }, 'none: interactive'),
    a.state === 'failed' && a.message
      ? [h('dt', {}, 'why'), h('dd', { class: 'error' }, a.message)] : null,
  ];
}

// A sandbox's page: the agent's panel, filled by renderAgentPanel (hidden for other sandboxes).
export function agentPanel() {
  return h('section', { class: 'panel agent-panel', hidden: true, 'aria-label': 'Agent' });
}

export function renderAgentPanel(panel, sb) {
  const a = sb?.agent;
  panel.hidden = !a;
  if (!a) return;
  // the whole task, its lines kept, each line's control characters escaped
  const task = h('div', { class: 'task-full' });
  task.textContent = String(a.task || '').split('\n').map(visible).join('\n');
  rerender(panel, h('h2', {}, 'Agent ', a.name, ' ', agentBadge(a)),
    h('dl', { class: 'facts' },
      h('dt', {}, 'task'), a.task ? h('dd', {}, task) : h('dd', { class: 'hint' },
        'none: the agent runs interactively in its terminal'),
      a.repo ? [h('dt', {}, 'repository'), h('dd', { class: 'mono' }, a.repo)] : null,
      a.pid !== null && a.pid !== undefined
        ? [h('dt', {}, 'process'), h('dd', {}, `${a.pid}, in the terminal below`)] : null,
      a.message ? [h('dt', {}, a.state === 'failed' ? 'why' : 'note'),
        h('dd', { class: a.state === 'failed' ? 'error' : '' }, a.message)] : null));
}

// The pid of sb's agent process, or null.
export function agentPid(sb) {
  const pid = sb?.agent?.pid;
  return pid === null || pid === undefined ? null : pid;
}

// Whether process p (GET …/processes) is sb's agent: its pid and its program (a boot after a
// stop numbers its processes anew, and the agent does not run again then).
export function isAgentProcess(sb, p) {
  return agentPid(sb) === p.pid && String(p.argv?.[0] ?? '').split('/').pop() === sb.agent.name;
}

// ---- #/agent: start an agent on a task ----

export function agentPage() {
  const { app, toast, submitting, page, label, launchBlocked, capsText, fillImages } = shell;
  const error = h('p', { class: 'error', role: 'alert', hidden: true, id: 'agent-error' });
  const why = h('p', { class: 'blocked', id: 'agent-why' });
  const which = h('select', { id: 'a-agent', name: 'agent', 'aria-describedby': 'a-agent-hint' },
    Object.keys(AGENTS).map((n) => h('option', { value: n }, n)));
  const task = h('textarea', { id: 'a-task', name: 'task', rows: 6, maxlength: TASK_MAX,
    spellcheck: 'true', 'aria-describedby': 'a-task-hint',
    placeholder: 'fix the failing test in tests/test_parser.py' });
  const repo = h('input', { id: 'a-repo', name: 'repo', type: 'url', maxlength: 2048,
    pattern: 'https?://.+', autocomplete: 'off', spellcheck: 'false',
    placeholder: 'https://github.com/you/project.git', 'aria-describedby': 'a-repo-hint' });
  const agentHint = h('small', { id: 'a-agent-hint' });

  // the credential: the agent's variables, set or not (names only), and a write-only input
  const secretList = h('ul', { class: 'secrets', id: 'a-secrets', 'aria-live': 'polite' });
  const secretName = h('select', { id: 'a-secret-name' });
  const secretValue = h('input', { id: 'a-secret-value', type: 'password',
    autocomplete: 'new-password', spellcheck: 'false', 'aria-describedby': 'a-secret-hint' });
  const secretError = h('p', { class: 'error', role: 'alert', hidden: true });
  const secretSave = h('button', { type: 'button', id: 'a-secret-save' }, 'Save');
  let secrets = null; // name -> updated_at, once GET /v1/secrets answered
  let secretsError = null;

  // the rest, folded: name, image, memory, more hosts, more environment
  const name = h('input', { id: 'a-name', pattern: '[a-z0-9][a-z0-9\\-]{0,62}', maxlength: 63,
    autocomplete: 'off', 'aria-describedby': 'a-name-hint' });
  const image = h('select', { id: 'a-image' }, h('option', { value: '' }, 'the server default'));
  const memory = h('input', { id: 'a-memory', type: 'number', min: 64, step: 1,
    inputmode: 'numeric', placeholder: 'the server default', 'aria-describedby': 'a-memory-hint' });
  const noNet = (app.caps?.network || { ceiling: 'none' }).ceiling === 'none';
  const allow = h('textarea', { id: 'a-allow', rows: 2, spellcheck: 'false',
    placeholder: 'pypi.org\n*.github.com', 'aria-describedby': 'a-allow-hint' });
  const envForm = envEditor('a');

  const submit = h('button', { type: 'submit', class: 'primary', id: 'a-launch',
    'aria-describedby': 'agent-why' }, 'Launch');
  const form = h('form', { class: 'panel launch agent-form' },
    field('a-agent', 'Agent', which, null), agentHint,
    field('a-task', 'Task (optional)', task, 'What the agent should do: it runs on it in its ' +
      'headless mode and exits when done. Empty: the agent starts interactively in its ' +
      'terminal.'),
    field('a-repo', 'Repository (optional)', repo, 'An https:// or http:// git URL, cloned ' +
      'into /sandbox/home/work where the agent starts; its host is allowed for the clone.'),
    h('fieldset', { class: 'credential' }, h('legend', {}, 'Credential'),
      h('p', { class: 'hint', id: 'a-secret-hint' }, 'Kept on the server as your secret, ' +
        'for your agent sandboxes only: write-only, never shown again, never logged. Saving ' +
        'again replaces it.'),
      secretList,
      h('div', { class: 'secret-row' },
        h('div', { class: 'field' }, h('label', { for: 'a-secret-name' }, 'Variable'),
          secretName),
        h('div', { class: 'field' }, h('label', { for: 'a-secret-value' }, 'Value'),
          secretValue),
        secretSave),
      secretError),
    h('details', { class: 'more' }, h('summary', {}, 'More options'),
      field('a-name', 'Name (optional)', name,
        'lowercase letters, digits and -, up to 63; unique among your sandboxes'),
      h('div', { class: 'row3' }, field('a-image', 'Image', image, null),
        field('a-memory', 'Memory (MiB)', memory, 'empty: the server default')),
      field('a-allow', 'More hosts to allow', allow, noNet
        ? 'This server gives sandboxes no network (its ceiling is "none"): an agent cannot ' +
          'reach its API here.'
        : 'The agent\'s own API hosts are always allowed; add others, one per line or ' +
          'separated by commas.'),
      h('fieldset', {}, h('legend', {}, 'More environment'),
        h('p', { class: 'hint' }, 'Variables for this sandbox only, never shown again.'),
        envForm.rows, envForm.button)),
    error, why, submit);

  function agent() {
    return AGENTS[which.value] ? which.value : 'claude';
  }

  // Which of the agent's variables holds a credential now: a saved secret or one given in
  // More environment; null when none.
  function credential() {
    const env = envForm.values();
    return AGENTS[agent()].env.find((n) => (secrets && secrets.has(n)) || env[n]) || null;
  }

  function renderSecrets() {
    const names = AGENTS[agent()].env;
    rerender(agentHint, `${agent()} needs ${names.length > 1 ? 'one of ' : ''}` +
      `${names.join(', ')}; its sandbox may reach ${AGENTS[agent()].hosts.join(', ')}.`);
    const keep = secretName.value;
    rerender(secretName, names.map((n) => h('option', { value: n, selected: n === keep }, n)));
    if (secretsError) {
      rerender(secretList, h('li', { class: 'error' },
        `Saved credentials cannot be listed: ${secretsError.message}`));
      return;
    }
    rerender(secretList, names.map((n) => {
      const at = secrets?.get(n);
      const set = secrets ? secrets.has(n) : null;
      return h('li', { 'data-name': n },
        h('code', {}, n), ' ',
        h('span', { class: `secret-state ${set ? 'set' : 'unset'}` },
          set === null ? 'checking…' : set ? 'set' : 'not set'),
        set && at ? h('span', { class: 'hint' }, ` · saved ${when(at)}`) : null,
        set ? [' ', h('button', { type: 'button', class: 'quiet', 'data-key': `forget-${n}`,
          'aria-label': `Forget ${n}`, onclick: () => forget(n) }, 'Forget')] : null);
    }));
  }

  async function loadSecrets() {
    try {
      const r = await api('GET', '/v1/secrets');
      secrets = new Map(r.secrets.map((s) => [s.name, s.updated_at]));
      secretsError = null;
    } catch (e) {
      if (e.status === 401) return;
      secrets = null;
      secretsError = e;
    }
    renderSecrets();
    update();
  }

  async function save() {
    const n = secretName.value;
    if (!secretValue.value) {
      secretError.textContent = `Type the value of ${n} first.`;
      secretError.hidden = false;
      secretValue.focus();
      return;
    }
    await submitting(secretSave, secretError, 'Saving…', async () => {
      await api('PUT', `/v1/secrets/${seg(n)}`, { value: secretValue.value });
      secretValue.value = ''; // sent once, never kept in the page
      toast(`Saved ${n}.`);
      error.hidden = true; // a launch refused for want of it may go now
      await loadSecrets();
    });
  }

  async function forget(n) {
    try {
      await api('DELETE', `/v1/secrets/${seg(n)}`);
      toast(`Forgot ${n}.`);
    } catch (e) {
      toast(`Forget ${n}: ${e.message}`, 'error');
    }
    await loadSecrets();
  }

  secretSave.addEventListener('click', save);
  // Enter in the value saves it (and does not launch)
  secretValue.addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter') {
      ev.preventDefault();
      save();
    }
  });
  which.addEventListener('change', () => {
    renderSecrets();
    update();
  });

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    if (blockedWhy()) return;
    const a = agent();
    if (secrets && !credential()) {
      const names = AGENTS[a].env;
      error.textContent = `${a} needs ${names.length > 1 ? 'one of ' : ''}` +
        `${names.join(', ')}: save it under Credential first.`;
      error.hidden = false;
      secretValue.focus();
      return;
    }
    const body = { agent: { name: a } };
    if (task.value.trim()) body.agent.task = task.value;
    if (repo.value.trim()) body.agent.repo = repo.value.trim();
    if (name.value.trim()) body.name = name.value.trim();
    if (image.value) body.image = image.value;
    if (memory.value !== '') body.memory_mb = Number(memory.value);
    const hosts = allow.value.split(/[\s,]+/).map((s) => s.trim()).filter(Boolean);
    if (hosts.length) body.network = { mode: 'allowlist', allow: hosts };
    const env = envForm.values();
    if (Object.keys(env).length) body.env = env;
    // the answer comes once the agent started (or failed to): its terminal is there then
    await submitting(submit, error, `Starting ${a}…`, async () => {
      const sb = await api('POST', '/v1/sandboxes', body);
      app.sandboxes.set(sb.id, sb);
      if (sb.agent?.state === 'failed')
        toast(`${a} did not start: ${sb.agent.message || 'no reason given'}`, 'error');
      else toast(`Started ${a} in ${label(sb)}.`);
      app.focusAgent = sb.id; // its page opens with the agent's terminal focused
      location.hash = `#/sandbox/${seg(sb.id)}`;
    });
  });

  const el = page('Start an agent', h('h1', {}, 'Start an agent on a task'), form);
  // GET /v1/capabilities: false where the backend runs no processes
  const noAgents = app.caps?.capabilities?.agents === false
    ? 'This server cannot start agents: its sandboxes run no processes.' : null;
  function blockedWhy() {
    return launchBlocked() || noAgents;
  }
  function update() {
    const blocked = blockedWhy();
    why.textContent = blocked || capsText();
    why.classList.toggle('error', !!blocked);
    if (submit.textContent === 'Launch') submit.disabled = !!blocked;
  }
  renderSecrets();
  update();
  loadSecrets();
  fillImages(image, 'sandbox-base'); // the agents' own image when the server has it
  return { el, update, mounted: () => which.focus() };
}
