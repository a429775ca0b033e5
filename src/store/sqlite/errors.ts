// better-sqlite3's errors by kind (store-errors.ts), by SQLite's result codes.
import { NO_SPACE_CODES, type ErrorKinds } from '../store-errors.js';

export const sqliteErrorKinds: ErrorKinds = (err) => {
  const code = err.code;
  if (typeof code !== 'string') return null;
  // Extended codes (SQLITE_CORRUPT_INDEX, SQLITE_BUSY_SNAPSHOT...) are of their primary's kind.
  if (code.startsWith('SQLITE_CORRUPT') || code === 'SQLITE_NOTADB') return 'corrupt';
  // The disk, or a file-size limit.
  if (code === 'SQLITE_FULL' || NO_SPACE_CODES.has(code)) return 'no_space';
  if (code.startsWith('SQLITE_BUSY')) return 'busy';
  return null;
};
