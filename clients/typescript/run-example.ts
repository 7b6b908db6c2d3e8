/**
 * Runs the README's example against a gateway: `PGW_API_KEY=pgw_... npx tsx run-example.ts`
 * (PGW_BASE_URL: the gateway's address, http://localhost:3000 by default). Prints the list's
 * members as JSON; exits 2 without a key, 1 when the API answers a problem.
 */
import { addContactToNewList } from "./example.js";

const apiKey = process.env.PGW_API_KEY;
if (!apiKey) {
  process.stderr.write("Set PGW_API_KEY to an API key (npm run admin -- keys:create --company <companyId> --operations ALL, at the repository's top)\n");
  process.exit(2);
}
try {
  const members = await addContactToNewList(process.env.PGW_BASE_URL ?? "http://localhost:3000", apiKey);
  process.stdout.write(`${JSON.stringify(members)}\n`);
} catch (e) {
  process.stderr.write(`${(e as Error).message}\n`);
  process.exit(1);
}
