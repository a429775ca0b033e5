// Real headless Chromium for the dashboard's end-to-end tests, driven by playwright-core
// (which never downloads a browser itself): the one named by STATELOG_TEST_CHROMIUM, else
// Debian's package at /usr/bin/chromium, else the one playwright-core's own lookup finds
// (installed by `npx playwright-core install chromium`). With none, the browser tests are
// skipped with one line, except under CI=true (.ci/run installs Debian's package). Each
// launch gets a fresh temporary profile from playwright.
import { mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { describe } from 'vitest';
import { findChromium } from './find-chromium.js';

export { findChromium };

export const CHROMIUM = findChromium();

/** Whether the browser tests are skipped: no browser, and not in CI, where that is a failure. */
export const SKIP_BROWSER_TESTS = CHROMIUM === null && process.env.CI !== 'true';
if (SKIP_BROWSER_TESTS) {
  console.warn(
    'dashboard browser tests skipped: no Chromium (set STATELOG_TEST_CHROMIUM, or apt-get install chromium, or npx playwright-core install chromium)',
  );
}

/** A describe of browser tests: skipped, with the one line above, where there is no Chromium. */
export function describeInBrowser(name: string, body: () => void): void {
  describe.skipIf(SKIP_BROWSER_TESTS)(name, body);
}

/** Screenshots land here: git-ignored, kept by CI as artifacts. */
export const ARTIFACTS = fileURLToPath(new URL('../../test-artifacts/dashboard/', import.meta.url));

export const DESKTOP = { width: 1280, height: 800 };
export const PHONE = { width: 390, height: 844 };

export async function launchChromium(): Promise<Browser> {
  if (CHROMIUM === null) {
    throw new Error('no Chromium: set STATELOG_TEST_CHROMIUM, or apt-get install chromium, or npx playwright-core install chromium');
  }
  mkdirSync(ARTIFACTS, { recursive: true });
  return chromium.launch({
    executablePath: CHROMIUM,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
}

export interface Visit {
  context: BrowserContext;
  page: Page;
  /** Console errors and warnings, and uncaught exceptions, in order. */
  problems: string[];
  /** Every request the page made: method, URL and headers. */
  requests: { method: string; url: string; headers: Record<string, string> }[];
}

export interface VisitOptions {
  viewport?: { width: number; height: number };
  /** A token put in session storage before the page's script runs (as a signed-in tab has it). */
  token?: string;
}

/** A fresh browser context (its own session storage) with a page on `baseUrl`, not yet navigated. */
export async function newVisit(browser: Browser, baseUrl: string, options: VisitOptions = {}): Promise<Visit> {
  const context = await browser.newContext({ viewport: options.viewport ?? DESKTOP, baseURL: baseUrl });
  if (options.token !== undefined) {
    await context.addInitScript((token) => {
      if (sessionStorage.getItem('statelog.seeded') === null) {
        sessionStorage.setItem('statelog.token', token);
        sessionStorage.setItem('statelog.seeded', '1');
      }
    }, options.token);
  }
  // Fail at the step that did not happen, well before the test's own timeout.
  context.setDefaultTimeout(5000);
  const page = await context.newPage();
  const problems: string[] = [];
  const requests: Visit['requests'] = [];
  page.on('console', (message) => {
    if (message.type() === 'error' || message.type() === 'warning') problems.push(`${message.type()}: ${message.text()}`);
  });
  page.on('pageerror', (err) => problems.push(`uncaught: ${err.message}`));
  page.on('request', (request) => requests.push({ method: request.method(), url: request.url(), headers: request.headers() }));
  return { context, page, problems, requests };
}

/** Chromium's console line for a fetch answered with this status (not a page error, but logged as one). */
export const failedLoad = (status: number): RegExp =>
  new RegExp(`^error: Failed to load resource: the server responded with a status of ${status}\\b`);
