# One image for every service; SERVICES picks what a container runs.
FROM node:22-bookworm-slim
WORKDIR /app
ENV NODE_ENV=production
COPY package.json package-lock.json ./
# The node@22 devDependency is not needed in the image: its Node is already 22.
RUN npm install --omit=dev --no-audit --no-fund
COPY tsconfig.json moleculer.config.ts ./
COPY lib ./lib
COPY migrations ./migrations
COPY services ./services
COPY scripts ./scripts
USER node
EXPOSE 3000 3001
CMD ["node", "--experimental-async-context-frame", "--import", "tsx", "scripts/start.ts"]
