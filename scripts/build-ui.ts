// Builds the dashboard: ui/ (browser TypeScript, CSS, the page) into dist/ui, which
// src/routes/ui.ts serves at /ui. One esbuild bundle (eventsource-parser included, no
// CDN), minified, with a source map; the script and style sheet get content hashes in
// their names, and the page is written with those names.
//
//   tsx scripts/build-ui.ts            (run by `npm run build` and `npm start`)
import { copyFileSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { basename, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const SOURCE = join(ROOT, 'ui');
export const UI_OUT_DIR = join(ROOT, 'dist', 'ui');

export interface UiBuild {
  dir: string;
  /** Each written file's name and size in bytes. */
  files: { name: string; bytes: number }[];
}

export async function buildUi(outDir = UI_OUT_DIR): Promise<UiBuild> {
  rmSync(outDir, { recursive: true, force: true });
  mkdirSync(outDir, { recursive: true });
  const result = await build({
    absWorkingDir: ROOT,
    entryPoints: { app: join(SOURCE, 'main.ts'), style: join(SOURCE, 'styles.css') },
    outdir: outDir,
    entryNames: '[name]-[hash]',
    assetNames: '[name]-[hash]',
    // The style sheet's images become hashed files beside it.
    loader: { '.svg': 'file' },
    bundle: true,
    format: 'esm',
    platform: 'browser',
    // Browsers of the last few years; nothing here needs more.
    target: ['chrome111', 'firefox115', 'safari16.4'],
    minify: true,
    sourcemap: 'linked',
    metafile: true,
    logLevel: 'silent',
  });
  const outputs = Object.entries(result.metafile.outputs);
  const name = (path: string) => basename(path);
  const output = (entry: string): string => {
    const found = outputs.find(([path, out]) => out.entryPoint === `ui/${entry}` && !path.endsWith('.map'));
    if (!found) throw new Error(`the dashboard build produced nothing for ui/${entry}`);
    return name(found[0]);
  };

  const page = readFileSync(join(SOURCE, 'index.html'), 'utf8');
  const filled = page.replace('%APP_JS%', output('main.ts')).replace('%APP_CSS%', output('styles.css'));
  if (filled.includes('%APP_')) throw new Error('ui/index.html has a placeholder the build does not know');
  writeFileSync(join(outDir, 'index.html'), filled);
  copyFileSync(join(SOURCE, 'favicon.svg'), join(outDir, 'favicon.svg'));

  const files = [...outputs.map(([path, out]) => ({ name: name(path), bytes: out.bytes }))];
  for (const extra of ['index.html', 'favicon.svg']) {
    files.push({ name: extra, bytes: readFileSync(join(outDir, extra)).length });
  }
  return { dir: outDir, files };
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const { dir, files } = await buildUi();
  const list = files.map((file) => `${file.name} ${(file.bytes / 1024).toFixed(1)} KiB`).join(', ');
  process.stdout.write(`dashboard built in ${relative(process.cwd(), dir) || '.'}: ${list}\n`);
}
