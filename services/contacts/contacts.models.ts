/**
 * The contacts service's rows (tables of migrations/20261122-0003-contacts) and their wire form.
 * Queries are SQL (set-based where it matters); these are the shapes they read.
 */
import type { Channel, ContactOut, CustomFieldOut, CustomFieldType, CustomValue, Gender } from "./contacts.schemas";

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
}

export const CONTACT_COLUMNS =
  "id, first_name, last_name, gender, phone_number, email, custom_fields, is_test, is_valid, communication_supported, last_contact_type, last_campaign_type, created_at, updated_at";

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
