/**
 * The database: PostgreSQL at DATABASE_URL, or embedded PGlite under DATA_DIR; the same Sequelize
 * code runs on both. Schema changes only through umzug migrations, run at start under a PostgreSQL
 * advisory lock so that replicas starting together do not race.
 */
import pg from "pg";
import { QueryTypes, Sequelize, type Transaction } from "sequelize";
import { SequelizeStorage, Umzug } from "umzug";
import { migrations } from "../../migrations";
import { openEmbedded, type OpenerRole } from "./embedded-db";

export interface Database {
  readonly sequelize: Sequelize;
  /** The connection URL in use (the embedded socket server's, when embedded). */
  readonly url: string;
  readonly embedded: boolean;
  /** Resolves when the database answers a trivial query within `timeoutMs`. */
  ping(timeoutMs?: number): Promise<void>;
  /** The pool as Sequelize's public hooks show it (lib/observability/runtime-metrics.ts). */
  poolStats(): PoolStats;
  close(): Promise<void>;
}

export interface PoolStats {
  /** Connections open (connected, not yet closed): in use or idle. */
  open: number;
  /** Callers waiting for a connection. */
  waiting: number;
  /** The pool's limit. */
  max: number;
}

/** The pool's acquire limit (ms): a wait longer than this has failed. */
const ACQUIRE_MS = 30_000;

/**
 * Counts the pool through Sequelize's documented connection hooks (afterConnect, afterDisconnect,
 * beforePoolAcquire, afterPoolAcquire), not its private connection manager. A failed acquire has no
 * hook of its own, so a wait is counted until it is served or the acquire limit has passed.
 */
function poolCounter(sequelize: Sequelize, max: number): () => PoolStats {
  let open = 0;
  const waits = new Map<object, number>();
  sequelize.addHook("afterConnect", () => {
    open += 1;
  });
  sequelize.addHook("afterDisconnect", () => {
    open = Math.max(0, open - 1);
  });
  sequelize.addHook("beforePoolAcquire", (options: object) => {
    waits.set(options, Date.now());
  });
  sequelize.addHook("afterPoolAcquire", (_connection: unknown, options: object) => {
    waits.delete(options);
  });
  return () => {
    const stale = Date.now() - ACQUIRE_MS;
    for (const [key, since] of waits) if (since < stale) waits.delete(key);
    return { open, waiting: waits.size, max };
  };
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
   * statement runs unbounded. Heavy reads set a lower one for their transaction (lib/db/heavy.ts).
   * Unset: the server's (the admin and migrate commands).
   */
  statementTimeoutMs?: number;
  /** In-memory embedded only: start from this PGlite `dumpDataDir` tarball (tests' migrated snapshot). */
  embeddedSnapshot?: Blob;
  /** Told what the opening is doing (`npm start` prints it). */
  onProgress?: (progress: OpenProgress) => void;
}

/** A step of opening the database: the embedded one opened (`created`: its first start), then each migration run. */
export type OpenProgress = { step: "embedded"; dataDir: string; created: boolean } | { step: "migrating"; index: number; total: number; name: string };

/** A fixed 64-bit key for the migration advisory lock ("pgw-migrations"). */
const MIGRATION_LOCK_KEY = "7234567890123456789";

export async function openDatabase(opts: OpenOptions): Promise<Database> {
  const embedded = opts.databaseUrl
    ? null
    : await openEmbedded(opts.dataDir, opts.role ?? "service", undefined, opts.embeddedSnapshot, (created) => {
        if (opts.dataDir) opts.onProgress?.({ step: "embedded", dataDir: opts.dataDir, created });
      });
  const url = opts.databaseUrl ?? embedded!.url;
  const sequelize = new Sequelize(url, {
    dialect: "postgres",
    logging: false,
    pool: { max: opts.poolMax ?? 10, min: 0, idle: 10000, acquire: ACQUIRE_MS },
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
  const poolStats = poolCounter(sequelize, opts.poolMax ?? 10);
  const db: Database = {
    sequelize,
    url,
    embedded: embedded != null,
    poolStats,
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
    if (opts.migrate !== false) await migrate(db, opts.onProgress);
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
export function migrate(db: Database, onProgress?: OpenOptions["onProgress"]): Promise<string[]> {
  const before = running.get(db.url) ?? Promise.resolve();
  const mine = before.catch(() => undefined).then(() => migrateLocked(db, onProgress));
  running.set(db.url, mine);
  void mine
    .finally(() => {
      if (running.get(db.url) === mine) running.delete(db.url);
    })
    .catch(() => undefined);
  return mine;
}

async function migrateLocked(db: Database, onProgress: OpenOptions["onProgress"]): Promise<string[]> {
  const lock = new pg.Client({ connectionString: db.url });
  await lock.connect();
  try {
    await lock.query("SELECT pg_advisory_lock($1::bigint)", [MIGRATION_LOCK_KEY]);
    const umzug = migrator(db);
    if (onProgress) {
      const total = (await umzug.pending()).length;
      let index = 0;
      umzug.on("migrating", ({ name }) => onProgress({ step: "migrating", index: ++index, total, name }));
    }
    const applied = await umzug.up();
    return applied.map((m) => m.name);
  } finally {
    await lock.query("SELECT pg_advisory_unlock($1::bigint)", [MIGRATION_LOCK_KEY]).catch(() => undefined);
    await lock.end().catch(() => undefined);
  }
}

/**
 * Runs one statement with positional parameters (`$1`, `$2`, ...) and answers its rows; made by
 * `execOf` on Sequelize's public query API, so modules that build SQL (tracking's writes, the
 * campaigns' queries, heavy reads) take one of these and run inside or outside a transaction alike.
 */
export type Exec = <T extends object = Record<string, unknown>>(sql: string, params?: unknown[]) => Promise<T[]>;

/**
 * The project's one way to run SQL of its own: `sequelize.query` with bind parameters, answering
 * the rows (`QueryTypes.SELECT`, `raw`: plain objects, whatever the statement; an UPDATE without
 * RETURNING answers none), in `transaction` when given, else on a connection of the pool for this
 * statement alone (atomic by itself). Parameters go to `pg` as they are (a `jsonParam` is written by
 * its `toPostgres`); an `undefined` one is sent as NULL, as `pg` itself does (Sequelize would refuse
 * it). Sequelize's own errors carry the driver's (`original`): read a SQLSTATE with `sqlstateOf`.
 */
export function queryRows<T extends object = Record<string, unknown>>(
  sequelize: Sequelize,
  sql: string,
  params?: readonly unknown[],
  transaction?: Transaction | null,
): Promise<T[]> {
  const bind = params && params.includes(undefined) ? params.map((p) => (p === undefined ? null : p)) : params;
  return sequelize.query<T>(sql, { bind: bind as unknown[] | undefined, type: QueryTypes.SELECT, raw: true, transaction: transaction ?? undefined });
}

/** An `Exec` on `sequelize`: in `transaction` when given, else each statement on its own. */
export const execOf =
  (sequelize: Sequelize, transaction?: Transaction | null): Exec =>
  (sql, params) =>
    queryRows(sequelize, sql, params, transaction);

/**
 * Runs `fn` in one transaction (Sequelize's managed `sequelize.transaction`: committed when `fn`
 * resolves, rolled back when it throws, the error passed on), `exec` running its statements.
 * A connection whose ROLLBACK failed is not reused: Sequelize's rollback then destroys it (with a
 * console warning of its own), and a connection the driver saw break is dropped by the pool's
 * validation before it is handed out (test/integration/db-query.spec.ts).
 */
export function inTransaction<T>(sequelize: Sequelize, fn: (exec: Exec, transaction: Transaction) => Promise<T>): Promise<T> {
  return sequelize.transaction((transaction) => fn(execOf(sequelize, transaction), transaction));
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
