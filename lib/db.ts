/**
 * The database: PostgreSQL at DATABASE_URL, or embedded PGlite under DATA_DIR; the same Sequelize
 * code runs on both. Schema changes only through umzug migrations, run at start under a PostgreSQL
 * advisory lock so that replicas starting together do not race.
 */
import pg from "pg";
import { Sequelize } from "sequelize";
import { SequelizeStorage, Umzug } from "umzug";
import { migrations } from "../migrations";
import { openEmbedded, type OpenerRole } from "./embedded-db";

export interface Database {
  readonly sequelize: Sequelize;
  /** The connection URL in use (the embedded socket server's, when embedded). */
  readonly url: string;
  readonly embedded: boolean;
  /** Resolves when the database answers a trivial query within `timeoutMs`. */
  ping(timeoutMs?: number): Promise<void>;
  close(): Promise<void>;
}

export interface OpenOptions {
  databaseUrl: string | null;
  /** Embedded data directory; null means an in-memory embedded database (tests). */
  dataDir: string | null;
  role?: OpenerRole;
  poolMax?: number;
  /** Run migrations before returning (default true). */
  migrate?: boolean;
  /**
   * `statement_timeout` of every connection of the pool, in ms (DB_STATEMENT_TIMEOUT_MS): no
   * statement runs unbounded. Heavy reads set a lower one for their transaction (lib/heavy.ts).
   * Unset: the server's (the admin and migrate commands).
   */
  statementTimeoutMs?: number;
}

/** A fixed 64-bit key for the migration advisory lock ("pgw-migrations"). */
const MIGRATION_LOCK_KEY = "7234567890123456789";

export async function openDatabase(opts: OpenOptions): Promise<Database> {
  const embedded = opts.databaseUrl ? null : await openEmbedded(opts.dataDir, opts.role ?? "service");
  const url = opts.databaseUrl ?? embedded!.url;
  const sequelize = new Sequelize(url, {
    dialect: "postgres",
    logging: false,
    pool: { max: opts.poolMax ?? 10, min: 0, idle: 10000, acquire: 30000 },
    // A server that does not answer a connection within 5 s counts as down (pg waits forever by
    // default); TCP keep-alive finds a connection whose peer vanished without closing it.
    dialectOptions: {
      application_name: "partner-gateway",
      connectionTimeoutMillis: 5000,
      keepAlive: true,
      ...(opts.statementTimeoutMs ? { statement_timeout: opts.statementTimeoutMs } : {}),
    },
    define: { underscored: true, timestamps: false },
  });
  const db: Database = {
    sequelize,
    url,
    embedded: embedded != null,
    async ping(timeoutMs = 2000) {
      let timer: NodeJS.Timeout | undefined;
      try {
        await Promise.race([
          sequelize.query("SELECT 1"),
          new Promise((_, reject) => {
            timer = setTimeout(() => reject(new Error("database did not answer in time")), timeoutMs);
          }),
        ]);
      } finally {
        clearTimeout(timer);
      }
    },
    async close() {
      await sequelize.close().catch(() => undefined);
      await embedded?.close();
    },
  };
  try {
    if (opts.migrate !== false) await migrate(db);
    return db;
  } catch (e) {
    await db.close();
    throw e;
  }
}

export function migrator(db: Database) {
  return new Umzug({
    migrations: migrations.map((m) => ({ name: m.name, up: () => m.up(db.sequelize), down: () => m.down(db.sequelize) })),
    context: db.sequelize,
    storage: new SequelizeStorage({ sequelize: db.sequelize, tableName: "schema_migrations" }),
    logger: undefined,
  });
}

/** Migrations of one database run one at a time within this process too (PGlite shares one session). */
const running = new Map<string, Promise<unknown>>();

/** Applies pending migrations while holding a session-level advisory lock on its own connection. */
export function migrate(db: Database): Promise<string[]> {
  const before = running.get(db.url) ?? Promise.resolve();
  const mine = before.catch(() => undefined).then(() => migrateLocked(db));
  running.set(db.url, mine);
  void mine
    .finally(() => {
      if (running.get(db.url) === mine) running.delete(db.url);
    })
    .catch(() => undefined);
  return mine;
}

async function migrateLocked(db: Database): Promise<string[]> {
  const lock = new pg.Client({ connectionString: db.url });
  await lock.connect();
  try {
    await lock.query("SELECT pg_advisory_lock($1::bigint)", [MIGRATION_LOCK_KEY]);
    const applied = await migrator(db).up();
    return applied.map((m) => m.name);
  } finally {
    await lock.query("SELECT pg_advisory_unlock($1::bigint)", [MIGRATION_LOCK_KEY]).catch(() => undefined);
    await lock.end().catch(() => undefined);
  }
}

/** Runs SQL with positional parameters on one connection and answers the rows. */
export type Exec = <T extends object = Record<string, unknown>>(sql: string, params?: unknown[]) => Promise<T[]>;

interface RawConnectionManager {
  getConnection(opts: { type: "read" | "write" }): Promise<pg.Client>;
  releaseConnection(client: pg.Client): void;
  destroyConnection(client: pg.Client): Promise<void>;
}

/**
 * One statement (atomic by itself) on a connection of Sequelize's own pool, driven with `pg`
 * directly; see rawTransaction. With `name`, the statement is prepared once per connection and
 * its plan reused (for statements a hot loop runs again and again).
 */
export async function rawQuery<T extends object>(sequelize: Sequelize, sql: string, params?: unknown[], name?: string): Promise<T[]> {
  const cm = (sequelize as unknown as { connectionManager: RawConnectionManager }).connectionManager;
  const client = await cm.getConnection({ type: "write" });
  try {
    return (await client.query<T>(name ? { name, text: sql, values: params } : { text: sql, values: params })).rows;
  } finally {
    cm.releaseConnection(client);
  }
}

/**
 * A transaction on a connection of Sequelize's own pool, driven with `pg` directly: for hot paths
 * (the ingress) where Sequelize's per-query work (formatting, logging hooks, result mapping) would
 * cost more than the statement. A connection whose ROLLBACK failed is destroyed, not reused.
 */
export async function rawTransaction<T>(sequelize: Sequelize, fn: (exec: Exec) => Promise<T>): Promise<T> {
  const cm = (sequelize as unknown as { connectionManager: RawConnectionManager }).connectionManager;
  const client = await cm.getConnection({ type: "write" });
  let healthy = true;
  try {
    await client.query("BEGIN");
    const exec: Exec = async <R extends object>(sql: string, params?: unknown[]) => (await client.query<R>(sql, params)).rows;
    const out = await fn(exec);
    await client.query("COMMIT");
    return out;
  } catch (err) {
    await client.query("ROLLBACK").catch(() => {
      healthy = false;
    });
    throw err;
  } finally {
    if (healthy) cm.releaseConnection(client);
    else await cm.destroyConnection(client).catch(() => undefined);
  }
}

/**
 * A JSON parameter (`$n::jsonb`), made by `make` and serialised only when the driver writes the statement: `pg` calls
 * `toPostgres` then, copies the text into its message, and nothing holds the text afterwards. A
 * batch's JSON (hundreds of KB, so a V8 large object) bound as a string stays referenced until the
 * statement answers; a collection during that wait keeps it until the next full collection, and an
 * import of a million rows grew the main thread's heap by tens of MB that way (bench/contacts import).
 */
export function jsonParam(make: () => unknown): { toPostgres(): string } {
  return { toPostgres: () => JSON.stringify(make()) };
}
