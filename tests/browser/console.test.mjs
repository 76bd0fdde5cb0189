// The console in a real browser: Debian's chromium driven by playwright-core against a running serve (infra/local/tests/console_browser.rs starts it and checks the shop's ledger after).
//
// Environment: SWARM_CONSOLE_BASE (the serve, e.g. http://127.0.0.1:8080), SWARM_CONSOLE_OPERATOR_TOKEN,
// SWARM_CONSOLE_SHOTS (a directory for the screenshots), SWARM_CHROMIUM (default /usr/bin/chromium).
// Prints one line `console-result <json>` ({live, refund}) and `all console checks passed` at the end;
// any failed check throws (exit status 1).
import { chromium } from 'playwright-core';
import { mkdtempSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import assert from 'node:assert/strict';

const base = process.env.SWARM_CONSOLE_BASE;
const operatorToken = process.env.SWARM_CONSOLE_OPERATOR_TOKEN;
const shots = process.env.SWARM_CONSOLE_SHOTS || 'target/console';
assert.ok(base && operatorToken, 'SWARM_CONSOLE_BASE and SWARM_CONSOLE_OPERATOR_TOKEN are needed');
mkdirSync(shots, { recursive: true });
/** Every wait of the test has this deadline (ms): the swarm answers in about a second at --time-scale 0.1. */
const PATIENCE = 30_000;
/** Text a customer wrote that would run if the page ever set it as markup. */
const HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">';

async function post(path, body) {
  const answer = await fetch(`${base}${path}`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
  });
  const text = await answer.text();
  assert.equal(answer.status, 202, `POST ${path}: ${answer.status} ${text}`);
  return JSON.parse(text);
}

async function view(id) {
  return (await fetch(`${base}/conversations/${id}`)).json();
}

const profile = mkdtempSync(join(tmpdir(), 'swarm-console-chromium-'));
// A fresh profile (playwright passes it as --user-data-dir) with the flags CI's chromium runs with.
const browser = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.SWARM_CHROMIUM || '/usr/bin/chromium',
  headless: true,
  viewport: { width: 1360, height: 900 },
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
try {
  const page = browser.pages()[0] || await browser.newPage();
  const problems = [];
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => { if (m.type() === 'error') problems.push(`console: ${m.text()}`); });
  page.on('response', (r) => { if (r.status() >= 400) problems.push(`${r.status()} ${r.url()}`); });
  let loads = 0;
  page.on('load', () => { loads += 1; });
  const streams = [];
  page.on('request', (r) => { if (r.url().endsWith('/events')) streams.push(r.url()); });
  await page.goto(`${base}/console`);
  await page.fill('#customer-id', 'C104');
  await page.fill('#operator-token', operatorToken);
  await page.click('#credentials button[type=submit]');
  await page.waitForSelector('#operator-panel:not([hidden])', { timeout: PATIENCE });

  // 1. A conversation posted through the API while the page is open: it shows up in the list, and
  //    opened at once its subtasks appear and turn done — each change drawn live, no reload.
  await page.evaluate(() => {
    window.__seen = [];
    const record = () => {
      for (const n of document.querySelectorAll('#turns .node')) window.__seen.push(`${n.dataset.subtask}:${n.dataset.status}`);
      const turn = document.querySelector('#turns .turn');
      if (turn) window.__seen.push(`turn:${turn.dataset.status}`);
    };
    new MutationObserver(record).observe(document.getElementById('turns'), { childList: true, subtree: true });
  });
  const message = `Where is A1029? Can I still use SAVE20? ${HOSTILE}`;
  const { conversation_id: first } = await post('/conversations', { message, customer_id: 'C104' });
  await page.fill('#open-id', first);
  await page.click('#open-form button');
  await page.waitForSelector(`#conversations [data-conversation="${first}"]`, { timeout: PATIENCE });
  await page.waitForSelector('#live[data-live="false"]', { timeout: PATIENCE });
  await page.waitForSelector('#turns .turn .reply', { timeout: PATIENCE });
  const final = await view(first);
  assert.equal(final.status, 'DONE', 'answered with what it has');
  assert.ok(streams.some((u) => u.endsWith(`/conversations/${first}/events`)), `followed through its event stream: ${streams}`);
  const nodes = await page.$$eval('#turns .node', (ns) => ns.map((n) => [n.dataset.subtask, n.dataset.status]));
  assert.deepEqual(nodes, final.subtasks.map((s) => [s.id, s.status]), 'every subtask drawn with its final status');
  assert.deepEqual(nodes.map(([, s]) => s), ['SUCCEEDED', 'SUCCEEDED', 'SUCCEEDED', 'FAILED', 'SKIPPED']);
  const edges = await page.$$eval('#turns svg path', (ps) => ps.map((p) => p.dataset.edge).sort());
  assert.deepEqual(edges, ['w01->w02', 'w03->w05', 'w04->w05'], 'each dependency an edge');
  const tools = await page.$$eval('#turns .node .tools', (ns) => ns.map((n) => n.textContent));
  assert.deepEqual(tools, final.subtasks.map((s) => (s.tools_used.length ? `tools: ${s.tools_used.join(', ')}` : 'tools: none')));
  const durations = await page.$$eval('#turns .node .duration', (ns) => ns.map((n) => n.textContent));
  assert.ok(durations.slice(0, 3).every((t) => /^duration: \d/.test(t)), durations.join(' | '));
  // Why a subtask failed or was skipped, in our words (the view's), never the provider's text.
  const why = await page.$$eval('#turns .node .why', (ns) => ns.map((n) => [n.closest('.node').dataset.subtask, n.textContent]));
  const failed = final.subtasks.find((s) => s.id === 'w04');
  assert.deepEqual(why, [['w04', `${failed.error} (${failed.error_code})`], ['w05', 'skipped: dependency w04 did not succeed']]);
  assert.ok(!(await page.textContent('#turns')).includes('secret internals'), 'the provider\'s text is not shown');
  assert.match(await page.textContent('#turns .usage'), /^tokens: \d+ in, \d+ out \(0 cached\) · cost \$0\.\d+$/);
  // Tokens and cost per subtask, as the view recorded them when each ended.
  const perSubtask = await page.$$eval('#turns .node .tokens', (ns) => ns.map((n) => n.textContent));
  assert.deepEqual(perSubtask, final.subtasks.map((s) => (s.usage
    ? `tokens: ${s.usage.prompt_tokens ?? '?'} in, ${s.usage.completion_tokens ?? '?'} out · ${s.usage.cost_usd == null ? '?' : `$${s.usage.cost_usd.toFixed(5)}`}`
    : 'tokens: not reported')));
  assert.ok(perSubtask.slice(0, 3).every((t) => /^tokens: [1-9]\d* in, [1-9]\d* out · \$0\.\d+$/.test(t)), perSubtask.join(' | '));
  assert.equal(await page.textContent('#turns .reply'), final.reply, 'the reply as written');
  const seen = await page.evaluate(() => window.__seen);
  const before = seen.filter((s) => /:(PENDING|QUEUED|RUNNING|PLANNING|AGGREGATING|SUBMITTED)$/.test(s));
  assert.ok(before.length > 0, `the page drew the conversation before it was done: ${seen.join(' ')}`);
  // The customer's markup is text: shown as typed, nothing ran, no element made of it.
  assert.equal(await page.textContent('#turns .message'), message);
  assert.equal(await page.evaluate(() => window.__pwned), undefined, 'the customer\'s script never ran');
  assert.equal(await page.$$eval('#turns .message *', (ns) => ns.length), 0, 'no element from the customer\'s text');
  await page.screenshot({ path: join(shots, 'console-conversation.png'), fullPage: true });

  // 2. A refund that waits for a person: it is listed among the approvals waiting, approved on the
  //    page, runs, and the page shows the decision told as a turn of the swarm — still no reload.
  const { conversation_id: refund } = await post('/conversations', { message: 'Please refund order A1033', customer_id: 'C108' });
  const waiting = `#approvals [data-conversation="${refund}"]`;
  await page.waitForSelector(waiting, { timeout: PATIENCE });
  await page.click(waiting);
  await page.waitForSelector('.approval-card[data-status="pending"] button[data-decide="approve"]', { timeout: PATIENCE });
  await page.waitForSelector('#turns .node[data-status="AWAITING_APPROVAL"]', { timeout: PATIENCE });
  await page.screenshot({ path: join(shots, 'console-approval-waiting.png'), fullPage: true });
  await page.click('.approval-card[data-status="pending"] button[data-decide="approve"]');
  await page.waitForSelector('.approval-card[data-status="executed"]', { timeout: PATIENCE });
  await page.waitForSelector('#turns .turn[data-author="swarm"] .reply', { timeout: PATIENCE });
  await page.waitForSelector('#live[data-live="false"]', { timeout: PATIENCE });
  const told = await page.textContent('#turns .turn[data-author="swarm"] .reply');
  const decided = await view(refund);
  const swarmTurn = decided.turns.find((t) => t.author === 'swarm');
  assert.equal(told, swarmTurn.reply, 'the decision as told to the customer');
  assert.match(told, /A1033/);
  assert.equal(await page.getAttribute(`#turns .turn[data-turn="0"] .node[data-subtask="w01"]`, 'data-status'), 'SUCCEEDED');
  assert.match(await page.textContent('#notice'), /is approved \(decided by alice\)/);
  assert.equal(await page.$$eval(waiting, (ns) => ns.length), 0, 'no longer waiting');
  await page.screenshot({ path: join(shots, 'console-approval-decided.png'), fullPage: true });

  assert.equal(loads, 1, 'the page was loaded once: every change came live');
  assert.deepEqual(problems, [], 'no script error, no CSP violation');
  console.log(`console-result ${JSON.stringify({ live: first, refund, approval: decided.approvals[0].approval_id, seen: before.length })}`);
  console.log('all console checks passed');
} finally {
  await browser.close();
  rmSync(profile, { recursive: true, force: true });
}
