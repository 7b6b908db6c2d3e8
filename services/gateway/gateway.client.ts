/**
 * Who the client is, for per-address rate limits. The socket's address, or, only when the socket
 * belongs to a trusted proxy (TRUSTED_PROXIES), the right-most X-Forwarded-For entry that is not
 * itself a trusted proxy: entries to its left were written by the client and prove nothing.
 * IPv6 clients are bucketed by their /64 (one subscriber usually holds a whole /64, so rotating
 * addresses inside it gains nothing); IPv4-mapped IPv6 addresses count as IPv4.
 */
import ipaddr from "ipaddr.js";

type Address = ipaddr.IPv4 | ipaddr.IPv6;

/** An address as a socket or a proxy writes it (optionally `[v6]:port` or `v4:port`), IPv4-mapped IPv6 as IPv4; null when not one. */
export function parseAddress(text: string | undefined): Address | null {
  if (!text) return null;
  let s = text.trim();
  const bracketed = /^\[([^\]]+)\](?::\d+)?$/.exec(s);
  if (bracketed) s = bracketed[1]!;
  else if (/^\d+\.\d+\.\d+\.\d+:\d+$/.test(s)) s = s.slice(0, s.lastIndexOf(":"));
  if (!ipaddr.isValid(s)) return null;
  const addr = ipaddr.parse(s);
  return addr.kind() === "ipv6" && (addr as ipaddr.IPv6).isIPv4MappedAddress() ? (addr as ipaddr.IPv6).toIPv4Address() : addr;
}

/** The TRUSTED_PROXIES ranges (normalised CIDRs, as lib/config.ts leaves them). */
export class TrustedProxies {
  private readonly ranges: Array<[Address, number]>;

  constructor(cidrs: readonly string[]) {
    this.ranges = cidrs.map((c) => ipaddr.parseCIDR(c));
  }

  has(addr: Address): boolean {
    return this.ranges.some(([range, bits]) => range.kind() === addr.kind() && addr.match(range, bits));
  }
}

/** The client's address: see the file comment. Null only when the socket has no (parsable) address. */
export function clientAddress(socketAddress: string | undefined, forwardedFor: string | string[] | undefined, trusted: TrustedProxies): Address | null {
  const peer = parseAddress(socketAddress);
  if (!peer || forwardedFor === undefined || !trusted.has(peer)) return peer;
  const hops = (Array.isArray(forwardedFor) ? forwardedFor.join(",") : forwardedFor).split(",");
  let client: Address = peer;
  for (let i = hops.length - 1; i >= 0; i--) {
    const hop = parseAddress(hops[i]);
    // A trusted proxy wrote this entry; one it could not have written stops the walk at that proxy.
    if (!hop) return client;
    client = hop;
    if (!trusted.has(hop)) return hop;
  }
  return client;
}

/** The rate-limit bucket of an address: `ip:<v4>`, or `ip:<v6 /64 prefix>/64`. */
export function addressBucket(addr: Address | null): string {
  if (!addr) return "ip:unknown";
  if (addr.kind() === "ipv4") return `ip:${addr.toString()}`;
  const parts = (addr as ipaddr.IPv6).parts.slice(0, 4);
  return `ip:${new ipaddr.IPv6([...parts, 0, 0, 0, 0]).toString()}/64`;
}

/** The bucket of the client of a request. */
export const clientBucket = (socketAddress: string | undefined, forwardedFor: string | string[] | undefined, trusted: TrustedProxies): string =>
  addressBucket(clientAddress(socketAddress, forwardedFor, trusted));
