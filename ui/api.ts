// Calls to the statelog API from the page: relative URLs (the page is served at /ui/,
// the API at /v1/), the bearer token from session storage, and the contract's error
// body turned into an ApiFailure.

// The answers the page reads, typed from the server's own schemas (type-only imports:
// nothing of the server goes into the bundle), so the page cannot drift from them.
import type {
  compactSchema,
  Entry,
  listConsumersSchema,
  listKeysSchema,
  LogRecord as LogRecordSchema,
  Static,
  statsSchema,
} from '../src/contract/schemas.js';

export type LogRecord = Static<typeof LogRecordSchema>;
export type KeyEntry = Static<typeof Entry>;
export type KeyPage = Static<(typeof listKeysSchema)['response'][200]>;
export type Stats = Static<(typeof statsSchema)['response'][200]>;
export type CompactionResult = Static<(typeof compactSchema)['response'][200]>;
export type ConsumerList = Static<(typeof listConsumersSchema)['response'][200]>;

export interface ErrorBody {
  code: string;
  message: string;
  [detail: string]: unknown;
}

/** A refused or failed call. status 0: the server could not be reached. */
export class ApiFailure extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    /** A 403 to a token limited to key prefixes: its prefixes. */
    readonly prefixes: string[] | null = null,
  ) {
    super(message);
    this.name = 'ApiFailure';
  }
}

/** The contract's error member of a failed answer, or a stand-in when the body is something else. */
export async function errorOf(res: Response): Promise<ErrorBody> {
  try {
    const body = (await res.json()) as { error?: ErrorBody };
    if (body.error && typeof body.error.code === 'string') return body.error;
  } catch {
    // Not JSON (a proxy's page, say): described by the status below.
  }
  return { code: `http_${res.status}`, message: `the server answered ${res.status} ${res.statusText}`.trim() };
}

const TOKEN_KEY = 'statelog.token';

/** The token, kept for this tab only. Storage can be refused (privacy settings): then it lives in memory. */
export const tokenStore = {
  get(): string | null {
    try {
      return sessionStorage.getItem(TOKEN_KEY);
    } catch {
      return null;
    }
  },
  set(token: string): void {
    try {
      sessionStorage.setItem(TOKEN_KEY, token);
    } catch {
      // Kept in memory only.
    }
  },
  clear(): void {
    try {
      sessionStorage.removeItem(TOKEN_KEY);
    } catch {
      // Nothing was stored.
    }
  },
};

type Query = Record<string, string | number | null | undefined>;

export class Api {
  /** The bearer token, or null when the server has no tokens (or none is known yet). */
  token: string | null = null;
  private readonly base: URL;

  constructor(pageUrl: string = location.href) {
    // The page is /ui/ (or /prefix/ui/): the API sits one level up.
    this.base = new URL('../', pageUrl);
  }

  url(path: string, query: Query = {}): string {
    const url = new URL(path, this.base);
    for (const [name, value] of Object.entries(query)) {
      if (value !== undefined && value !== null && value !== '') url.searchParams.set(name, String(value));
    }
    return url.href;
  }

  headers(extra: Record<string, string> = {}): Headers {
    const headers = new Headers({ accept: 'application/json', ...extra });
    if (this.token !== null) headers.set('authorization', `Bearer ${this.token}`);
    return headers;
  }

  async request<T>(method: string, path: string, query: Query = {}): Promise<T> {
    let res: Response;
    try {
      res = await fetch(this.url(path, query), { method, headers: this.headers(), cache: 'no-store' });
    } catch {
      throw new ApiFailure(0, 'unreachable', 'the server cannot be reached');
    }
    if (!res.ok) {
      const error = await errorOf(res);
      const prefixes = Array.isArray(error.prefixes) ? error.prefixes.map(String) : null;
      throw new ApiFailure(res.status, error.code, error.message, prefixes);
    }
    return (await res.json()) as T;
  }

  stats(): Promise<Stats> {
    return this.request('GET', 'v1/stats');
  }

  keys(prefix: string, limit: number, cursor: string | null): Promise<KeyPage> {
    return this.request('GET', 'v1/keys', { prefix, limit, cursor });
  }

  consumers(): Promise<ConsumerList> {
    return this.request('GET', 'v1/consumers');
  }

  compact(): Promise<CompactionResult> {
    return this.request('POST', 'v1/admin/compact');
  }
}
