# statelog container image.
# Build stage: compile TypeScript, the dashboard and the native SQLite module (better-sqlite3), then
# drop the dev dependencies. Run stage: only what runs, as an unprivileged user.

FROM node:22-bookworm-slim AS build
WORKDIR /app
# better-sqlite3 compiles from source when no prebuilt binary fits this platform.
RUN apt-get update \
  && apt-get install -y --no-install-recommends python3 make g++ \
  && rm -rf /var/lib/apt/lists/*
# The lockfile installs the workspace too (packages/client, which the CLI uses). Scripts
# wait for the sources: only the native modules' own install steps run here.
COPY package.json package-lock.json ./
COPY packages/client/package.json ./packages/client/
RUN npm ci --no-audit --no-fund --ignore-scripts && npm rebuild better-sqlite3 esbuild
COPY tsconfig.json ./
COPY src ./src
COPY packages ./packages
# The dashboard (served at /ui): browser code, and the script that bundles it into dist/ui.
COPY ui ./ui
COPY scripts ./scripts
RUN npm run build && npm prune --omit=dev

FROM node:22-bookworm-slim
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=8080 \
    STATELOG_DB=/data/statelog.db
WORKDIR /app
COPY --from=build /app/package.json ./
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY --from=build /app/packages/client/package.json ./packages/client/
COPY --from=build /app/packages/client/dist ./packages/client/dist
COPY migrations ./migrations
# The image's own "node" user (uid 1000) owns the data folder and nothing else.
RUN mkdir -p /data && chown node:node /data
VOLUME ["/data"]
USER node
EXPOSE 8080
# No curl in slim images: node asks /healthz itself.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.PORT || 8080) + '/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# SIGTERM: stop accepting, finish writes in flight, checkpoint, exit 0 (within 10 s).
STOPSIGNAL SIGTERM
CMD ["node", "dist/server.js"]
