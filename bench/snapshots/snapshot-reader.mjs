// The snapshot benchmarks' client (bench/snapshots/snapshot.ts, bench/snapshots/snapshot-cpu.ts): reads one whole snapshot in a process
// of its own, as plain node, counting lines without parsing them, and prints what it read
// as one JSON line: apart from the runner's process, whose heap (the figures before it)
// made the same reading cost more as the suite went on.
import http from 'node:http';

const url = process.argv[2];
const started = performance.now();
const cpu = process.cpuUsage();
http
  .get(url, { agent: false }, (res) => {
    const firstByteSeconds = (performance.now() - started) / 1000;
    let lines = 0;
    let bytes = 0;
    let tail = Buffer.alloc(0);
    res.on('data', (chunk) => {
      bytes += chunk.length;
      for (let at = chunk.indexOf(10); at >= 0; at = chunk.indexOf(10, at + 1)) lines += 1;
      tail = chunk.length >= 256 ? chunk.subarray(chunk.length - 256) : Buffer.concat([tail, chunk]).subarray(-256);
    });
    res.on('end', () => {
      const seconds = (performance.now() - started) / 1000;
      const used = process.cpuUsage(cpu);
      const text = tail.toString('utf8').trimEnd();
      const last = text.slice(text.lastIndexOf('\n') + 1);
      process.stdout.write(`${JSON.stringify({ status: res.statusCode, lines, bytes, last, firstByteSeconds, seconds, cpuSeconds: (used.user + used.system) / 1e6 })}\n`);
    });
    res.on('error', fail);
  })
  .on('error', fail);

function fail(err) {
  process.stderr.write(`${err.message}\n`);
  process.exitCode = 1;
}
