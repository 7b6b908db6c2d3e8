/** The auth service's tables (created by migrations/20261122-0001-api-keys, 20261124-0009-key-creator) and their mappers. */
import { DataTypes, Model, type InferAttributes, type InferCreationAttributes, type CreationOptional, type Sequelize } from "sequelize";
import type { Operation, TrafficType } from "../../lib/http/api";
import type { ApiKeyOut, Principal } from "./auth.schemas";

export class ApiKey extends Model<InferAttributes<ApiKey>, InferCreationAttributes<ApiKey>> {
  declare id: string;
  declare companyId: string;
  declare userId: string | null;
  declare username: string | null;
  declare operations: Operation[];
  declare trafficType: TrafficType;
  declare keyHash: Buffer;
  /** The key whose POST /authentication made this one; null for the admin command. */
  declare createdByKeyId: string | null;
  declare createdAt: CreationOptional<Date>;
}

export interface AuthModels {
  ApiKey: typeof ApiKey;
}

/** Binds the models to one Sequelize instance (one per process, or per test database). */
export function defineAuthModels(sequelize: Sequelize): AuthModels {
  // A class can only be initialised once; a subclass per instance keeps databases apart (tests).
  const Bound = class extends ApiKey {};
  Bound.init(
    {
      id: { type: DataTypes.UUID, primaryKey: true },
      companyId: { type: DataTypes.TEXT, allowNull: false },
      userId: { type: DataTypes.TEXT },
      username: { type: DataTypes.TEXT },
      operations: { type: DataTypes.ARRAY(DataTypes.TEXT), allowNull: false },
      trafficType: { type: DataTypes.TEXT, allowNull: false },
      keyHash: { type: DataTypes.BLOB, allowNull: false },
      createdByKeyId: { type: DataTypes.UUID },
      createdAt: { type: DataTypes.DATE, allowNull: false, defaultValue: DataTypes.NOW },
    },
    { sequelize, tableName: "api_keys", modelName: "ApiKey", underscored: true, timestamps: false },
  );
  return { ApiKey: Bound };
}

export function toApiKeyOut(row: ApiKey): ApiKeyOut {
  return {
    id: row.id,
    companyId: row.companyId,
    userId: row.userId,
    username: row.username,
    operations: row.operations,
    trafficType: row.trafficType,
    createdAt: row.createdAt.toISOString(),
    createdByKeyId: row.createdByKeyId,
  };
}

export function toPrincipal(row: ApiKey): Principal {
  return {
    keyId: row.id,
    companyId: row.companyId,
    userId: row.userId,
    username: row.username,
    operations: row.operations,
    trafficType: row.trafficType,
    keyCreatedAt: row.createdAt.toISOString(),
    keyCreatedByKeyId: row.createdByKeyId,
  };
}
