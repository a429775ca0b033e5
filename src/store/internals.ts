// The key of what a store shows only to tests and benchmarks (test/support/store-access.ts
// reads it): a symbol, so that it is no part of any class's API and no caller in src/
// reaches it by accident.
export const STORE_INTERNALS = Symbol('statelog.store.internals');
