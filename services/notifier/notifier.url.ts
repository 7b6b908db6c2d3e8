/**
 * Callback URL validation (spec part 6, "Callback URL validation"): https, port 443 or 8443, no
 * credentials, no fragment, and a host that resolves (A and AAAA) only to publicly reachable
 * addresses. Address classes come from ipaddr.js ranges, never from string prefixes; IPv4-mapped
 * and NAT64 (64:ff9b::/96) IPv6 forms are judged by the IPv4 address they carry.
 */
import { lookup } from "node:dns/promises";
import ipaddr from "ipaddr.js";

export const MAX_CALLBACK_URL = 2048;
const PORTS = new Set(["", "443", "8443"]);

export interface ValidatedUrl {
  /** The URL as given (normalised by the WHATWG parser). */
  url: string;
  /** The addresses the host resolved to, every one checked. */
  addresses: string[];
}

export class CallbackUrlError extends Error {}

/** ipaddr.js range names as a partner reads them. */
const RANGE_NAMES: Record<string, string> = {
  loopback: "a loopback",
  private: "a private",
  linkLocal: "a link-local",
  carrierGradeNat: "a carrier-grade NAT",
  uniqueLocal: "a unique-local",
  multicast: "a multicast",
  unspecified: "an unspecified",
  broadcast: "a broadcast",
  reserved: "a reserved",
};

/** Why an address may not receive callbacks, or null when it is publicly reachable. */
export function nonPublicReason(address: string): string | null {
  let ip: ipaddr.IPv4 | ipaddr.IPv6;
  try {
    ip = ipaddr.parse(address);
  } catch {
    return "is not an IP address";
  }
  if (ip.kind() === "ipv6") {
    const v6 = ip as ipaddr.IPv6;
    if (v6.isIPv4MappedAddress()) return nonPublicReason(v6.toIPv4Address().toString());
    if (v6.range() === "rfc6052") {
      // NAT64 64:ff9b::/96: the last 32 bits are the IPv4 address it reaches.
      const b = v6.toByteArray();
      return nonPublicReason(b.slice(12).join("."));
    }
  }
  const range = ip.range();
  return range === "unicast" ? null : `is ${RANGE_NAMES[range] ?? `a reserved (${range})`} address`;
}

/**
 * Checks every rule; a refused name says only that it resolves to a non-public address, never which
 * address. `allowPrivate` (WEBHOOK_ALLOW_PRIVATE_TARGETS, development and tests) relaxes
 * only the address rule: the host must still resolve. Throws CallbackUrlError with the reason.
 */
export async function validateCallbackUrl(raw: string, allowPrivate: boolean, resolve: typeof lookup = lookup): Promise<ValidatedUrl> {
  if (raw.length > MAX_CALLBACK_URL) throw new CallbackUrlError(`must be at most ${MAX_CALLBACK_URL} characters`);
  if (raw.includes("#")) throw new CallbackUrlError("must not have a fragment (#)");
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new CallbackUrlError("is not an absolute URL");
  }
  if (url.protocol !== "https:") throw new CallbackUrlError("must use https");
  if (url.username || url.password) throw new CallbackUrlError("must not carry credentials");
  if (!PORTS.has(url.port)) throw new CallbackUrlError("must use port 443 or 8443");
  const host = url.hostname.startsWith("[") ? url.hostname.slice(1, -1) : url.hostname;
  let addresses: string[];
  const literal = ipaddr.isValid(host);
  if (literal) addresses = [host];
  else {
    try {
      addresses = (await resolve(host, { all: true, verbatim: true })).map((a) => a.address);
    } catch {
      throw new CallbackUrlError(`host ${host} does not resolve`);
    }
    if (addresses.length === 0) throw new CallbackUrlError(`host ${host} does not resolve`);
  }
  if (!allowPrivate) {
    for (const a of addresses) {
      const why = nonPublicReason(a);
      if (!why) continue;
      // An address literal is the partner's own text: naming its class tells them nothing new. A
      // name's resolved addresses are never named (nor their class): that would be a DNS oracle
      // into the internal network.
      if (literal) throw new CallbackUrlError(`host ${host} ${why}; only publicly reachable addresses may receive callbacks`);
      throw new CallbackUrlError(`host ${host} resolves to a non-public address; only publicly reachable addresses may receive callbacks`);
    }
  }
  return { url: url.toString(), addresses };
}
