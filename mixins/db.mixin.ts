/**
 * DbMixin(deps): gives a service `this.sequelize`, the process's database (PostgreSQL or embedded
 * PGlite), before its own `created` runs. Services keep their tables to themselves.
 */
import type { ServiceSchema } from "moleculer";
import type { Sequelize } from "sequelize";
import type { Deps } from "../lib/deps";

export interface DbThis {
  sequelize: Sequelize;
}

export function DbMixin(deps: Deps): Partial<ServiceSchema> {
  return {
    created() {
      (this as unknown as DbThis).sequelize = deps.db.sequelize;
    },
  };
}
