/**
 * The contacts service's rows (tables of migrations/20261122-0003-contacts) and their wire form.
 * Queries are SQL (set-based where it matters); these are the shapes they read.
 */
import type { Channel } from "../../lib/messaging/channels";
import type { CustomFieldType, Gender } from "./contacts.contract";
import { CONTACT_OPTED_OUT_SQL } from "./contacts.filters";
import type { ContactOut, CustomFieldOut, CustomValue, ListOut } from "./contacts.schemas";
import type { ImportStatus } from "./contacts.imports.schemas";

export interface ContactRow {
  id: string;
  first_name: string | null;
  last_name: string | null;
  gender: Gender | null;
  phone_number: string | null;
  email: string | null;
  custom_fields: Record<string, CustomValue>;
  is_test: boolean;
  is_valid: boolean;
  communication_supported: Channel[];
  last_contact_type: Channel | null;
  last_campaign_type: Channel | null;
  created_at: Date;
  updated_at: Date;
  opted_out: Channel[];
}

/** A contact's columns, over alias `c`, with its derived `opted_out` (the channels its number opted out of, one subquery probing opt_outs' key). */
export const CONTACT_COLUMNS = `c.id, c.first_name, c.last_name, c.gender, c.phone_number, c.email, c.custom_fields, c.is_test, c.is_valid, c.communication_supported,
  c.last_contact_type, c.last_campaign_type, c.created_at, c.updated_at, ${CONTACT_OPTED_OUT_SQL} AS opted_out`;

export function toContactOut(r: ContactRow): ContactOut {
  return {
    id: r.id,
    firstName: r.first_name,
    lastName: r.last_name,
    gender: r.gender,
    phoneNumber: r.phone_number,
    email: r.email,
    customFields: r.custom_fields ?? {},
    isTest: r.is_test,
    isValid: r.is_valid,
    communicationSupported: r.communication_supported ?? [],
    lastContactType: r.last_contact_type,
    lastCampaignType: r.last_campaign_type,
    optedOut: r.opted_out ?? [],
    createdAt: new Date(r.created_at).toISOString(),
    updatedAt: new Date(r.updated_at).toISOString(),
  };
}

export interface CustomFieldRow {
  key: string;
  type: CustomFieldType;
  created_at: Date;
}

export const toCustomFieldOut = (r: CustomFieldRow): CustomFieldOut => ({ key: r.key, type: r.type, createdAt: new Date(r.created_at).toISOString() });

export interface ListRow {
  id: string;
  name: string;
  description: string | null;
  is_test: boolean;
  created_at: Date;
  updated_at: Date;
  deleted_at: Date | null;
  contact_count: string;
}

export const toListOut = (r: ListRow): ListOut => ({
  id: Number(r.id),
  name: r.name,
  description: r.description,
  isTest: r.is_test,
  createdAt: new Date(r.created_at).toISOString(),
  updatedAt: new Date(r.updated_at).toISOString(),
  contactCount: Number(r.contact_count),
  deleted: r.deleted_at !== null,
  deletedAt: r.deleted_at ? new Date(r.deleted_at).toISOString() : null,
});

/** A row of contact_imports as the status read answers it (contacts.imports.ts maps it). */
export interface ImportDbRow {
  id: string;
  status: ImportStatus;
  file_name: string;
  list_id: string | null;
  total_rows: number;
  created: number;
  updated: number;
  skipped: number;
  errors: Array<{ row: number; message: string }>;
  failure: string | null;
  created_at: Date;
  started_at: Date | null;
  finished_at: Date | null;
}
