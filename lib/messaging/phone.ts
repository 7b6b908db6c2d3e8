/**
 * Phone numbers, once: parsed and validated by libphonenumber-js (full metadata) into E.164. Contacts
 * store numbers this way; the inbox refuses an end user's number that is not one.
 */
import { parsePhoneNumberFromString } from "libphonenumber-js/max";
import { MESSAGE_KEYWORD } from "../http/schema-messages";

/**
 * E.164, or null when the input is not a valid number in international form (`+` or `00` and the
 * country code). A number without its country code is refused rather than guessed.
 */
export function toE164(input: string): string | null {
  // No formatted number comes near this; libphonenumber's own patterns never see a long text.
  if (input.length > MAX_PHONE_TEXT) return null;
  const trimmed = input.trim();
  if (!/^(\+|00)/.test(trimmed)) return null;
  const phone = parsePhoneNumberFromString(trimmed.replace(/^00/, "+"));
  return phone && phone.isValid() ? phone.number : null;
}

/** The longest text taken as a phone number (the API's phoneNumber is at most 32 characters). */
export const MAX_PHONE_TEXT = 64;

export const PHONE_ERROR = "must be a valid phone number in international format, e.g. +351912345678";

/**
 * What a phone number in a request must begin with, as a schema `pattern` (toE164 refuses anything
 * else): `+` or `00` and the country code, after any leading spaces. The rest is for libphonenumber.
 */
export const INTERNATIONAL_PATTERN = "^\\s*(\\+|00)";

/** A phone number in a request, as every schema takes it (the rest, whether the number exists, is libphonenumber's). */
export const PHONE_NUMBER_SCHEMA = {
  type: "string",
  minLength: 3,
  maxLength: 32,
  pattern: INTERNATIONAL_PATTERN,
  [MESSAGE_KEYWORD]: PHONE_ERROR,
} as const;

/** Whether `input` is already a valid number in E.164 form (what upstreams must send). */
export const isE164 = (input: string): boolean => toE164(input) === input;
