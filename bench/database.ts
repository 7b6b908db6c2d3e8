/** A fresh PostgreSQL database for one bench run, under BENCH_DATABASE_URL (dropped by `drop`). */
import { randomBytes } from "node:crypto";
import pg from "pg";

export const BENCH_BASE_URL = process.env.BENCH_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";

export async function createBenchDatabase(): Promise<{ url: string; drop(): Promise<void> }> {
  const name = `pgw_bench_${randomBytes(4).toString("hex")}`;
  const admin = new pg.Client({ connectionString: BENCH_BASE_URL });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  const url = new URL(BENCH_BASE_URL);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    async drop() {
      await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).catch(() => undefined);
      await admin.end();
    },
  };
}
