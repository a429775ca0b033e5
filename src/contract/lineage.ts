// A log's lineage: the generations of its history, each from the offset where it began
// (Kafka's leader epochs). A failover that loses records a reader was already served starts a
// new generation at the first offset the new history wrote; a reader names the generation it
// was served under (`gen`, carried by every Link), and one whose copy reaches into a later
// generation's range holds records the log no longer has.

export interface Generation {
  /** 1, 2, ...: the order of the generations. */
  n: number;
  /** Random: two branches that both began generation n are told apart. */
  id: string;
  /** The first offset written in this generation. */
  start: number;
}

/** What a reader sends back: `<n>-<id>`. */
export interface GenerationToken {
  n: number;
  id: string;
}

const TOKEN = /^([1-9][0-9]{0,8})-([0-9a-f]{1,32})$/;

export function parseGenerationToken(text: string): GenerationToken | null {
  const match = TOKEN.exec(text);
  return match ? { n: Number(match[1]), id: match[2]! } : null;
}

export const generationToken = (generation: GenerationToken): string => `${generation.n}-${generation.id}`;

let parsedText = '';
let parsed: readonly Generation[] = [];

/** The lineage as the store keeps it ('<n>-<id>:<start>,...', oldest first); one parse per change. */
export function parseLineage(text: string): readonly Generation[] {
  if (text === parsedText) return parsed;
  const generations = text.split(',').map((entry) => {
    const [token, start] = entry.split(':');
    const generation = parseGenerationToken(token ?? '');
    if (!generation || !Number.isSafeInteger(Number(start))) throw new Error(`malformed lineage entry "${entry}"`);
    return { ...generation, start: Number(start) };
  });
  parsedText = text;
  parsed = generations;
  return generations;
}

/**
 * The generation a reader served up to offset `servedUpTo` is under: the newest that began at or
 * before it. A newer one has no record of the reader's yet, and its start may not be durable (the
 * append that began it can be lost in a failover): a reader named by it would be told its copy
 * differs when it holds nothing of it. Not shown at all while the log has had one generation
 * only, since a reader that names none is taken to be of the first.
 */
export function servedGeneration(lineage: string, servedUpTo: number): string | undefined {
  const generations = parseLineage(lineage);
  if (generations.length === 1) return undefined;
  let shown = generations[0]!;
  for (const generation of generations) if (generation.start <= servedUpTo) shown = generation;
  return generationToken(shown);
}

/** The generation of a reader that names none: the first. */
export function firstGeneration(lineage: string): GenerationToken {
  return parseLineage(lineage)[0]!;
}

/** Whether this lineage names the reader's generation, or the reader learnt of a newer one elsewhere. */
export function knowsGeneration(lineage: string, token: GenerationToken): boolean {
  const generations = parseLineage(lineage);
  return token.n <= generations[generations.length - 1]!.n;
}

/**
 * null when a reader at `after` under `token` holds only records this log has; else the
 * first offset at which its copy may differ. A generation the lineage does not name was
 * lost whole: its reader's copy differs at the latest from where the log's generation of
 * that number began, or from the record after `after`.
 */
export function divergedFrom(after: number, token: GenerationToken, lineage: string, head: number): number | null {
  const generations = parseLineage(lineage);
  const index = generations.findIndex((generation) => generation.n === token.n);
  const own = generations[index];
  if (!own || own.id !== token.id) {
    const replaced = generations.find((generation) => generation.n >= token.n);
    return Math.min(after + 1, replaced?.start ?? head + 1);
  }
  const next = generations[index + 1];
  if (next && after >= next.start) return next.start;
  // The records the reader was served past the head were never written in this history.
  if (after > head) return head + 1;
  return null;
}
