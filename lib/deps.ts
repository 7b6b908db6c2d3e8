/** What a service factory receives: configuration (read once) and the process's database. */
import type { Config } from "./config";
import type { Database } from "./db/db";

export interface Deps {
  config: Config;
  db: Database;
}
