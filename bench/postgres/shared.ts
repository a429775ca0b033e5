// What the PostgreSQL figures share: throw-away databases on a server of this machine, and
// the durable PUT load spread evenly over several statelog nodes.
import type pg from 'pg';
import { closedLoop, type HttpClient, type LoopResult } from '../shared/closed-loop.js';
import { sleep } from '../shared/lib.js';
import { putRequest } from '../writes/write.js';

/** Databases created on the server `adminUrl` names (through `admin`), all dropped by dropAll. */
export class Databases {
  private readonly created: string[] = [];
  constructor(
    readonly admin: pg.Client,
    private readonly adminUrl: string,
  ) {}

  async create(suffix: string): Promise<{ name: string; url: string }> {
    const name = `statelog_bench_${process.pid}_${suffix}`;
    await this.admin.query(`CREATE DATABASE ${name} TEMPLATE template0 ENCODING 'UTF8'`);
    this.created.push(name);
    const url = new URL(this.adminUrl);
    url.pathname = `/${name}`;
    return { name, url: url.toString() };
  }

  /** Transactions committed in a database so far (the statistics lag up to a second). */
  async commits(name: string): Promise<number> {
    await sleep(1200);
    const { rows } = await this.admin.query<{ n: string }>('SELECT xact_commit AS n FROM pg_stat_database WHERE datname = $1', [name]);
    return Number(rows[0]!.n);
  }

  async dropAll(): Promise<void> {
    for (const name of this.created) await this.admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  }
}

/** Durable PUTs with `connections` workers spread evenly over the servers' clients. */
export function putLoad(clients: HttpClient[], connections: number, seconds: number): Promise<LoopResult> {
  return closedLoop(connections, seconds, async (w) => void (await clients[w % clients.length]!.expectOk(putRequest())));
}
