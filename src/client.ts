// statelog/client: the client package (packages/client), re-exported for code that
// depends on the server package.
export * from '@statelog/client';
