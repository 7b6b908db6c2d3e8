/**
 * Other nodes learn our actions from the INFO packet, which Moleculer passes through a guard that
 * drops any object met a second time (utils.safetyObject). Every exposed action's declarations must
 * cross it intact, or a remote gateway validates and documents a schema with holes.
 */
import { Utils } from "moleculer";
import { Sequelize } from "sequelize";
import { loadConfig } from "../../lib/config";
import type { Database } from "../../lib/db/db";
import { SERVICE_FACTORIES } from "../../services";

it("every action's params, responses and upload reach other nodes unchanged", () => {
  const config = loadConfig({ LOG_LEVEL: "silent" }, {}, { runsServices: false });
  const deps = { config, db: { sequelize: new Sequelize("postgres://nobody@127.0.0.1:1/none", { logging: false }) } as unknown as Database };
  const services = Object.values(SERVICE_FACTORIES).map((factory) => factory(deps));
  // One packet carries every service of the node, as Registry.regenerateLocalRawInfo builds it.
  const packet = { services: services.map((s) => ({ name: s.name, actions: s.actions })) };
  const sent = (Utils as unknown as { safetyObject(o: unknown, opts: object): typeof packet }).safetyObject(packet, {});
  let checked = 0;
  services.forEach((svc, i) => {
    for (const [name, action] of Object.entries((svc.actions ?? {}) as Record<string, Record<string, unknown>>)) {
      if (!action || typeof action !== "object" || !action.rest) continue;
      const remote = (sent.services[i]!.actions as Record<string, Record<string, unknown>>)[name]!;
      for (const field of ["params", "responses", "upload"]) {
        expect({ action: `${svc.name}.${name}`, field, value: remote[field] }).toEqual({
          action: `${svc.name}.${name}`,
          field,
          value: JSON.parse(JSON.stringify(action[field] ?? null)) ?? undefined,
        });
      }
      checked++;
    }
  });
  expect(checked).toBeGreaterThan(20);
});
