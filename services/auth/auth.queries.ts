/** The auth service's reads and writes of api_keys (through its Sequelize model). */
import { Op, type CreationAttributes } from "sequelize";
import type { ApiKey, AuthModels } from "./auth.models";

type ApiKeyRow = InstanceType<AuthModels["ApiKey"]>;

export function insertKey(models: AuthModels, values: CreationAttributes<ApiKey>): Promise<ApiKeyRow> {
  return models.ApiKey.create(values);
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
