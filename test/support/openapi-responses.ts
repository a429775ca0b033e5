// Checks real HTTP answers against openapi.yaml. The operation and status must be
// documented; the body must have a documented media type and match its schema (Ajv,
// JSON Schema 2020-12, as OpenAPI 3.1 uses); each documented header must be present when
// required and match its schema when sent. Streamed bodies are checked as the document
// describes them, as an array of their items: the lines of application/x-ndjson, each
// parsed as JSON, and the events of text/event-stream, each as an object of its fields
// (an event's `data` is checked against its `contentSchema`). Any test file can use it:
//
//   const res = await t.http.get('/v1/keys/a');
//   expectDocumented('GET', '/v1/keys/a', res);   // or the template '/v1/keys/{key}'
//
// Every answer that passes is recorded, so a test can check that each documented status
// of each route was really produced (exercisedResponses / documentedResponses).
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import type { DataValidateFunction } from 'ajv/dist/types/index.js';
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
// JSON Schema makes contentSchema an annotation only; here it is checked. A string whose
// contentMediaType is application/json must be JSON text that matches the contentSchema,
// which must be a local $ref (as every one in the document is).
ajv.removeKeyword('contentSchema');
ajv.addKeyword({
  keyword: 'contentSchema',
  schemaType: 'object',
  compile(schema: Node, parent: Node): DataValidateFunction {
    const ref = schema.$ref;
    if (typeof ref !== 'string' || !ref.startsWith('#/') || Object.keys(schema).length !== 1) {
      throw new Error(`openapi.yaml: a contentSchema must be a local $ref alone, got ${JSON.stringify(schema)}`);
    }
    if (parent.contentMediaType !== 'application/json') return () => true;
    const check: DataValidateFunction = (data: unknown) => {
      if (typeof data !== 'string') return true;
      let value: unknown;
      try {
        value = JSON.parse(data);
      } catch {
        check.errors = [{ keyword: 'contentSchema', message: `is not JSON: ${JSON.stringify(data.slice(0, 200))}`, params: {} }];
        return false;
      }
      const validate = schemaValidator(ref.slice(1));
      if (validate(value)) return true;
      check.errors = (validate.errors ?? []).map((e) => ({
        keyword: 'contentSchema',
        message: `as JSON: ${e.instancePath || '(the value)'} ${e.message ?? 'is invalid'} (at ${ref}${e.schemaPath.slice(1)})`,
        params: {},
      }));
      return false;
    };
    return check;
  },
});
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
  // The dashboard's static routes are checked against this document by
  // test/ui/ui-routes.test.ts, which builds and serves the page.
  return Object.entries(document.paths).filter(([template]) => !template.startsWith('/ui')).flatMap(([template, item]) =>
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

/** One event of a text/event-stream body: the fields it had. */
export interface EventFields {
  id?: string;
  event?: string;
  data?: string;
  retry?: number;
}

/**
 * The events of a text/event-stream body, parsed as the WHATWG HTML standard says
 * (lines end with CRLF, LF or CR; a blank line ends an event; `:` starts a comment; one
 * space after the colon is dropped; `data` lines are joined with LF; `retry` counts only
 * when it is digits). Each event is the object of the fields it had; a block of comments
 * only is no event, and an event not ended by a blank line (a stream cut short) is
 * dropped, as a client does.
 */
export function parseEventStream(text: string): EventFields[] {
  const events: EventFields[] = [];
  let pending: EventFields = {};
  let fields = 0;
  const lines = text.replace(/^\uFEFF/, '').split(/\r\n|\r|\n/);
  // The piece after the last line break is an unfinished line.
  lines.pop();
  for (const line of lines) {
    if (line === '') {
      if (fields > 0) events.push(pending);
      pending = {};
      fields = 0;
      continue;
    }
    if (line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const name = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (name === 'data') pending.data = pending.data === undefined ? value : `${pending.data}\n${value}`;
    else if (name === 'event') pending.event = value;
    else if (name === 'id' && !value.includes('\0')) pending.id = value;
    else if (name === 'retry' && /^[0-9]+$/.test(value)) pending.retry = Number(value);
    else continue;
    fields += 1;
  }
  return events;
}

const isJson = (mediaType: string): boolean => /^application\/(.+\+)?json$/.test(mediaType);

/**
 * A body as its schema describes it: JSON parsed; the lines of application/x-ndjson,
 * each parsed; the events of text/event-stream; any other text as it is. Or what is
 * wrong with it.
 */
function bodyValue(mediaType: string, text: string): { value: unknown } | { problem: string } {
  if (mediaType === 'text/event-stream') return { value: parseEventStream(text) };
  if (mediaType === 'application/x-ndjson') {
    if (text === '') return { value: [] };
    if (!text.endsWith('\n')) return { problem: `the last line does not end with \\n: ${JSON.stringify(text.slice(-200))}` };
    const lines: unknown[] = [];
    for (const [index, line] of text.slice(0, -1).split('\n').entries()) {
      try {
        lines.push(JSON.parse(line));
      } catch {
        return { problem: `line ${index + 1} is not JSON: ${JSON.stringify(line.slice(0, 200))}` };
      }
    }
    return { value: lines };
  }
  if (!isJson(mediaType)) return { value: text };
  try {
    return { value: JSON.parse(text) };
  } catch {
    return { problem: `the body is not JSON: ${JSON.stringify(text.slice(0, 200))}` };
  }
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
  const body = bodyValue(mediaType, text);
  if ('problem' in body) return [body.problem];
  return schemaProblems(`${responsePointer}${pointerTo('content', mediaType, 'schema')}`, body.value, 'body');
}

/**
 * What is wrong with the examples of the documented answers (empty: nothing): each must
 * match its media type's schema, read as an answer's body would be (a JSON example may
 * be written as YAML; any other is the body's text).
 */
export function exampleProblems(): string[] {
  const problems: string[] = [];
  for (const route of documentedRoutes()) {
    const [method, template] = route.split(' ') as [string, string];
    const responses = (document.paths[template]![method.toLowerCase()] as Node).responses as Node;
    for (const status of Object.keys(responses)) {
      const response = objectAt(pointerTo('paths', template, method.toLowerCase(), 'responses', status))!;
      for (const [mediaType, media] of Object.entries((response.node.content ?? {}) as Record<string, Node>)) {
        const named = Object.values((media.examples ?? {}) as Record<string, Node>).map((example) => example.value);
        for (const example of 'example' in media ? [media.example, ...named] : named) {
          const body =
            isJson(mediaType) && typeof example !== 'string'
              ? { value: example }
              : typeof example === 'string'
                ? bodyValue(mediaType, example)
                : { problem: 'is not text' };
          const what = `${route} ${status} ${mediaType} example`;
          if ('problem' in body) problems.push(`${what}: ${body.problem}`);
          else problems.push(...schemaProblems(`${response.pointer}${pointerTo('content', mediaType, 'schema')}`, body.value, what));
        }
      }
    }
  }
  return problems;
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
