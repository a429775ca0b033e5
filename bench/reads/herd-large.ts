// A large restart herd (npm run bench -- --only herd-large): WORKERS snapshot readers
// (default 1,000) of KEYS live keys at once against the server as it is, with the
// server's peak memory and the disk its spools take, which must stay bounded by one
// snapshot whatever the number of readers; then the same herd through nginx
// (deploy/nginx/statelog.conf.template), where nginx is installed. Options
// (environment): WORKERS, KEYS.
import { mkdtempSync, readdirSync, readlinkSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SERVER_ENTRY } from '../../harness/build.js';
import { hasNginx, startNginx } from '../../harness/nginx.js';
import type { Figure } from '../shared/figure.js';
import { herd, withServer } from './followers.js';
import { filledTemplate, workingCopy } from '../shared/lib.js';
import { mb } from '../shared/server-process.js';

/** Bytes of the files under `dir` that process `pid` holds open (spools are unlinked once open). */
function spoolBytes(pid: number, dir: string): number {
  let bytes = 0;
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      if (readlinkSync(`/proc/${pid}/fd/${fd}`).startsWith(dir)) bytes += statSync(`/proc/${pid}/fd/${fd}`).size;
    } catch {
      // Closed between the listing and the stat: a spool let go.
    }
  }
  return bytes;
}

export const herdLargeFigure: Figure = {
  name: 'herd-large',
  title: 'A large restart herd: a thousand snapshot readers at once, the server\'s memory and spool disk',
  async run(settings) {
    const workers = Number(process.env.WORKERS ?? (settings.smoke ? 10 : 1000));
    const keys = Number(process.env.KEYS ?? (settings.smoke ? 1000 : 100_000));
    const template = filledTemplate(keys, keys, settings.log);
    const copy = workingCopy(template, 'herd-large');
    const spool = mkdtempSync(join(tmpdir(), 'statelog-herd-spool-'));
    try {
      const result = await withServer(
        SERVER_ENTRY,
        copy.path,
        async (server) => {
          const idleRss = server.rss();
          let peakRss = idleRss;
          let peakSpool = 0;
          const sampler = setInterval(() => {
            peakRss = Math.max(peakRss, server.rss());
            peakSpool = Math.max(peakSpool, spoolBytes(server.child.pid!, spool));
          }, 100);
          try {
            const measured = await herd(server, server.base, '/v1/snapshot?minOffset=0', workers);
            return { ...measured, idleRssMb: mb(idleRss), peakRssMb: mb(peakRss), peakSpoolMb: mb(peakSpool) };
          } finally {
            clearInterval(sampler);
          }
        },
        { STATELOG_SPOOL_DIR: spool },
      );
      settings.log(`${workers} workers × ${keys} keys: ${JSON.stringify(result)}`);
      const throughNginx = hasNginx
        ? await withServer(SERVER_ENTRY, copy.path, async (server) => {
            const nginx = await startNginx(join(spool, 'nginx'), server.base.replace(/^http:\/\//, ''));
            try {
              return { ...(await herd(server, nginx.url, '/v1/snapshot?minOffset=0', workers)), serverAnswers: nginx.upstreamRequests('/v1/snapshot') };
            } finally {
              await nginx.stop();
            }
          })
        : null;
      if (throughNginx) settings.log(`through nginx: ${JSON.stringify(throughNginx)}`);
      return {
        scale: `${workers} workers × ${keys.toLocaleString()} keys at once (GET /v1/snapshot?minOffset=0), direct and through nginx; STATELOG_SYNC=normal`,
        settings: { workers, keys },
        metrics: [
          { label: 'all ready', unit: 's', values: [result.allReadySeconds] },
          { label: 'reads of the state from the store', unit: '', values: [result.storeReads] },
          { label: 'server CPU a key delivered', unit: 'µs', values: [result.cpuMicrosecondsPerKey] },
          { label: 'answers 429', unit: '', values: [result.refused] },
          { label: 'server memory at rest', unit: 'MB', values: [result.idleRssMb] },
          { label: 'server memory at its peak', unit: 'MB', values: [result.peakRssMb] },
          { label: 'spool disk at its peak', unit: 'MB', values: [result.peakSpoolMb] },
          ...(throughNginx
            ? [
                { label: 'through nginx: snapshots the server answered', unit: '', values: [throughNginx.serverAnswers] },
                { label: 'through nginx: all ready', unit: 's', values: [throughNginx.allReadySeconds] },
                { label: 'through nginx: server CPU a key delivered', unit: 'µs', values: [throughNginx.cpuMicrosecondsPerKey] },
              ]
            : []),
        ],
        details: { direct: result, throughNginx },
        notes: ['Reads of the store are a count; times, CPU and memory depend on the machine: the readers and the server share two cores.'],
      };
    } finally {
      copy.dispose();
      rmSync(spool, { recursive: true, force: true });
    }
  },
};
