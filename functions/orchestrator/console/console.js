// lambda-swarm console: lists conversations and approvals, and draws one conversation's turns and subtasks live (docs/console.md).
//
// Every string that came from a customer, the model or a tool is set with textContent (el() below), never
// parsed as markup; the page's Content-Security-Policy also forbids inline script.
'use strict';

/** How often follow() reads the conversation once its event stream ended and it is not settled yet (ms). */
const POLL_MS = 500;
/** How often the lists (conversations, approvals waiting) are read again (ms). */
const LISTS_MS = 2000;
/** A turn in one of these has ended; nothing more happens to it unless a person decides. */
const TURN_ENDED = new Set(['DONE', 'FAILED', 'HANDOFF']);
/** Approvals in these still lead to a change (a decision, a run, a turn telling it). */
const APPROVAL_OPEN = new Set(['pending', 'approved']);
/** Node size and gaps of the subtask graph (px). */
const NODE = { w: 230, h: 158, gapX: 56, gapY: 14 };

const keys = { customer: 'swarm.customer', customerToken: 'swarm.customerToken', operatorToken: 'swarm.operatorToken' };

/** The credentials typed into the page (sessionStorage: this tab only, gone when it closes). */
function credentials() {
  return {
    customer: sessionStorage.getItem(keys.customer) || '',
    customerToken: sessionStorage.getItem(keys.customerToken) || '',
    operatorToken: sessionStorage.getItem(keys.operatorToken) || '',
  };
}

/** An element with attributes and children; strings become text nodes (never markup). */
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name === 'onclick') node.addEventListener('click', value);
    else if (name === 'text') node.textContent = String(value);
    else node.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** A failed API call: its HTTP status and the API's own words (RFC 9457 `detail`). */
class ApiError extends Error {
  constructor(status, detail) {
    super(detail);
    this.status = status;
  }
}

/** Calls the API at this origin as `who` ('customer' or 'operator'); answers the JSON body. */
async function api(path, who, method, body) {
  const c = credentials();
  const token = who === 'operator' ? c.operatorToken : c.customerToken;
  const headers = { accept: 'application/json' };
  if (token) headers.authorization = `Bearer ${token}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  const answer = await fetch(path, {
    method: method || 'GET', headers, cache: 'no-store',
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await answer.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch (_) { json = null; }
  if (!answer.ok) throw new ApiError(answer.status, (json && json.detail) || `${answer.status} ${answer.statusText}`);
  return json;
}

/** One reading of a conversation: an operator reads any customer's, a customer their own. */
function readConversation(id) {
  const path = encodeURIComponent(id);
  return credentials().operatorToken
    ? api(`/operator/conversations/${path}`, 'operator')
    : api(`/conversations/${path}`, 'customer');
}

/** Whether nothing more will change without a person: the latest turn ended, no subtask waits for
 * an approval and no approval is pending or approved-but-not-run. */
function settled(view) {
  if (!TURN_ENDED.has(view.status)) return false;
  const waiting = (view.turns || []).some((t) => t.subtasks.some((s) => s.status === 'AWAITING_APPROVAL'));
  return !waiting && !(view.approvals || []).some((a) => APPROVAL_OPEN.has(a.status));
}

/**
 * Reads GET /conversations/{id}/events (text/event-stream) through fetch, so it can carry the customer's
 * token (EventSource cannot send an Authorization header), resuming after `lastId` (Last-Event-ID).
 * Calls onEvent() for each event; answers the last event id once the stream ends (the turn is over).
 * Throws an ApiError for an answer that is not a stream, or the network's error if it drops.
 */
async function readEvents(conversationId, lastId, onEvent, signal) {
  const headers = { accept: 'text/event-stream' };
  const token = credentials().customerToken;
  if (token) headers.authorization = `Bearer ${token}`;
  if (lastId) headers['last-event-id'] = lastId;
  const answer = await fetch(`/conversations/${encodeURIComponent(conversationId)}/events`, {
    headers, cache: 'no-store', signal,
  });
  if (!answer.ok || !answer.body) throw new ApiError(answer.status, `${answer.status} ${answer.statusText}`);
  const reader = answer.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return lastId;
    buffer += value.replace(/\r\n?/g, '\n');
    let cut;
    while ((cut = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let id = null;
      let data = '';
      for (const line of block.split('\n')) {
        if (line.startsWith('id:')) id = line.slice(3).replace(/^ /, '');
        else if (line.startsWith('data:')) data += line.slice(5).replace(/^ /, '');
      }
      if (id !== null) lastId = id;
      if (data) onEvent(data);
    }
  }
}

/** How often a dropped event stream is opened again (with Last-Event-ID) before follow() polls instead. */
const STREAM_RETRIES = 3;

/**
 * Follows one conversation live: calls onView(view, live) with each reading that differs from the last
 * (live: whether more is to come) and onError(error) when a reading fails. Stops by itself once the
 * conversation is settled; answers a function that stops it.
 *
 * While its turn runs, each event of GET /conversations/{id}/events (the customer's stream: their token,
 * or none with authentication off) triggers one reading of the conversation (an operator reads GET
 * /operator/conversations/{id}); a dropped stream is resumed with Last-Event-ID. Once the stream ends
 * (the turn is over) — or cannot be opened (an operator without a customer's token on a serve with
 * tokens) — it reads every POLL_MS until the conversation is settled: a person's decision comes as a
 * later turn.
 */
function follow(conversationId, onView, onError) {
  let stopped = false;
  let timer = null;
  let last = '';
  let reading = null;
  let again = false;
  const abort = new AbortController();
  /** One reading; answers whether the conversation is settled. */
  async function readOnce() {
    try {
      const view = await readConversation(conversationId);
      if (stopped) return true;
      const live = !settled(view);
      const seen = JSON.stringify(view);
      if (seen !== last || !live) { last = seen; onView(view, live); }
      return !live;
    } catch (error) {
      if (!stopped) onError(error);
      return false;
    }
  }
  /** A reading after an event: events that come while one is in flight ask for one more after it. */
  function refresh() {
    if (reading) { again = true; return reading; }
    reading = (async () => {
      do { again = false; await readOnce(); } while (again && !stopped);
      reading = null;
    })();
    return reading;
  }
  async function poll() {
    if (stopped) return;
    if (await readOnce()) { stopped = true; return; }
    if (!stopped) timer = setTimeout(poll, POLL_MS);
  }
  async function stream() {
    let lastId = null;
    for (let tries = 0; !stopped && tries <= STREAM_RETRIES; tries += 1) {
      try {
        lastId = await readEvents(conversationId, lastId, () => refresh(), abort.signal);
        break;
      } catch (error) {
        if (stopped || (error instanceof ApiError && error.status < 500)) break;
        await new Promise((resolve) => { timer = setTimeout(resolve, POLL_MS); });
      }
    }
    if (reading) await reading;
    poll();
  }
  refresh().then(() => { if (!stopped) stream(); });
  return () => { stopped = true; clearTimeout(timer); abort.abort(); };
}

// ---- what the page shows ----

const page = {
  selected: null,
  stop: () => {},
  /** The operator's approvals by id (reason, customer, who decided), from the lists. */
  operatorApprovals: new Map(),
};

function notice(text, isError) {
  const p = document.getElementById('notice');
  p.textContent = text || '';
  p.className = isError ? 'error' : '';
}

function badge(status) {
  return el('span', { class: 'badge', 'data-status': status, text: status });
}

function when(rfc3339) {
  if (!rfc3339) return '';
  const d = new Date(rfc3339);
  return Number.isNaN(d.getTime()) ? rfc3339 : d.toLocaleTimeString();
}

/** A subtask's duration: finished − started, or so far while it runs ('' before it starts). */
function duration(s) {
  if (!s.started_at) return '';
  const end = s.finished_at ? Date.parse(s.finished_at) : Date.now();
  const ms = Math.max(0, end - Date.parse(s.started_at));
  return ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(1)} s`;
}

function usageText(usage) {
  if (!usage) return 'usage: not reported';
  const n = (v) => (v === null || v === undefined ? '?' : v);
  const cost = usage.cost_usd === null || usage.cost_usd === undefined ? '?' : `$${usage.cost_usd.toFixed(5)}`;
  return `tokens: ${n(usage.prompt_tokens)} in, ${n(usage.completion_tokens)} out (${n(usage.cached_tokens)} cached) · cost ${cost}`;
}

/** A subtask's own tokens and cost, one short line; a subtask still running has none recorded yet. */
function subtaskUsageText(s) {
  if (!s.usage) return ['SUCCEEDED', 'FAILED', 'SKIPPED'].includes(s.status) ? 'tokens: not reported' : 'tokens: when it ends';
  const n = (v) => (v === null || v === undefined ? '?' : v);
  const cost = s.usage.cost_usd === null || s.usage.cost_usd === undefined ? '?' : `$${s.usage.cost_usd.toFixed(5)}`;
  return `tokens: ${n(s.usage.prompt_tokens)} in, ${n(s.usage.completion_tokens)} out · ${cost}`;
}

/** Columns by dependency depth: a subtask sits one column right of its deepest dependency. */
function layout(subtasks) {
  const byId = new Map(subtasks.map((s) => [s.id, s]));
  const depth = new Map();
  const depthOf = (s, seen) => {
    if (depth.has(s.id)) return depth.get(s.id);
    if (seen.has(s.id)) return 0; // a cycle the planner never writes: draw it flat
    seen.add(s.id);
    const deps = s.depends_on.map((d) => byId.get(d)).filter(Boolean);
    const d = deps.length ? 1 + Math.max(...deps.map((x) => depthOf(x, seen))) : 0;
    depth.set(s.id, d);
    return d;
  };
  const rows = [];
  const place = new Map();
  for (const s of subtasks) {
    const col = depthOf(s, new Set());
    const row = rows[col] || 0;
    rows[col] = row + 1;
    place.set(s.id, { x: col * (NODE.w + NODE.gapX), y: row * (NODE.h + NODE.gapY) });
  }
  const cols = rows.length;
  const most = Math.max(0, ...rows.map((r) => r || 0));
  return { place, width: cols * (NODE.w + NODE.gapX) - NODE.gapX, height: most * (NODE.h + NODE.gapY) - NODE.gapY };
}

function subtaskNode(s, at) {
  const ended = ['SUCCEEDED', 'FAILED', 'SKIPPED'].includes(s.status);
  const tools = s.tools_used.length ? `tools: ${s.tools_used.join(', ')}` : ended ? 'tools: none' : 'tools: none yet';
  const effects = (s.effects || []).map((e) => `${e.tool}: ${e.state}`).join(', ');
  const node = el('div', { class: 'node', 'data-subtask': s.id, 'data-status': s.status },
    el('div', { class: 'head' }, el('span', { class: 'id', text: s.id }), badge(s.status)),
    el('div', { class: 'instruction', title: s.instruction, text: s.instruction }),
    el('div', { class: 'small tools', text: tools }),
    el('div', { class: 'small duration', text: duration(s) ? `duration: ${duration(s)}` : 'not started' }),
    el('div', { class: 'small tokens', text: subtaskUsageText(s) }),
    effects ? el('div', { class: 'small effects', text: `effects: ${effects}` }) : null,
    s.error ? el('div', { class: 'small why', text: s.error_code ? `${s.error} (${s.error_code})` : s.error }) : null);
  node.style.left = `${at.x}px`;
  node.style.top = `${at.y}px`;
  node.style.width = `${NODE.w}px`;
  node.style.height = `${NODE.h}px`;
  return node;
}

/** A turn's subtasks as boxes in dependency columns, each dependency an edge drawn left to right. */
function graph(subtasks) {
  const { place, width, height } = layout(subtasks);
  const box = el('div', { class: 'graph' });
  box.style.height = `${height + 4}px`;
  const svgNs = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(svgNs, 'svg');
  svg.setAttribute('width', String(width));
  svg.setAttribute('height', String(height + 4));
  for (const s of subtasks) {
    const to = place.get(s.id);
    for (const dep of s.depends_on) {
      const from = place.get(dep);
      if (!from) continue;
      const x1 = from.x + NODE.w, y1 = from.y + NODE.h / 2, x2 = to.x, y2 = to.y + NODE.h / 2;
      const path = document.createElementNS(svgNs, 'path');
      path.setAttribute('d', `M${x1},${y1} C${x1 + NODE.gapX / 2},${y1} ${x2 - NODE.gapX / 2},${y2} ${x2},${y2}`);
      path.setAttribute('data-edge', `${dep}->${s.id}`);
      svg.append(path);
    }
  }
  box.append(svg, ...subtasks.map((s) => subtaskNode(s, place.get(s.id))));
  return box;
}

function turnSection(t) {
  const author = t.author || 'customer';
  return el('section', { class: 'turn', 'data-turn': t.turn, 'data-author': author, 'data-status': t.status },
    el('div', { class: 'turn-head' },
      el('h3', { text: `Turn ${t.turn}` }), badge(t.status),
      el('span', { class: 'small', text: `${author} · ${t.progress.finished}/${t.progress.total} subtasks · started ${when(t.started_at)}` })),
    t.message ? el('div', { class: 'message', text: t.message }) : null,
    t.subtasks.length ? graph(t.subtasks) : null,
    t.reply ? el('div', { class: 'reply', text: t.reply }) : null,
    el('div', { class: 'small usage', text: usageText(t.usage) }));
}

async function decide(approvalId, decision) {
  try {
    const answer = await api(`/approvals/${encodeURIComponent(approvalId)}`, 'operator', 'POST', { decision });
    const a = answer.approval || {};
    notice(`${approvalId} is ${a.status}${a.decided_by ? ` (decided by ${a.decided_by})` : ''}`);
  } catch (error) {
    notice(`deciding ${approvalId}: ${error.message}`, true);
  }
  refreshLists();
  if (page.selected) open(page.selected);
}

function approvalCard(a) {
  const operator = credentials().operatorToken;
  const known = page.operatorApprovals.get(a.approval_id) || {};
  const outcome = a.result || known.outcome;
  return el('div', { class: 'approval-card', 'data-approval': a.approval_id, 'data-status': a.status },
    badge(a.status),
    el('span', { text: `${a.tool} · order ${a.order_id} · ${a.amount} · subtask ${a.subtask_id}` }),
    known.reason ? el('span', { class: 'small', text: `why: ${known.reason}` }) : null,
    a.decided_at ? el('span', { class: 'small', text: `decided ${when(a.decided_at)}${known.decided_by ? ` by ${known.decided_by}` : ''}` }) : null,
    outcome ? el('span', { class: 'small outcome', text: outcome }) : null,
    operator && a.status === 'pending'
      ? el('span', { class: 'buttons' },
        el('button', { class: 'approve', 'data-decide': 'approve', onclick: () => decide(a.approval_id, 'approve'), text: 'Approve' }),
        el('button', { class: 'reject', 'data-decide': 'reject', onclick: () => decide(a.approval_id, 'reject'), text: 'Reject' }))
      : null);
}

function showConversation(view, live) {
  document.getElementById('empty').hidden = true;
  document.getElementById('conversation').hidden = false;
  document.getElementById('conversation-title').textContent = view.conversation_id;
  const liveTag = document.getElementById('live');
  liveTag.dataset.live = String(live);
  liveTag.textContent = live ? 'live' : 'settled';
  document.getElementById('conversation-meta').textContent =
    `customer ${view.customer_id} · ${view.status} · created ${when(view.created_at)} · deadline ${when(view.deadline_at)}` +
    (view.handoff ? ` · handed to a person (${view.handoff.reason})` : '');
  const approvals = view.approvals || [];
  document.getElementById('conversation-approvals').replaceChildren(
    ...(approvals.length ? [el('h3', { text: 'Approvals' }), ...approvals.map(approvalCard)] : []));
  const turns = view.turns && view.turns.length ? view.turns : [];
  document.getElementById('turns').replaceChildren(...turns.map(turnSection));
}

function open(id) {
  page.stop();
  page.selected = id;
  if (location.hash.slice(1) !== id) history.replaceState(null, '', `#${encodeURIComponent(id)}`);
  for (const b of document.querySelectorAll('[data-conversation]')) b.classList.toggle('selected', b.dataset.conversation === id);
  page.stop = follow(id, (view, live) => {
    if (document.getElementById('notice').className === 'error') notice('');
    showConversation(view, live);
  },
    (error) => notice(`reading ${id}: ${error.message}`, true));
}

function conversationItem(c) {
  const text = `${c.status} · ${c.progress.finished}/${c.progress.total}${c.replied ? ' · replied' : ''} · ${when(c.created_at)}`;
  return el('li', {}, el('button', {
    'data-conversation': c.conversation_id, class: c.conversation_id === page.selected ? 'selected' : null,
    onclick: () => open(c.conversation_id),
  }, el('div', { class: 'id', text: c.conversation_id }), el('div', { class: 'small', text })));
}

function pendingItem(a) {
  return el('li', { class: 'approval', 'data-pending': a.approval_id },
    el('button', { 'data-conversation': a.conversation_id, onclick: () => open(a.conversation_id) },
      el('div', { text: `${a.customer_id} · order ${a.order_id} · ${a.amount}` }),
      el('div', { class: 'small', text: a.reason ? `why: ${a.reason}` : a.tool }),
      el('div', { class: 'id', text: a.conversation_id })));
}

/** Reads the conversations list and, for an operator, the approvals waiting. */
async function refreshLists() {
  const c = credentials();
  const list = document.getElementById('conversations');
  if (c.customer || c.customerToken) {
    const query = c.customer && !c.customerToken ? `?customer_id=${encodeURIComponent(c.customer)}` : '';
    try {
      const page1 = await api(`/conversations${query}`, 'customer');
      list.replaceChildren(...page1.conversations.map(conversationItem));
    } catch (error) {
      list.replaceChildren(el('li', { class: 'small', text: `conversations: ${error.message}` }));
    }
  } else {
    list.replaceChildren(el('li', { class: 'small', text: 'type a customer id or a customer token to list conversations' }));
  }
  const panel = document.getElementById('operator-panel');
  panel.hidden = !c.operatorToken;
  if (!c.operatorToken) return;
  try {
    const [pending, recent] = await Promise.all([
      api('/approvals?status=pending', 'operator'), api('/approvals?status=all&limit=100', 'operator')]);
    for (const a of recent.approvals.concat(pending.approvals)) page.operatorApprovals.set(a.approval_id, a);
    const items = pending.approvals.map(pendingItem);
    document.getElementById('approvals').replaceChildren(
      ...(items.length ? items : [el('li', { class: 'small', text: 'none waiting' })]));
  } catch (error) {
    document.getElementById('approvals').replaceChildren(el('li', { class: 'small', text: `approvals: ${error.message}` }));
  }
}

function start() {
  const c = credentials();
  document.getElementById('customer-id').value = c.customer;
  document.getElementById('customer-token').value = c.customerToken;
  document.getElementById('operator-token').value = c.operatorToken;
  document.getElementById('credentials').addEventListener('submit', (event) => {
    event.preventDefault();
    sessionStorage.setItem(keys.customer, document.getElementById('customer-id').value.trim());
    sessionStorage.setItem(keys.customerToken, document.getElementById('customer-token').value.trim());
    sessionStorage.setItem(keys.operatorToken, document.getElementById('operator-token').value.trim());
    refreshLists();
    if (page.selected) open(page.selected);
  });
  document.getElementById('forget').addEventListener('click', () => {
    for (const key of Object.values(keys)) sessionStorage.removeItem(key);
    for (const id of ['customer-id', 'customer-token', 'operator-token']) document.getElementById(id).value = '';
    refreshLists();
  });
  document.getElementById('open-form').addEventListener('submit', (event) => {
    event.preventDefault();
    const id = document.getElementById('open-id').value.trim();
    if (id) open(id);
  });
  refreshLists();
  setInterval(refreshLists, LISTS_MS);
  const hashed = decodeURIComponent(location.hash.slice(1));
  if (hashed) open(hashed);
}

document.addEventListener('DOMContentLoaded', start);
