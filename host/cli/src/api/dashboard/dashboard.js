// The boxcar dashboard: a page over the HTTP API of the same origin.
//
// Rules kept here:
// - Data from the API (payloads, logs, errors, names) is only ever put into
//   the page as text (textContent, createElement), never as markup.
// - The API token, when the server asks for one (401), is kept in this tab's
//   sessionStorage and sent as `Authorization: Bearer`; never in a URL.
// - The view is named by the URL's fragment (#overview, #jobs?status=…,
//   #job/ID, #handlers) and re-read from the API every POLL_MS.
'use strict';

const POLL_MS = 1500;
const PAGE_SIZE = 50;
const BULK_COUNT_CAP = 1000;
const TOKEN_KEY = 'boxcar-token';
const STATUSES = ['pending', 'running', 'succeeded', 'failed', 'cancelled'];

const $ = (id) => document.getElementById(id);

class Unauthorized extends Error {}

// ---- the API -------------------------------------------------------------

function headers(extra) {
  const all = Object.assign({}, extra);
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) all.Authorization = 'Bearer ' + token;
  return all;
}

async function answer(path, response) {
  if (response.status === 401) throw new Unauthorized(path);
  const text = await response.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch (_) { body = text; }
  if (!response.ok) {
    const message = body && body.message ? body.message : String(text);
    throw new Error(path + ': ' + response.status + ' ' + message);
  }
  return body;
}

async function get(path) {
  return answer(path, await fetch(path, { headers: headers(), cache: 'no-store' }));
}

async function post(path, body) {
  const response = await fetch(path, {
    method: 'POST',
    headers: headers({ 'Content-Type': 'application/json' }),
    body: JSON.stringify(body || {}),
  });
  return answer(path, response);
}

// ---- building the page from data (text only) -----------------------------

function el(tag, props, children) {
  const node = document.createElement(tag);
  if (props) {
    for (const [key, value] of Object.entries(props)) {
      if (value === undefined || value === null) continue;
      if (key === 'text') node.textContent = String(value);
      else if (key === 'className') node.className = value;
      else node.setAttribute(key, String(value));
    }
  }
  for (const child of children || []) {
    node.append(child instanceof Node ? child : document.createTextNode(String(child ?? '')));
  }
  return node;
}

function row(cells) {
  return el('tr', null, cells.map((cell) => (cell instanceof Node && cell.tagName === 'TD') ? cell : el('td', null, [cell ?? ''])));
}

function fill(tbody, rows, emptyNote) {
  tbody.replaceChildren(...rows);
  if (emptyNote) emptyNote.hidden = rows.length > 0;
}

function number(value) {
  return el('td', { className: 'number', text: value ?? '' });
}

function statusText(status) {
  return el('span', { className: 'status status-' + status, text: status });
}

function jobLink(id) {
  return el('a', { href: '#job/' + encodeURIComponent(id), className: 'job-link' }, [el('code', { text: id })]);
}

function scopeText(scope) {
  return scope ? scope.type + ':' + scope.id : '';
}

function pretty(value) {
  return value === null || value === undefined ? '' : JSON.stringify(value, null, 2);
}

function bytes(n) {
  if (n === null || n === undefined) return '';
  if (n < 1024) return n + ' B';
  if (n < 1024 * 1024) return (n / 1024).toFixed(1) + ' KiB';
  return (n / 1024 / 1024).toFixed(1) + ' MiB';
}

function shortDigest(digest) {
  return digest ? digest.slice(0, 12) : '';
}

// ---- routing ---------------------------------------------------------------

function route() {
  const hash = location.hash.replace(/^#/, '');
  if (hash.startsWith('job/')) return { view: 'job', id: decodeURIComponent(hash.slice(4)) };
  const [name, query] = hash.split('?');
  const params = new URLSearchParams(query || '');
  if (name === 'jobs') {
    return {
      view: 'jobs',
      status: params.get('status') || '',
      type: params.get('type') || '',
      after: params.get('after') || '',
    };
  }
  if (name === 'handlers') return { view: 'handlers' };
  return { view: 'overview' };
}

// The jobs list pages by cursor: `after` is the `cursor` of the last job of
// the page before. The cursors of the pages before the shown one are kept
// (for Previous) while the filter stays the same.
function jobsHash(status, type, after) {
  const params = new URLSearchParams();
  if (status) params.set('status', status);
  if (type) params.set('type', type);
  if (after) params.set('after', after);
  const query = params.toString();
  return '#jobs' + (query ? '?' + query : '');
}

function show(view) {
  for (const section of document.querySelectorAll('.view')) {
    section.hidden = section.id !== 'view-' + view;
  }
  for (const name of ['overview', 'jobs', 'handlers']) {
    $('nav-' + name).classList.toggle('current', name === view || (name === 'jobs' && view === 'job'));
  }
}

// ---- the views ---------------------------------------------------------------

async function renderOverview() {
  const [counts, types] = await Promise.all([get('/counts'), get('/counts/types')]);
  $('counts').replaceChildren(...STATUSES.map((status) =>
    el('a', { className: 'count status-' + status, id: 'count-' + status, href: jobsHash(status, '', '') }, [
      el('b', { text: counts[status] ?? 0 }), status,
    ])));
  fill($('types').tBodies[0], types.map((t) => row([
    el('a', { href: jobsHash('', t.job_type, ''), text: t.job_type }),
    number(t.due), number(t.scheduled), number(t.running),
  ])), $('types-empty'));
  const pools = counts.pools || [];
  fill($('pools').tBodies[0], pools.map((p) => row([
    p.name, number(p.occupied), number(p.concurrency), number(p.rate_per_minute),
    number(p.budget_left), p.window_resets_at,
  ])), $('pools-empty'));
}

let lastFilterShown = null;
let pagesBefore = [];
let nextCursor = '';

async function renderJobs(r) {
  const shown = r.status + '\u0000' + r.type;
  if (lastFilterShown !== shown) {
    $('filter-status').value = r.status;
    $('filter-type').value = r.type;
    lastFilterShown = shown;
    pagesBefore = [];
  }
  if (!r.after) pagesBefore = [];
  const params = new URLSearchParams({ limit: String(PAGE_SIZE) });
  if (r.after) params.set('after', r.after);
  if (r.status) params.set('status', r.status);
  if (r.type) params.set('type', r.type);
  const jobs = await get('/jobs?' + params.toString());
  fill($('jobs').tBodies[0], jobs.map((j) => {
    const tr = row([
      jobLink(j.id), j.job_type, statusText(j.status), j.attempts + '/' + j.max_attempts,
      scopeText(j.scope), j.last_error || '', j.created_at, j.updated_at,
    ]);
    tr.dataset.id = j.id;
    tr.dataset.status = j.status;
    tr.dataset.type = j.job_type;
    return tr;
  }), $('jobs-empty'));
  nextCursor = jobs.length === PAGE_SIZE ? jobs[jobs.length - 1].cursor : '';
  const first = pagesBefore.length * PAGE_SIZE;
  $('page-prev').disabled = !r.after;
  $('page-next').disabled = !nextCursor;
  $('page-info').textContent = jobs.length
    ? (r.after && !pagesBefore.length ? 'rows after the cursor: ' + jobs.length : 'rows ' + (first + 1) + '–' + (first + jobs.length))
    : '';
}

async function renderHandlers() {
  const handlers = await get('/handlers');
  fill($('deployed').tBodies[0], handlers.deployed.map((h) => {
    const grants = [];
    if (h.may_enqueue && h.may_enqueue.length) grants.push('enqueue: ' + h.may_enqueue.join(', '));
    if (h.http && h.http.length) grants.push('http: ' + h.http.join(', '));
    for (const d of h.dirs || []) grants.push('dir: ' + (d.host ?? '') + ' → ' + (d.guest ?? '') + (d.writable ? ' (rw)' : ''));
    if (h.scratch !== null && h.scratch !== undefined) grants.push('scratch: ' + bytes(h.scratch));
    if (h.env && h.env.length) grants.push('env: ' + h.env.join(', '));
    const tr = row([
      h.name, h.job_types.join(', '), el('code', { text: shortDigest(h.digest), title: h.digest }),
      h.deployed_at, number(h.concurrency), number(h.timeout_ms + ' ms'),
      el('td', null, grants.length ? grants.map((g) => el('div', { text: g })) : [el('span', { className: 'muted', text: 'none' })]),
    ]);
    tr.dataset.name = h.name;
    return tr;
  }), $('deployed-empty'));
  fill($('rejected').tBodies[0], handlers.rejected.map((r) => row([r.name, r.at, el('td', { className: 'error', text: r.reason })])), $('rejected-empty'));
  fill($('events').tBodies[0], handlers.events.map((e) => row([
    e.at, e.kind, e.job_type || '', e.file || '', el('code', { text: shortDigest(e.digest), title: e.digest }), e.reason || '',
  ])));
}

let detailShown = null;

async function renderJob(r) {
  const id = r.id;
  if (detailShown !== id) {
    detailShown = id;
    $('job-payload').hidden = true;
    $('job-payload').textContent = '';
    $('payload-show').hidden = false;
    $('job-notice').hidden = true;
    $('retry-panel').hidden = true;
  }
  const enc = encodeURIComponent(id);
  const [job, attempts, logs, children] = await Promise.all([
    get('/jobs/' + enc), get('/jobs/' + enc + '/attempts'), allLogs(enc),
    get('/jobs?' + new URLSearchParams({ parent: id, limit: '100' }).toString()),
  ]);
  if (detailShown !== id) return;
  $('job-id').textContent = job.id;
  $('job-status').replaceChildren(statusText(job.status));
  $('job-cancel').hidden = !(job.status === 'pending' || job.status === 'running');
  $('job-retry').hidden = job.status !== 'failed';
  $('replay').hidden = job.status !== 'failed';
  $('replay-command').textContent = 'boxcar replay ' + job.id;
  fill($('children').tBodies[0], children.map((c) => row([
    jobLink(c.id), c.job_type, statusText(c.status), c.attempts + '/' + c.max_attempts, c.last_error || '',
  ])), $('children-empty'));
  const fields = [
    ['type', job.job_type], ['status', job.status], ['attempts', job.attempts + ' of ' + job.max_attempts],
    ['scope', scopeText(job.scope)], ['priority', job.priority], ['dedupe key', job.dedupe_key],
    ['parent', job.parent_id ? jobLink(job.parent_id) : null], ['schedule', job.schedule_id],
    ['handler version', job.handler_version], ['blocked by', job.blocked_by],
    ['progress', job.progress === null || job.progress === undefined ? null : JSON.stringify(job.progress)],
    ['run at', job.run_at], ['started', job.started_at], ['finished', job.finished_at],
    ['expires', job.expires_at], ['created', job.created_at], ['updated', job.updated_at],
    ['traceparent', job.traceparent],
  ].filter(([, value]) => value !== null && value !== undefined && value !== '');
  fill($('job-fields').tBodies[0], fields.map(([name, value]) => el('tr', null, [el('th', { text: name }), el('td', null, [value])])));
  $('job-result').textContent = job.result === null || job.result === undefined ? '(none)' : pretty(job.result);
  const error = [];
  if (job.error_code) error.push('code: ' + job.error_code);
  if (job.last_error) error.push(job.last_error);
  if (job.error_details !== null && job.error_details !== undefined) error.push('details: ' + pretty(job.error_details));
  $('job-error').textContent = error.length ? error.join('\n') : '(none)';
  fill($('attempts').tBodies[0], attempts.map((a) => {
    const tr = row([
      number(a.attempt), a.outcome, a.worker || '', el('code', { text: shortDigest(a.digest), title: a.digest }),
      a.started_at || '', number(a.wall_ms), number(bytes(a.peak_memory_bytes)), number(a.fuel),
      [a.error_code, a.error].filter(Boolean).join(': '),
    ]);
    tr.className = 'attempt';
    return tr;
  }));
  const byAttempt = new Map();
  for (const line of logs) {
    if (!byAttempt.has(line.attempt)) byAttempt.set(line.attempt, []);
    byAttempt.get(line.attempt).push(line);
  }
  const blocks = [...byAttempt.entries()].sort((a, b) => a[0] - b[0]).map(([attempt, lines]) =>
    el('div', { className: 'logs-attempt', 'data-attempt': attempt }, [
      el('h4', { text: 'attempt ' + attempt }),
      ...lines.map((l) => el('div', { className: 'log-line log-' + l.level }, [l.at + ' ' + l.level.toUpperCase() + ' ' + l.message])),
    ]));
  $('logs').replaceChildren(...(blocks.length ? blocks : [el('p', { className: 'muted', text: 'No log lines stored.' })]));
}

async function allLogs(enc) {
  const lines = [];
  let after = null;
  for (let page = 0; page < 10; page++) {
    const query = after === null ? '' : '?after=' + after;
    const batch = await get('/jobs/' + enc + '/logs' + query);
    lines.push(...batch);
    if (batch.length < 1000) break;
    after = batch[batch.length - 1].cursor;
  }
  return lines;
}

// ---- actions -----------------------------------------------------------------

function notice(id, text) {
  $(id).textContent = text;
  $(id).hidden = false;
}

// How many failed jobs of the given types there are (capped).
async function failedCount(types) {
  const params = new URLSearchParams({ status: 'failed', limit: String(BULK_COUNT_CAP) });
  if (types.length) params.set('type', types.join(','));
  const jobs = await get('/jobs?' + params.toString());
  return jobs.length >= BULK_COUNT_CAP ? BULK_COUNT_CAP + ' or more' : String(jobs.length);
}

function describeTypes(types) {
  return types.length ? ' of type ' + types.join(', ') : ' of every type';
}

let pendingBulk = null;

async function askBulkRetry(types, panel, question) {
  const count = await failedCount(types);
  pendingBulk = types;
  $(question).textContent = 'Retry ' + count + ' failed job' + (count === '1' ? '' : 's') + describeTypes(types) + '?';
  $(panel).hidden = false;
}

async function doBulkRetry(panel, result) {
  const types = pendingBulk || [];
  pendingBulk = null;
  $(panel).hidden = true;
  const answer = await post('/jobs/retry-failed', { types });
  notice(result, 'Retried ' + answer.retried + ' job' + (answer.retried === 1 ? '' : 's') + '.');
  await refresh();
}

function currentTypes() {
  const type = $('filter-type').value.trim();
  return type ? type.split(',').map((t) => t.trim()).filter(Boolean) : [];
}

function guarded(action) {
  return async (event) => {
    if (event) event.preventDefault();
    try {
      await action();
      showError(null);
    } catch (error) {
      handleError(error);
    }
  };
}

function wire() {
  $('filters').addEventListener('submit', (event) => {
    event.preventDefault();
    location.hash = jobsHash($('filter-status').value, $('filter-type').value.trim(), '');
  });
  $('filter-status').addEventListener('change', () => {
    location.hash = jobsHash($('filter-status').value, $('filter-type').value.trim(), '');
  });
  $('page-prev').addEventListener('click', () => {
    const r = route();
    location.hash = jobsHash(r.status, r.type, pagesBefore.pop() || '');
  });
  $('page-next').addEventListener('click', () => {
    const r = route();
    if (!nextCursor) return;
    pagesBefore.push(r.after);
    location.hash = jobsHash(r.status, r.type, nextCursor);
  });
  $('bulk-retry').addEventListener('click', guarded(async () => {
    $('bulk-result').hidden = true;
    await askBulkRetry(currentTypes(), 'bulk', 'bulk-question');
  }));
  $('bulk-confirm').addEventListener('click', guarded(() => doBulkRetry('bulk', 'bulk-result')));
  $('bulk-cancel').addEventListener('click', () => { pendingBulk = null; $('bulk').hidden = true; });
  $('job-retry').addEventListener('click', guarded(async () => {
    const job = await get('/jobs/' + encodeURIComponent(route().id));
    $('retry-question').textContent = 'Retry this job? It gets ' + job.max_attempts + ' more attempt' + (job.max_attempts === 1 ? '' : 's') + '; other failed jobs of type ' + job.job_type + ' stay failed.';
    $('retry-panel').hidden = false;
  }));
  $('retry-confirm').addEventListener('click', guarded(async () => {
    $('retry-panel').hidden = true;
    const answer = await post('/jobs/' + encodeURIComponent(route().id) + '/retry', {});
    notice('job-notice', answer.retried ? 'Retried.' : 'The job was no longer failed.');
    await refresh();
  }));
  $('retry-dismiss').addEventListener('click', () => { $('retry-panel').hidden = true; });
  $('job-cancel').addEventListener('click', guarded(async () => {
    const r = route();
    const answer = await post('/jobs/' + encodeURIComponent(r.id) + '/cancel', { reason: 'cancelled from the dashboard' });
    notice('job-notice', answer.cancelled ? 'Cancel requested.' : 'The job had already finished.');
    await refresh();
  }));
  $('payload-show').addEventListener('click', guarded(async () => {
    const r = route();
    const payload = await get('/jobs/' + encodeURIComponent(r.id) + '/payload');
    $('job-payload').textContent = pretty(payload);
    $('job-payload').hidden = false;
    $('payload-show').hidden = true;
  }));
  $('auth-form').addEventListener('submit', (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $('token').value);
    $('token').value = '';
    refresh();
    knownTypes();
  });
  window.addEventListener('hashchange', () => {
    pendingBulk = null;
    $('bulk').hidden = true;
    $('bulk-result').hidden = true;
    refresh();
  });
}

// ---- the loop ------------------------------------------------------------------

function showError(message) {
  $('error').hidden = !message;
  $('error').textContent = message || '';
}

function handleError(error) {
  if (error instanceof Unauthorized) {
    const had = sessionStorage.getItem(TOKEN_KEY);
    $('auth').hidden = false;
    $('auth-error').textContent = had ? 'The server refused the token: enter the right one.' : '';
    document.querySelector('main').hidden = true;
    showError(null);
    return;
  }
  showError(String(error.message || error));
}

let refreshing = false;
let refreshAgain = false;

async function refresh() {
  if (refreshing) {
    refreshAgain = true;
    return;
  }
  refreshing = true;
  const r = route();
  show(r.view);
  try {
    if (r.view === 'overview') await renderOverview();
    else if (r.view === 'jobs') await renderJobs(r);
    else if (r.view === 'job') await renderJob(r);
    else if (r.view === 'handlers') await renderHandlers();
    $('auth').hidden = true;
    document.querySelector('main').hidden = false;
    showError(null);
    $('updated').textContent = 'updated ' + new Date().toLocaleTimeString();
  } catch (error) {
    handleError(error);
  } finally {
    refreshing = false;
  }
  if (refreshAgain) {
    refreshAgain = false;
    await refresh();
  }
}

async function knownTypes() {
  try {
    const handlers = await get('/handlers');
    $('known-types').replaceChildren(...handlers.types.map((t) => el('option', { value: t })));
  } catch (_) {
    // The list only helps typing; the views report errors themselves.
  }
}

wire();
refresh();
knownTypes();
setInterval(refresh, POLL_MS);
