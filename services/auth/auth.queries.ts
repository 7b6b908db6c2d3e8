/** The auth service's reads and writes of api_keys (through its Sequelize model). */
import { Op, type CreationAttributes } from "sequelize";
import type { ApiKey, AuthModels } from "./auth.models";

type ApiKeyRow = InstanceType<AuthModels["ApiKey"]>;

export function insertKey(models: AuthModels, values: CreationAttributes<ApiKey>): Promise<ApiKeyRow> {
  return models.ApiKey.create(values);
}

/**
 * Inserts a key unless its account already holds `max` keys (null then). The count and the insert
 * run in one transaction under a per-account advisory lock, so concurrent creations never pass it.
 */
export function insertKeyWithin(models: AuthModels, values: CreationAttributes<ApiKey>, max: number): Promise<ApiKeyRow | null> {
  const sequelize = models.ApiKey.sequelize!;
  return sequelize.transaction(async (transaction) => {
    await sequelize.query("SELECT pg_advisory_xact_lock(hashtext('pgw-api-keys:' || :companyId))", {
      replacements: { companyId: values.companyId },
      transaction,
    });
    const held = await models.ApiKey.count({ where: { companyId: values.companyId }, transaction });
    return held >= max ? null : models.ApiKey.create(values, { transaction });
  });
}

/** A page of the account's keys (optionally one user's), by creation time then id. */
export function findKeys(
  models: AuthModels,
  q: { companyId: string; userId?: string; sortOrder?: string; page: number; limit: number },
): Promise<{ rows: ApiKeyRow[]; count: number }> {
  const where = { companyId: q.companyId, ...(q.userId !== undefined ? { userId: q.userId } : {}) };
  const dir = q.sortOrder === "desc" ? "DESC" : "ASC";
  return models.ApiKey.findAndCountAll({
    where,
    order: [
      ["createdAt", dir],
      ["id", dir],
    ],
    offset: q.page * q.limit,
    limit: q.limit,
  });
}

/** One key of the account, or null (another account's key is not found). */
export function findOwnKey(models: AuthModels, companyId: string, id: string): Promise<ApiKeyRow | null> {
  return models.ApiKey.findOne({ where: { id: { [Op.eq]: id }, companyId } });
}

/** The key whose value has this SHA-256, or null. */
export function findKeyByHash(models: AuthModels, keyHash: Buffer): Promise<ApiKeyRow | null> {
  return models.ApiKey.findOne({ where: { keyHash } });
}
