/**
 * What other code may know of profiles: key rotation for the admin command
 * (`npm run admin -- secrets:rotate`), run straight against the database, with the service running
 * or not.
 */
import type { Sequelize } from "sequelize";
import type { Config } from "../../lib/config";
import { rotationKeyProblem, secretBox } from "../../lib/security/secrets";
import { rotateTokens, type RotateOptions, type RotateResult } from "./profiles.rotate";

export type { RotateOptions, RotateResult };
export { rotationKeyProblem };

/**
 * Re-encrypts every stored access token not already under SECRETS_KEY (reading with SECRETS_KEY or
 * SECRETS_KEY_PREVIOUS), in bounded batches, each row under a lock so a concurrent token change is
 * never overwritten. Answers the counts and the ids of tokens no configured key opens. Never creates
 * a key: without SECRETS_KEY the key file of DATA_DIR must exist (see rotationKeyProblem).
 */
export function rotateSecrets(
  sequelize: Sequelize,
  config: Pick<Config, "secretsKey" | "secretsKeyPrevious" | "dataDir">,
  batchSize?: number,
  opts: Omit<RotateOptions, "batchSize"> = {},
): Promise<RotateResult> {
  return rotateTokens(sequelize, secretBox(config, { create: false }), { ...opts, batchSize });
}
