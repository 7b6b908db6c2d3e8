/** Field schemas the contacts' wire forms share (contacts.schemas.ts, contacts.imports.schemas.ts). */
import type { SchemaOf } from "../../lib/http/schema-type";
import { UUID } from "./contacts.contract";

export const uuid = { type: "string", pattern: UUID, examples: ["0b6e4c1e-8a8c-4f5e-9a0e-3d2f1c4b5a69"] } satisfies SchemaOf<string>;
export const dateTime = { type: "string", format: "date-time" } satisfies SchemaOf<string>;
