/**
 * `npm run openapi`: writes openapi.json, the OpenAPI 3.1 document of every service, as the
 * gateway generates it (an in-memory database, nothing persisted), then the typed client's types
 * generated from it (clients/typescript/schema.ts) and the gateway's table of the API's routes
 * (lib/http/api-routes.ts). Tests keep the committed files equal to what
 * the running gateway serves and to what the committed document generates.
 */
import fs from "node:fs";
import path from "node:path";
import { API_PREFIX } from "../lib/http/api";
import { API_ROUTES_FILE, apiRoutesSource } from "../lib/http/api-routes-source";
import { startApp } from "../app/start-app";
import { ALL_SERVICES, loadConfig } from "../lib/config";
import { openDatabase } from "../lib/db/db";
import { writeClientSchema } from "./openapi-client";

export const OPENAPI_FILE = "openapi.json";

async function main() {
  const config = loadConfig({ LOG_LEVEL: "warn", LOG_FORMAT: "json" }, { port: 0, internalPort: 0, host: "127.0.0.1", publicBaseUrl: "http://localhost:3000" });
  const db = await openDatabase({ databaseUrl: null, dataDir: null });
  const app = await startApp(config, { db, services: ALL_SERVICES });
  try {
    for (let i = 0; i < 100; i++) {
      const r = await fetch(`http://127.0.0.1:${app.port}/healthz/ready`);
      if (r.ok) break;
      await new Promise((res) => setTimeout(res, 50));
    }
    const doc = (await (await fetch(`http://127.0.0.1:${app.port}${API_PREFIX}/openapi.json`)).json()) as { paths: Record<string, unknown> };
    fs.writeFileSync(OPENAPI_FILE, `${JSON.stringify(doc, null, 2)}\n`);
    process.stdout.write(`wrote ${OPENAPI_FILE}: ${Object.keys(doc.paths).length} paths\n`);
    fs.writeFileSync(API_ROUTES_FILE, apiRoutesSource(doc as Parameters<typeof apiRoutesSource>[0]));
    process.stdout.write(`wrote ${path.relative(process.cwd(), API_ROUTES_FILE)}\n`);
    const schema = await writeClientSchema(doc);
    process.stdout.write(`wrote ${path.relative(process.cwd(), schema)}\n`);
  } finally {
    await app.stop();
    await db.close();
  }
}

void main();
