// docker-compose.yml's `ha` profile runs what test/ha/support/cluster.ts runs on loopback:
// the same deploy/ha files, given the same variables. No Docker engine is needed: the file
// is read as YAML (and checked by docker compose's own `config` when a client is installed).
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { ROOT } from '../../harness/server-process.js';
import { DEPLOY, etcdArgs, HAPROXY_ENV, MEMBER_ENV, MEMBER_NAMES } from './support/cluster.js';

interface Service {
  image?: string;
  build?: { context: string; dockerfile: string };
  profiles?: string[];
  command?: string[];
  environment?: Record<string, string>;
  volumes?: string[];
  networks?: string[] | Record<string, { aliases?: string[] } | null>;
}
const compose = parse(readFileSync(join(ROOT, 'docker-compose.yml'), 'utf8'), { merge: true }) as { services: Record<string, Service> };
const ha = Object.fromEntries(Object.entries(compose.services).filter(([, service]) => service.profiles?.includes('ha')));
const patroni = parse(readFileSync(join(DEPLOY, 'patroni.yml'), 'utf8')) as {
  bootstrap: { dcs: Record<string, unknown>; post_bootstrap: string };
};

describe('docker-compose.yml, profile ha', () => {
  it('has etcd, three Patroni members, HAProxy for the primary, two statelog nodes and their balancer', () => {
    expect(Object.keys(ha).sort()).toEqual(['ha-db', 'ha-etcd', 'ha-pg1', 'ha-pg2', 'ha-pg3', 'statelog-ha-1', 'statelog-ha-2', 'statelog-ha-lb']);
    // The other profiles keep their services.
    for (const name of ['statelog', 'postgres', 'statelog-pg-1', 'statelog-pg-2', 'statelog-lb', 'statelog-cache']) expect(compose.services[name]).toBeDefined();
  });

  it('gives each Patroni member the variables the harness gives it, naming its own service', () => {
    for (const name of MEMBER_NAMES) {
      const service = ha[`ha-${name}`]!;
      expect(service.image).toBe('statelog-patroni:latest');
      expect(Object.keys(service.environment!).sort()).toEqual([...MEMBER_ENV].sort());
      expect(service.environment).toMatchObject({
        PATRONI_NAME: name,
        PATRONI_RESTAPI_CONNECT_ADDRESS: `ha-${name}:8008`,
        PATRONI_POSTGRESQL_CONNECT_ADDRESS: `ha-${name}:5432`,
        PATRONI_ETCD3_HOSTS: 'ha-etcd:2379',
      });
    }
    // The image carries deploy/ha's Patroni file and the post_bootstrap script, on PATH.
    expect(ha['ha-pg1']!.build).toEqual({ context: 'deploy/ha', dockerfile: 'Dockerfile' });
    const dockerfile = readFileSync(join(DEPLOY, 'Dockerfile'), 'utf8');
    expect(dockerfile).toMatch(/^COPY patroni\.yml \/etc\/patroni\/patroni\.yml$/m);
    expect(dockerfile).toContain(`COPY ${patroni.bootstrap.post_bootstrap} /usr/local/bin/${patroni.bootstrap.post_bootstrap}`);
    expect(dockerfile).toMatch(/^CMD \["patroni", "\/etc\/patroni\/patroni\.yml"\]$/m);
  });

  it('fills in every variable of deploy/ha/haproxy.cfg, as the harness does', () => {
    const cfg = readFileSync(join(DEPLOY, 'haproxy.cfg'), 'utf8').replace(/^\s*#.*$/gm, '');
    const used = [...new Set([...cfg.matchAll(/"\$\{(\w+)\}"/g)].map((match) => match[1]))].sort();
    expect(used).toEqual([...HAPROXY_ENV].sort());
    const db = ha['ha-db']!;
    expect(Object.keys(db.environment!).sort()).toEqual(used);
    expect(db.volumes).toContain('./deploy/ha/haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro');
    MEMBER_NAMES.forEach((name, i) => {
      expect(db.environment![`HA_PG${i + 1}_ADDR`]).toBe(`ha-${name}:5432`);
      expect(db.environment![`HA_PG${i + 1}_API_PORT`]).toBe('8008');
    });
  });

  it('puts the statelog nodes on the primary through HAProxy, behind the postgres profile balancer config', () => {
    for (const name of ['statelog-ha-1', 'statelog-ha-2']) {
      expect(ha[name]!.environment).toMatchObject({ STATELOG_STORE: 'postgres', DATABASE_URL: expect.stringMatching(/^postgres:\/\/statelog:[^@]+@ha-db:5432\/statelog$/) });
    }
    const lb = ha['statelog-ha-lb']!;
    expect(lb.volumes).toContain('./deploy/haproxy-postgres.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro');
    // The nodes answer on the ha network to the names that config balances.
    const servers = [...readFileSync(join(ROOT, 'deploy/haproxy-postgres.cfg'), 'utf8').matchAll(/^\s*server \S+ ([\w-]+):8080$/gm)].map((match) => match[1]);
    const aliases = ['statelog-ha-1', 'statelog-ha-2'].flatMap((name) => (ha[name]!.networks as Record<string, { aliases: string[] }>).ha!.aliases);
    expect(aliases.sort()).toEqual(servers.sort());
  });

  it('runs etcd with the flags the harness gives it', () => {
    expect(ha['ha-etcd']!.command).toEqual([
      'etcd',
      ...etcdArgs({
        dataDir: '/etcd-data',
        listenClient: 'http://0.0.0.0:2379',
        advertiseClient: 'http://ha-etcd:2379',
        listenPeer: 'http://0.0.0.0:2380',
        advertisePeer: 'http://ha-etcd:2380',
      }),
    ]);
  });

  it('ships Patroni timings that Patroni accepts, in synchronous mode', () => {
    const { ttl, loop_wait, retry_timeout, synchronous_mode } = patroni.bootstrap.dcs as Record<string, number | boolean>;
    // Patroni's own rule: a leader cut off from etcd demotes itself before its key expires.
    expect(Number(loop_wait) + 2 * Number(retry_timeout)).toBeLessThanOrEqual(Number(ttl));
    expect(synchronous_mode).toBe(true);
  });

  const client = ['docker-compose', 'docker'].find((command) => spawnSync(command, command === 'docker' ? ['compose', 'version'] : ['version']).status === 0);
  it.skipIf(!client)('passes docker compose config', () => {
    const args = [...(client === 'docker' ? ['compose'] : []), '--profile', 'ha', 'config', '-q'];
    const result = spawnSync(client!, args, { cwd: ROOT, encoding: 'utf8', env: { ...process.env, STATELOG_PG_PASSWORD: 'x' } });
    expect(result.stderr).toBe('');
    expect(result.status).toBe(0);
  });
});
