// node-postgres's errors by kind (store-errors.ts): PostgreSQL's SQLSTATEs, Node's
// socket codes, and the messages node-postgres gives errors without a code.
import { NO_SPACE_CODES, type ErrorKinds } from '../store-errors.js';

/** Socket errors on the way to the database (Node's codes). */
const NETWORK_CODES: ReadonlySet<string> = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ECONNABORTED',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'EHOSTDOWN',
  'ENETUNREACH',
  'ENETDOWN',
  'ENOTFOUND',
  'EAI_AGAIN',
]);

/** SQLSTATEs of a server that cannot serve now; class 08 (connection exceptions) is matched whole. */
const SERVER_STATES: ReadonlySet<string> = new Set([
  '57P01', // admin_shutdown: the server is stopping, or pg_terminate_backend()
  '57P02', // crash_shutdown: another backend crashed
  '57P03', // cannot_connect_now: starting up or in recovery
  '53300', // too_many_connections
  '25006', // read_only_sql_transaction: connected to a standby during a failover
]);

/**
 * A statement that needs a transaction id on a standby (a barrier's WAL message, on a
 * connection that reached one during a failover): PostgreSQL gives it internal_error
 * (XX000), not read_only_sql_transaction, so it is told by its message.
 */
const STANDBY_MESSAGES = /^cannot assign TransactionIds during recovery/;

/** A dropped connection, a connection timeout (the client's or the pool's), a client a broken connection left unusable. */
const DRIVER_MESSAGES =
  /^(Connection terminated|timeout expired$|timeout exceeded when trying to connect|Client has encountered a connection error|Client was closed and is not queryable|Query read timeout)/;

export const postgresErrorKinds: ErrorKinds = (err) => {
  const code = err.code;
  if (code === 'XX001' || code === 'XX002') return 'corrupt'; // data_corrupted, index_corrupted
  if (code === '53100' || NO_SPACE_CODES.has(code)) return 'no_space'; // disk_full
  if (typeof code === 'string' && (NETWORK_CODES.has(code) || SERVER_STATES.has(code) || /^08[0-9A-Z]{3}$/.test(code))) return 'unavailable';
  if (code === 'XX000' && STANDBY_MESSAGES.test(err.message)) return 'unavailable';
  return DRIVER_MESSAGES.test(err.message) ? 'unavailable' : null;
};
