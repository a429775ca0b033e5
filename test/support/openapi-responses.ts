// Checks real HTTP answers against openapi.yaml. The operation and status must be
// documented; the body must have a documented media type and match its schema (Ajv,
// JSON Schema 2020-12, as OpenAPI 3.1 uses); each documented header must be present when
// required and match its schema when sent. Any test file can use it:
//
//   const res = await t.http.get('/v1/keys/a');
//   expectDocumented('GET', '/v1/keys/a', res);   // or the template '/v1/keys/{key}'
//
// Every answer that passes is recorded, so a test can check that each documented status
// of each route was really produced (exercisedResponses / documentedResponses).
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { parse } from 'yaml';

export const OPENAPI_FILE = fileURLToPath(new URL('../../openapi.yaml', import.meta.url));

const METHODS = ['get', 'put', 'post', 'delete', 'patch', 'head', 'options', 'trace'];
const DOCUMENT_ID = 'urn:statelog:openapi';

type Node = Record<string, unknown>;

export interface OpenApiDocument {
  openapi: string;
  info: Node;
  paths: Record<string, Node>;
  components?: Node;
  [member: string]: unknown;
}

/** What is checked of an answer: supertest's Response has all of it. */
export interface HttpAnswer {
  status: number;
  headers: Record<string, unknown>;
  text?: string;
}

/** A fresh, parsed copy of openapi.yaml. */
export function loadOpenApi(): OpenApiDocument {
  return parse(readFileSync(OPENAPI_FILE, 'utf8')) as OpenApiDocument;
}

const document = loadOpenApi();

const ajv = new Ajv2020({
  allErrors: true,
  // Unknown keywords (typos such as "additionalProperty") are errors; the other strict
  // checks would refuse ordinary OpenAPI idioms such as allOf refinements.
  strictSchema: true,
  strictTypes: false,
  strictTuples: false,
  strictRequired: false,
  allowUnionTypes: true,
});
addFormats.default(ajv);
// The whole document is one Ajv schema so that "#/components/..." references resolve;
// its top-level members are not JSON Schema keywords.
for (const member of Object.keys(document)) ajv.addKeyword(member);
ajv.addSchema(document, DOCUMENT_ID);

const escape = (segment: string): string => segment.replace(/~/g, '~0').replace(/\//g, '~1');
const unescape = (segment: string): string => decodeURIComponent(segment).replace(/~1/g, '/').replace(/~0/g, '~');

/** The JSON pointer of a place in the document, from its unescaped segments. */
export function pointerTo(...segments: string[]): string {
  return segments.map((segment) => `/${escape(segment)}`).join('');
}

function valueAt(pointer: string): unknown {
  let value: unknown = document;
  for (const segment of pointer.split('/').slice(1)) {
    value = value && typeof value === 'object' ? (value as Node)[unescape(segment)] : undefined;
  }
  return value;
}

/** The object at `pointer`, following OpenAPI `$ref`s (responses, headers, parameters). */
function objectAt(pointer: string): { node: Node; pointer: string } | undefined {
  for (let hops = 0; hops < 10; hops += 1) {
    const node = valueAt(pointer);
    if (!node || typeof node !== 'object') return undefined;
    const ref = (node as Node).$ref;
    if (typeof ref !== 'string') return { node: node as Node, pointer };
    if (!ref.startsWith('#/')) throw new Error(`openapi.yaml: only local references are supported, got ${ref}`);
    pointer = ref.slice(1);
  }
  throw new Error(`openapi.yaml: reference loop at ${pointer}`);
}

const validators = new Map<string, ValidateFunction>();

/** A validator for the JSON Schema at `pointer` (compiled once). */
export function schemaValidator(pointer: string): ValidateFunction {
  let validator = validators.get(pointer);
  if (!validator) {
    const fragment = pointer.split('/').map(encodeURIComponent).join('/');
    validator = ajv.compile({ $ref: `${DOCUMENT_ID}#${fragment}` });
    validators.set(pointer, validator);
  }
  return validator;
}

function schemaProblems(pointer: string, value: unknown, what: string): string[] {
  const validate = schemaValidator(pointer);
  if (validate(value)) return [];
  return (validate.errors ?? []).map(
    (e) => `${what}${e.instancePath || ''} ${e.message ?? 'is invalid'} (${JSON.stringify(e.params)}, at ${e.schemaPath})`,
  );
}

/** Every path template of the document ("/v1/keys/{key}"), literal ones first. */
function templates(): string[] {
  const all = Object.keys(document.paths);
  return [...all.filter((t) => !t.includes('{')), ...all.filter((t) => t.includes('{'))];
}

/** The document's path template for a request path (query string ignored), or undefined. */
export function templateFor(path: string): string | undefined {
  const bare = path.split('?', 1)[0]!;
  if (bare in document.paths) return bare;
  return templates().find((template) => {
    const pattern = template
      .split(/\{[^}]+\}/)
      .map((part) => part.replace(/[.*+?^$()|[\]\\]/g, '\\$&'))
      .join('[^/]+');
    return new RegExp(`^${pattern}$`).test(bare);
  });
}

/** "PUT /v1/keys/{key}" for every operation in the document. */
export function documentedRoutes(): string[] {
  return Object.entries(document.paths).flatMap(([template, item]) =>
    METHODS.filter((method) => method in item).map((method) => `${method.toUpperCase()} ${template}`),
  );
}

/** "PUT /v1/keys/{key} 412" for every documented status of every operation. */
export function documentedResponses(): string[] {
  return documentedRoutes().flatMap((route) => {
    const [method, template] = route.split(' ') as [string, string];
    const responses = (document.paths[template]![method.toLowerCase()] as Node).responses as Node;
    return Object.keys(responses).map((status) => `${route} ${status}`);
  });
}

const exercised = new Set<string>();

/** The "METHOD template status" of every answer that passed expectDocumented so far. */
export function exercisedResponses(): ReadonlySet<string> {
  return exercised;
}

function headerText(value: unknown): string | undefined {
  if (value === undefined) return undefined;
  return Array.isArray(value) ? value.join(', ') : String(value);
}

function headerProblems(responsePointer: string, response: Node, answer: HttpAnswer): string[] {
  const problems: string[] = [];
  const headers = (response.headers ?? {}) as Node;
  for (const name of Object.keys(headers)) {
    // OpenAPI: a Content-Type entry in headers is ignored (content says it).
    if (name.toLowerCase() === 'content-type') continue;
    const header = objectAt(`${responsePointer}${pointerTo('headers', name)}`)!;
    const value = headerText(answer.headers[name.toLowerCase()]);
    if (value === undefined) {
      if (header.node.required === true) problems.push(`header ${name} is required but missing`);
      continue;
    }
    if (header.node.schema) {
      problems.push(...schemaProblems(`${header.pointer}/schema`, value, `header ${name}`));
    }
  }
  return problems;
}

function bodyProblems(method: string, responsePointer: string, response: Node, answer: HttpAnswer): string[] {
  const text = answer.text ?? '';
  const content = response.content as Node | undefined;
  if (method === 'HEAD') return text === '' ? [] : ['a HEAD answer has a body'];
  if (!content) return text === '' ? [] : [`no body is documented, got ${JSON.stringify(text.slice(0, 200))}`];
  const contentType = headerText(answer.headers['content-type']);
  const mediaType = contentType?.split(';', 1)[0]!.trim().toLowerCase();
  if (!mediaType || !(mediaType in content)) {
    return [`content type ${contentType ?? '(none)'} is not one of ${Object.keys(content).join(', ')}`];
  }
  if (!(content[mediaType] as Node).schema) return [];
  const schemaPointer = `${responsePointer}${pointerTo('content', mediaType, 'schema')}`;
  if (!/^application\/(.+\+)?json$/.test(mediaType)) return schemaProblems(schemaPointer, text, 'body');
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return [`the body is not JSON: ${JSON.stringify(text.slice(0, 200))}`];
  }
  return schemaProblems(schemaPointer, body, 'body');
}

/**
 * What is wrong with an answer to `method path` by the document (empty: nothing).
 * `path` is a request path ("/v1/keys/a%2Fb?x") or a template ("/v1/keys/{key}").
 */
export function undocumented(method: string, path: string, answer: HttpAnswer): string[] {
  const upper = method.toUpperCase();
  const template = templateFor(path);
  if (!template) return [`no path in openapi.yaml matches ${path}`];
  const item = document.paths[template]!;
  // HEAD is answered by every GET route and not listed separately.
  const operation = upper === 'HEAD' && !('head' in item) ? 'get' : upper.toLowerCase();
  if (!(operation in item)) return [`openapi.yaml has no ${upper} ${template}`];
  const status = String(answer.status);
  const responsePointer = pointerTo('paths', template, operation, 'responses', status);
  const response = objectAt(responsePointer);
  if (!response) return [`status ${status} is not documented for ${upper} ${template}`];
  const problems = [
    ...bodyProblems(upper, response.pointer, response.node, answer),
    ...headerProblems(response.pointer, response.node, answer),
  ];
  if (problems.length === 0) exercised.add(`${upper === 'HEAD' ? 'GET' : upper} ${template} ${status}`);
  return problems;
}

/** Throws, naming every difference, unless the answer is as openapi.yaml documents it. */
export function expectDocumented(method: string, path: string, answer: HttpAnswer): void {
  const problems = undocumented(method, path, answer);
  if (problems.length > 0) {
    const body = (answer.text ?? '').slice(0, 500);
    throw new Error(
      `${method} ${path} → ${answer.status} disagrees with openapi.yaml:\n  - ${problems.join('\n  - ')}\n  body: ${body}`,
    );
  }
}

/** What is wrong with a request body by the operation's documented schema (empty: nothing). */
export function requestBodyProblems(method: string, template: string, body: unknown): string[] {
  const pointer = pointerTo('paths', template, method.toLowerCase(), 'requestBody');
  const requestBody = objectAt(pointer);
  if (!requestBody) return [`openapi.yaml has no request body for ${method} ${template}`];
  return schemaProblems(`${requestBody.pointer}${pointerTo('content', 'application/json', 'schema')}`, body, 'request');
}

/** The pointer of every JSON Schema in the document: components.schemas and each `schema`. */
export function schemaPointers(): string[] {
  const found: string[] = [];
  const walk = (node: unknown, pointer: string): void => {
    if (!node || typeof node !== 'object') return;
    for (const [member, child] of Object.entries(node)) {
      const at = `${pointer}${pointerTo(member)}`;
      if (member === 'schema' && child && typeof child === 'object') found.push(at);
      else walk(child, at);
    }
  };
  walk(document.paths, pointerTo('paths'));
  for (const [section, entries] of Object.entries(document.components ?? {})) {
    if (section !== 'schemas') walk(entries, pointerTo('components', section));
  }
  const schemas = (document.components?.schemas ?? {}) as Node;
  found.push(...Object.keys(schemas).map((name) => pointerTo('components', 'schemas', name)));
  return found;
}
