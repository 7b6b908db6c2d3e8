import { addressBucket, clientAddress, clientBucket, parseAddress, TrustedProxies } from "../../services/gateway/gateway.client";
import { TokenBuckets } from "../../services/gateway/gateway.ratelimit";

const none = new TrustedProxies([]);
const proxies = new TrustedProxies(["10.0.0.0/8", "2001:db8:ffff::/48", "127.0.0.1/32"]);
const of = (socket: string | undefined, xff: string | string[] | undefined, trusted = proxies) => clientAddress(socket, xff, trusted)?.toString() ?? null;

describe("client address", () => {
  it("is the socket address when no proxy is trusted, whatever X-Forwarded-For says", () => {
    expect(of("203.0.113.7", "198.51.100.1", none)).toBe("203.0.113.7");
    expect(of("10.1.2.3", "198.51.100.1", none)).toBe("10.1.2.3");
  });

  it("is the socket address when the socket is not a trusted proxy", () => {
    expect(of("203.0.113.7", "198.51.100.1")).toBe("203.0.113.7");
    expect(of("11.0.0.1", "198.51.100.1")).toBe("11.0.0.1");
  });

  it("is the right-most X-Forwarded-For entry that is not a trusted proxy, from a trusted proxy", () => {
    expect(of("10.0.0.5", "198.51.100.1")).toBe("198.51.100.1");
    // The client wrote the left-most entries itself: they are not believed.
    expect(of("10.0.0.5", "1.1.1.1, 198.51.100.1, 10.0.0.9")).toBe("198.51.100.1");
    expect(of("10.0.0.5", ["1.1.1.1, 198.51.100.1", "10.0.0.9"])).toBe("198.51.100.1");
    expect(of("10.0.0.5", "1.1.1.1,198.51.100.1 , 10.0.0.9,10.2.2.2")).toBe("198.51.100.1");
  });

  it("is the left-most proxy when every entry is a trusted proxy, and the socket without X-Forwarded-For", () => {
    expect(of("10.0.0.5", "10.0.0.7, 10.0.0.9")).toBe("10.0.0.7");
    expect(of("10.0.0.5", undefined)).toBe("10.0.0.5");
  });

  it("stops at the last trusted hop when an entry is not an address", () => {
    expect(of("10.0.0.5", "198.51.100.1, garbage, 10.0.0.9")).toBe("10.0.0.9");
    expect(of("10.0.0.5", "")).toBe("10.0.0.5");
  });

  it("reads ports, brackets and IPv4-mapped IPv6 addresses", () => {
    expect(of("::ffff:10.0.0.5", "198.51.100.1:4711")).toBe("198.51.100.1");
    expect(of("::ffff:127.0.0.1", "[2001:db8:1::5]:443")).toBe("2001:db8:1::5");
    expect(of("2001:db8:ffff::1", "::ffff:198.51.100.1")).toBe("198.51.100.1");
    expect(parseAddress("::ffff:203.0.113.7")?.kind()).toBe("ipv4");
    expect(parseAddress("nonsense")).toBeNull();
    expect(of(undefined, "198.51.100.1")).toBeNull();
  });
});

describe("address buckets", () => {
  it("buckets IPv6 clients by their /64", () => {
    const a = clientBucket("2001:db8:1:2:aaaa::1", undefined, none);
    expect(a).toBe("ip:2001:db8:1:2::/64");
    expect(clientBucket("2001:db8:1:2:ffff:1:2:3", undefined, none)).toBe(a);
    expect(clientBucket("2001:db8:1:3::1", undefined, none)).not.toBe(a);
  });

  it("buckets IPv4 (and IPv4-mapped IPv6) clients by address", () => {
    expect(clientBucket("::ffff:203.0.113.7", undefined, none)).toBe("ip:203.0.113.7");
    expect(clientBucket("203.0.113.7", undefined, none)).toBe("ip:203.0.113.7");
    expect(clientBucket("203.0.113.8", undefined, none)).not.toBe("ip:203.0.113.7");
    expect(addressBucket(null)).toBe("ip:unknown");
  });

  it("gives the clients behind a trusted proxy buckets of their own", () => {
    expect(clientBucket("127.0.0.1", "198.51.100.1", proxies)).not.toBe(clientBucket("127.0.0.1", "198.51.100.2", proxies));
    expect(clientBucket("127.0.0.2", "198.51.100.1", proxies)).toBe(clientBucket("127.0.0.2", "198.51.100.2", proxies));
  });
});

describe("TokenBuckets.giveBack", () => {
  it("returns a taken token, never above the burst", () => {
    const b = new TokenBuckets(1, 2, 1000, () => 0);
    b.take("k");
    b.take("k");
    expect(b.take("k").allowed).toBe(false);
    b.giveBack("k");
    expect(b.take("k").allowed).toBe(true);
    b.giveBack("k");
    b.giveBack("k");
    b.giveBack("k");
    expect(b.take("k").remaining).toBe(1);
  });
});
