# syntax=docker/dockerfile:1
# One image for every service; SERVICES picks what a container runs (k8s/ runs it in every pod).
#
# build:   installs everything (TypeScript included), compiles the runtime files to dist/ with
#          `npm run build` (tsconfig.build.json), then drops the development packages.
# runtime: Node 22, the production packages and dist/ only: no TypeScript sources, no tsx. It runs
#          as an unprivileged user (uid 1000) on a read-only root filesystem; what the product
#          writes goes to the volumes below (and /tmp, where the gateway spools uploads).

FROM node:22-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# `npm install` rather than `npm ci` (README: this lock file records only one platform's optional
# packages). No install scripts: no production package needs one, and the devDependency node@22's
# would fetch a second Node (this image's is already 22): its unfilled bin link goes too, so npm
# scripts run this image's node.
RUN npm install --no-audit --no-fund --ignore-scripts \
  && rm -rf node_modules/node node_modules/.bin/node
# The sources (.dockerignore keeps out tests, benches, docs, manifests and local data), whatever
# folders tsconfig.build.json compiles.
COPY . .
RUN npm run build \
  && test -f dist/scripts/start.js \
  && test -f dist/scripts/migrate.js \
  && test -f dist/services/exports/exports.worker.js \
  && test -f dist/services/contacts/contacts.worker.js \
  && npm prune --omit=dev --no-audit --no-fund

FROM node:22-bookworm-slim AS runtime
# tini as PID 1: it forwards SIGTERM to node (whose handler leaves readiness, stops the broker and
# closes the database, scripts/start.ts) and reaps any child.
RUN apt-get update \
  && apt-get install -y --no-install-recommends tini \
  && rm -rf /var/lib/apt/lists/*
WORKDIR /app
# MALLOC_TRIM_THRESHOLD_: glibc gives freed memory back to the system past 128 KiB instead of
# keeping it (an idle process's RSS; docs/operating.md "Memory"), as npm start does.
ENV NODE_ENV=production \
  DATA_DIR=/var/lib/pgw \
  TMPDIR=/tmp \
  MALLOC_TRIM_THRESHOLD_=131072
COPY --from=build /app/package.json ./package.json
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
# The API reference's browser bundle (/docs), vendored: services/gateway/gateway.docs.ts.
COPY --from=build /app/vendor ./vendor
# The writable places, owned by the runtime user; Kubernetes mounts volumes over them (exports and
# media: persistent volumes; imports and /tmp: emptyDir). Everything else stays read-only.
RUN mkdir -p /var/lib/pgw/exports /var/lib/pgw/media /var/lib/pgw/imports \
  && chown -R 1000:1000 /var/lib/pgw \
  && chmod -R go-w /app
VOLUME ["/var/lib/pgw", "/tmp"]
# Numeric, so that Kubernetes' runAsNonRoot can check it.
USER 1000:1000
EXPOSE 3000 3001
ENTRYPOINT ["/usr/bin/tini", "--"]
# The migration Job runs `node dist/scripts/migrate.js` instead (k8s/base/migrate-job.yaml).
CMD ["node", "--experimental-async-context-frame", "dist/scripts/start.js"]
