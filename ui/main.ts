// The statelog dashboard. On load it asks GET /v1/stats: a 401 means the server has
// tokens, and the page asks for one (kept in session storage, sent as a bearer header,
// never put in a URL). Then it polls the stats every 2 s for the health panel and the
// chart, lists keys with live updates from the change stream, and offers compaction.
// A token limited to key prefixes is refused the stats (403 with its prefixes): the
// page then shows that scope instead, and lists the keys the API shows it.
import { Api, ApiFailure, tokenStore, type Stats } from './api.js';
import { HistoryChart } from './chart.js';
import { renderConsumers } from './consumers.js';
import { formatCount, formatDuration } from './format.js';
import { KeyBrowser } from './keys.js';
import { renderStats } from './stats.js';

const POLL_MS = 2000;
const COMPACT_REFUSED_KEY = 'statelog.compactRefused';

function byId<T extends HTMLElement = HTMLElement>(id: string): T {
  const element = document.getElementById(id);
  if (!element) throw new Error(`the page has no #${id}`);
  return element as T;
}

const api = new Api();
const ui = {
  main: byId('main'),
  connection: byId('connection'),
  signOut: byId<HTMLButtonElement>('sign-out'),
  signIn: byId('sign-in'),
  tokenForm: byId<HTMLFormElement>('token-form'),
  token: byId<HTMLInputElement>('token'),
  tokenError: byId('token-error'),
  dashboard: byId('dashboard'),
  compact: byId<HTMLButtonElement>('compact'),
  compactNote: byId('compact-note'),
  compactResult: byId('compact-result'),
};
const statsElements = {
  head: byId('stat-head'),
  records: byId('stat-records'),
  liveKeys: byId('stat-live-keys'),
  tombstones: byId('stat-tombstones'),
  dirtyRatio: byId('stat-dirty-ratio'),
  horizon: byId('stat-horizon'),
  dbBytes: byId('stat-db-bytes'),
  lastCompaction: byId('stat-last-compaction'),
  updated: byId('stats-updated'),
};

const consumerElements = { rows: byId<HTMLTableSectionElement>('consumer-rows'), empty: byId('consumers-empty') };

const chart = new HistoryChart(byId('chart'));
const keys = new KeyBrowser(
  api,
  {
    form: byId<HTMLFormElement>('filter'),
    prefix: byId<HTMLInputElement>('prefix'),
    pageSize: byId<HTMLSelectElement>('page-size'),
    rows: byId<HTMLTableSectionElement>('key-rows'),
    caption: byId('keys-caption'),
    empty: byId('keys-empty'),
    prev: byId<HTMLButtonElement>('page-prev'),
    next: byId<HTMLButtonElement>('page-next'),
    pageLabel: byId('page-label'),
    streamState: byId('stream-state'),
  },
  { unauthorized: () => tokenRefused() },
);

let running = false;
let pollTimer: ReturnType<typeof setTimeout> | undefined;
let polling: Promise<void> | null = null;

function setConnection(state: 'ok' | 'trouble' | 'signed-out' | 'starting', text: string): void {
  if (ui.connection.textContent !== text) ui.connection.textContent = text;
  ui.connection.dataset.state = state;
}

/** The key prefixes of the token in use, when it has any (learnt from a 403 of the stats). */
let scope: string[] | null = null;

function whoText(): string {
  if (api.token === null) return 'Connected · open server, no token needed';
  return scope ? `Connected · signed in with a token limited to keys starting with ${scope.join(', ')}` : 'Connected · signed in with a token';
}

/** The stats, or the token's scope when it is limited to key prefixes. */
async function statsOrScope(): Promise<Stats | { scope: string[] }> {
  try {
    return await api.stats();
  } catch (err) {
    if (err instanceof ApiFailure && err.status === 403 && err.prefixes) return { scope: err.prefixes };
    throw err;
  }
}

function showScope(prefixes: string[]): void {
  scope = prefixes;
  statsElements.updated.textContent = `Log health needs a token without key prefixes. This token sees only the keys starting with ${prefixes.join(', ')}.`;
  refuseCompaction('Compaction needs an admin token without key prefixes.');
  setConnection('ok', whoText());
}

// ---- stats and chart -------------------------------------------------------------

function showStats(stats: Stats): void {
  const now = Date.now();
  renderStats(statsElements, stats, now);
  chart.add({ t: now, records: stats.records, liveKeys: stats.liveKeys });
  setConnection('ok', whoText());
}

async function poll(): Promise<void> {
  try {
    // A scoped token is never shown the stats; it is shown its own consumers.
    if (!scope) showStats(await api.stats());
    renderConsumers(consumerElements, await api.consumers());
  } catch (err) {
    if (err instanceof ApiFailure && err.status === 401) return tokenRefused();
    const reason = err instanceof Error ? err.message : String(err);
    setConnection('trouble', `Cannot read the stats or consumers (${reason}); retrying`);
  }
}

/** Polls now (after the poll in flight, which may have been sent too early), then every POLL_MS. */
async function pollNow(): Promise<void> {
  while (polling) await polling;
  clearTimeout(pollTimer);
  polling = poll().finally(() => {
    polling = null;
    if (running) pollTimer = setTimeout(() => void pollNow(), POLL_MS);
  });
  return polling;
}

// ---- compaction ------------------------------------------------------------------

function refuseCompaction(reason: string): void {
  ui.compact.disabled = true;
  ui.compactNote.textContent = reason;
  ui.compactNote.dataset.state = 'refused';
}

function compactionReason(serverMessage: string): string {
  const role = /token has (\w+)/.exec(serverMessage)?.[1];
  return role
    ? `Compaction needs an admin token; this token has the ${role} role.`
    : `Compaction needs an admin token (${serverMessage}).`;
}

async function compactNow(): Promise<void> {
  if (ui.compact.disabled) return;
  ui.compact.disabled = true;
  ui.compact.setAttribute('aria-busy', 'true');
  ui.compact.textContent = 'Compacting…';
  ui.compactResult.textContent = '';
  ui.compactResult.dataset.state = '';
  let refused = false;
  try {
    const result = await api.compact();
    const tombstones = result.tombstonesRemoved === 1 ? '1 tombstone' : `${formatCount(result.tombstonesRemoved)} tombstones`;
    ui.compactResult.textContent =
      `Compaction removed ${formatCount(result.removed)} records (${tombstones}) in ${formatDuration(result.durationMs)}.`;
    ui.compactResult.dataset.state = 'done';
    await pollNow();
  } catch (err) {
    if (err instanceof ApiFailure && err.status === 401) return tokenRefused();
    if (err instanceof ApiFailure && err.status === 403) {
      refused = true;
      const reason = compactionReason(err.message);
      try {
        sessionStorage.setItem(COMPACT_REFUSED_KEY, reason);
      } catch {
        // Remembered until the page is reloaded.
      }
      refuseCompaction(reason);
    } else {
      ui.compactResult.textContent = `The compaction did not run: ${err instanceof Error ? err.message : String(err)}. Try again.`;
      ui.compactResult.dataset.state = 'failed';
    }
  } finally {
    ui.compact.removeAttribute('aria-busy');
    ui.compact.textContent = 'Compact now';
    if (!refused) ui.compact.disabled = false;
  }
}

function resetCompaction(): void {
  ui.compact.disabled = false;
  ui.compactNote.textContent = 'Removes superseded records now, whatever the dirty ratio. Needs an admin token.';
  ui.compactNote.dataset.state = '';
  ui.compactResult.textContent = '';
  // The role is learnt by trying (a 403): a refusal is remembered for this tab and token.
  let refusedBefore: string | null;
  try {
    refusedBefore = sessionStorage.getItem(COMPACT_REFUSED_KEY);
  } catch {
    refusedBefore = null;
  }
  if (refusedBefore !== null && api.token !== null) refuseCompaction(refusedBefore);
}

// ---- sign-in and the dashboard's life ----------------------------------------------

function startDashboard(first: Stats | { scope: string[] }): void {
  running = true;
  ui.signIn.hidden = true;
  ui.dashboard.hidden = false;
  ui.signOut.hidden = api.token === null;
  resetCompaction();
  chart.clear();
  scope = null;
  if ('scope' in first) showScope(first.scope);
  else showStats(first);
  pollTimer = setTimeout(() => void pollNow(), POLL_MS);
  keys.start();
  void api.consumers().then((list) => renderConsumers(consumerElements, list), () => {});
}

function stopDashboard(): void {
  running = false;
  clearTimeout(pollTimer);
  keys.stop();
  ui.dashboard.hidden = true;
  ui.signOut.hidden = true;
}

function showSignIn(message: string): void {
  stopDashboard();
  ui.signIn.hidden = false;
  ui.tokenError.textContent = message;
  ui.token.setAttribute('aria-invalid', String(message !== ''));
  setConnection('signed-out', 'Not signed in');
  ui.token.focus();
}

function forgetToken(): void {
  api.token = null;
  tokenStore.clear();
  try {
    sessionStorage.removeItem(COMPACT_REFUSED_KEY);
  } catch {
    // Nothing was stored.
  }
}

/** The server no longer accepts the token in use (or never did). */
function tokenRefused(): void {
  if (!running && !ui.signIn.hidden) return;
  const had = api.token !== null;
  forgetToken();
  showSignIn(had ? 'The server no longer accepts this token. Enter a token.' : '');
}

ui.tokenForm.addEventListener('submit', (event) => {
  event.preventDefault();
  void signIn(ui.token.value.trim());
});

async function signIn(token: string): Promise<void> {
  if (token === '') {
    ui.tokenError.textContent = 'Enter a token.';
    ui.token.setAttribute('aria-invalid', 'true');
    ui.token.focus();
    return;
  }
  const submit = ui.tokenForm.querySelector('button')!;
  submit.disabled = true;
  ui.tokenError.textContent = '';
  api.token = token;
  try {
    const stats = await statsOrScope();
    tokenStore.set(token);
    ui.token.value = '';
    ui.token.setAttribute('aria-invalid', 'false');
    startDashboard(stats);
    ui.main.focus();
  } catch (err) {
    api.token = null;
    const text =
      err instanceof ApiFailure && err.status === 401
        ? 'This token was not accepted (401 unauthorized). Check it and try again.'
        : `The server could not check the token: ${err instanceof Error ? err.message : String(err)}.`;
    ui.tokenError.textContent = text;
    ui.token.setAttribute('aria-invalid', 'true');
    ui.token.focus();
    ui.token.select();
  } finally {
    submit.disabled = false;
  }
}

ui.signOut.addEventListener('click', () => {
  forgetToken();
  showSignIn('');
});

ui.compact.addEventListener('click', () => void compactNow());

/** First load: a saved token, no token (an open server), or the sign-in form. */
async function boot(): Promise<void> {
  api.token = tokenStore.get();
  setConnection('starting', 'Connecting…');
  try {
    startDashboard(await statsOrScope());
  } catch (err) {
    if (err instanceof ApiFailure && err.status === 401) {
      const had = api.token !== null;
      forgetToken();
      showSignIn(had ? 'The saved token is no longer accepted. Enter a token.' : '');
      return;
    }
    const reason = err instanceof Error ? err.message : String(err);
    setConnection('trouble', `Cannot reach statelog (${reason}); retrying`);
    setTimeout(() => void boot(), POLL_MS);
  }
}

void boot();
