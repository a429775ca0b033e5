// A Dockerfile's instructions, for running its steps without a Docker engine
// (test/dockerfile-build.test.ts): stages, each a list of instructions with
// continuation lines joined and comments dropped.
export interface Instruction {
  /** Upper-case keyword: FROM, RUN, COPY, ... */
  op: string;
  /** Everything after the keyword. */
  args: string;
}

export interface Stage {
  /** The FROM line's image. */
  image: string;
  /** `AS <name>`, when given. */
  name: string | null;
  steps: Instruction[];
}

export function parseDockerfile(text: string): Stage[] {
  const lines = text
    .replace(/\\\n(\s*#.*\n)*\s*/g, ' ')
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line && !line.startsWith('#'));
  const stages: Stage[] = [];
  for (const line of lines) {
    const [, op, args] = /^(\S+)\s+(.*)$/.exec(line) ?? [];
    if (!op || args === undefined) throw new Error(`cannot read Dockerfile line: ${line}`);
    if (op.toUpperCase() === 'FROM') {
      const [, image, name] = /^(\S+)(?:\s+AS\s+(\S+))?$/i.exec(args) ?? [];
      if (!image) throw new Error(`cannot read FROM line: ${line}`);
      stages.push({ image, name: name ?? null, steps: [] });
      continue;
    }
    const stage = stages.at(-1);
    if (!stage) throw new Error(`instruction before FROM: ${line}`);
    stage.steps.push({ op: op.toUpperCase(), args });
  }
  return stages;
}

/** COPY's options (--from=..., --chown=...), sources and destination. */
export function parseCopy(args: string): { from: string | null; sources: string[]; dest: string } {
  const words = args.startsWith('[') ? (JSON.parse(args) as string[]) : args.split(/\s+/);
  let from: string | null = null;
  const rest: string[] = [];
  for (const word of words) {
    if (word.startsWith('--from=')) from = word.slice('--from='.length);
    else if (!word.startsWith('--')) rest.push(word);
  }
  const dest = rest.pop();
  if (!dest || rest.length === 0) throw new Error(`cannot read COPY ${args}`);
  return { from, sources: rest, dest };
}
