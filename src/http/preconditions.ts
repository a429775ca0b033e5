// HTTP conditional headers (If-Match, If-None-Match) as the store's conditions.
// Offsets are the ETags: "N" (quoted, as sent) or N are both accepted.
import { ApiError } from '../contract/errors.js';
import type { Condition } from '../contract/model.js';

type Header = string | string[] | undefined;

function single(name: string, header: Header): string | undefined {
  if (header === undefined) return undefined;
  if (Array.isArray(header)) throw new ApiError('invalid_request', `${name} must be given once`);
  return header.trim();
}

/** Parses one entity tag: "17", 17 or W/"17" → 17. */
function parseTag(tag: string): number | null {
  const match = /^(?:W\/)?"?(\d{1,16})"?$/.exec(tag.trim());
  if (!match) return null;
  const value = Number(match[1]);
  return Number.isSafeInteger(value) ? value : null;
}

export function writeCondition(ifMatch: Header, ifNoneMatch: Header): Condition {
  const match = single('If-Match', ifMatch);
  const noneMatch = single('If-None-Match', ifNoneMatch);
  const condition: Condition = {};
  if (match !== undefined) {
    if (match === '*') condition.ifLive = true;
    else {
      const offset = parseTag(match);
      if (offset === null) throw new ApiError('invalid_request', 'If-Match must be "*" or one offset, such as "17"');
      condition.ifOffset = offset;
    }
  }
  if (noneMatch !== undefined) {
    if (noneMatch !== '*') throw new ApiError('invalid_request', 'If-None-Match on a write must be "*"');
    condition.ifAbsent = true;
  }
  return condition;
}

/** For a GET: true when If-None-Match names the current offset (or is *). */
export function notModified(ifNoneMatch: Header, offset: number): boolean {
  if (ifNoneMatch === undefined) return false;
  const tags = (Array.isArray(ifNoneMatch) ? ifNoneMatch.join(',') : ifNoneMatch).split(',');
  return tags.some((tag) => tag.trim() === '*' || parseTag(tag) === offset);
}

export const etag = (offset: number): string => `"${offset}"`;
