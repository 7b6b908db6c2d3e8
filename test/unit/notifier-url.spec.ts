/**
 * Callback URL rules (spec part 6): https only, port 443 or 8443, no credentials, no fragment, and
 * every address the host resolves to publicly reachable. Name resolution is injected: no network.
 */
import type { lookup } from "node:dns/promises";
import { CallbackUrlError, MAX_CALLBACK_URL, nonPublicReason, validateCallbackUrl } from "../../services/notifier/notifier.url";

const PUBLIC_V4 = "93.184.216.34";
const PUBLIC_V6 = "2606:2800:220:1:248:1893:25c8:1946";

/** A resolver answering `addresses` for every host (none: the name does not resolve), recording its calls. */
function resolverOf(addresses: string[] | Error) {
  const calls: Array<{ host: string; opts: unknown }> = [];
  const resolve = async (host: string, opts: unknown) => {
    calls.push({ host, opts });
    if (addresses instanceof Error) throw addresses;
    return addresses.map((address) => ({ address, family: address.includes(":") ? 6 : 4 }));
  };
  return { resolve: resolve as unknown as typeof lookup, calls };
}

const publicHost = () => resolverOf([PUBLIC_V4]).resolve;

async function refusal(url: string, resolve: typeof lookup = publicHost(), allowPrivate = false): Promise<string> {
  try {
    await validateCallbackUrl(url, allowPrivate, resolve);
  } catch (err) {
    expect(err).toBeInstanceOf(CallbackUrlError);
    return (err as Error).message;
  }
  throw new Error(`${url} was accepted`);
}

describe("validateCallbackUrl", () => {
  it("accepts an https URL on the default port whose host resolves only to public addresses", async () => {
    const { resolve, calls } = resolverOf([PUBLIC_V4, PUBLIC_V6]);
    const ok = await validateCallbackUrl("https://hooks.example.com/pgw/delivery?x=1", false, resolve);
    expect(ok).toEqual({ url: "https://hooks.example.com/pgw/delivery?x=1", addresses: [PUBLIC_V4, PUBLIC_V6] });
    // Every A and AAAA record, in the resolver's order.
    expect(calls).toEqual([{ host: "hooks.example.com", opts: { all: true, verbatim: true } }]);
  });

  it.each(["https://hooks.example.com:443/x", "https://hooks.example.com:8443/x"])("accepts port 443 or 8443: %s", async (url) => {
    await expect(validateCallbackUrl(url, false, publicHost())).resolves.toMatchObject({ addresses: [PUBLIC_V4] });
  });

  it.each(["http://hooks.example.com/x", "ftp://hooks.example.com/x", "wss://hooks.example.com/x"])("refuses a scheme other than https: %s", async (url) => {
    expect(await refusal(url)).toBe("must use https");
  });

  it.each(["https://hooks.example.com:80/x", "https://hooks.example.com:8080/x", "https://hooks.example.com:444/x", "https://hooks.example.com:1/x"])(
    "refuses any port but 443 and 8443: %s",
    async (url) => {
      expect(await refusal(url)).toBe("must use port 443 or 8443");
    },
  );

  it.each(["https://user:secret@hooks.example.com/x", "https://user@hooks.example.com/x", "https://:secret@hooks.example.com/x"])(
    "refuses credentials in the URL: %s",
    async (url) => {
      expect(await refusal(url)).toBe("must not carry credentials");
    },
  );

  it.each(["https://hooks.example.com/x#part", "https://hooks.example.com/x#"])("refuses a fragment: %s", async (url) => {
    expect(await refusal(url)).toBe("must not have a fragment (#)");
  });

  it.each(["hooks.example.com/x", "/relative/path", "https://", ""])("refuses what is not an absolute URL: %j", async (url) => {
    expect(await refusal(url)).toBe("is not an absolute URL");
  });

  it("refuses a URL longer than the limit", async () => {
    const url = `https://hooks.example.com/${"a".repeat(MAX_CALLBACK_URL)}`;
    expect(await refusal(url)).toBe(`must be at most ${MAX_CALLBACK_URL} characters`);
  });

  it("refuses a host that does not resolve, or resolves to nothing", async () => {
    expect(await refusal("https://nowhere.example/x", resolverOf(new Error("ENOTFOUND")).resolve)).toBe("host nowhere.example does not resolve");
    expect(await refusal("https://nowhere.example/x", resolverOf([]).resolve)).toBe("host nowhere.example does not resolve");
  });

  it.each([
    ["127.0.0.1", "loopback"],
    ["10.1.2.3", "private"],
    ["172.16.0.1", "private"],
    ["192.168.1.10", "private"],
    ["169.254.169.254", "link-local"],
    ["100.64.0.1", "carrier-grade NAT"],
    ["100.127.255.254", "carrier-grade NAT"],
    ["0.0.0.0", "unspecified"],
    ["::1", "loopback"],
    ["fc00::1", "unique-local"],
    ["fd12:3456::1", "unique-local"],
    ["fe80::1", "link-local"],
    ["::ffff:127.0.0.1", "loopback"],
    ["::ffff:10.0.0.1", "private"],
    ["::ffff:169.254.169.254", "link-local"],
    ["64:ff9b::a00:1", "private"], // NAT64 of 10.0.0.1
    ["64:ff9b::7f00:1", "loopback"], // NAT64 of 127.0.0.1
    ["64:ff9b::6440:1", "carrier-grade NAT"], // NAT64 of 100.64.0.1
  ])("refuses a host resolving to %s (%s), naming neither the address nor its class", async (address, kind) => {
    const message = await refusal("https://hooks.example.com/x", resolverOf([address]).resolve);
    expect(message).toBe("host hooks.example.com resolves to a non-public address; only publicly reachable addresses may receive callbacks");
    expect(message).not.toContain(address);
    expect(message).not.toContain(kind);
  });

  it("refuses a host when any one of its addresses is not public", async () => {
    const message = await refusal("https://hooks.example.com/x", resolverOf([PUBLIC_V4, PUBLIC_V6, "192.168.0.7"]).resolve);
    expect(message).toBe("host hooks.example.com resolves to a non-public address; only publicly reachable addresses may receive callbacks");
    expect(message).not.toContain("192.168.0.7");
  });

  it.each([
    "https://127.0.0.1/x",
    "https://10.0.0.1:8443/x",
    "https://[::1]/x",
    "https://[fd00::1]/x",
    "https://[::ffff:192.168.0.1]/x",
    "https://[64:ff9b::c0a8:1]/x",
  ])("refuses an address literal that is not public, without resolving it: %s", async (url) => {
    const { resolve, calls } = resolverOf([PUBLIC_V4]);
    expect(await refusal(url, resolve)).toMatch(/only publicly reachable addresses may receive callbacks$/);
    expect(calls).toEqual([]);
  });

  it("accepts a public address literal without resolving it", async () => {
    const { resolve, calls } = resolverOf([]);
    await expect(validateCallbackUrl(`https://${PUBLIC_V4}:8443/x`, false, resolve)).resolves.toEqual({
      url: `https://${PUBLIC_V4}:8443/x`,
      addresses: [PUBLIC_V4],
    });
    await expect(validateCallbackUrl(`https://[${PUBLIC_V6}]/x`, false, resolve)).resolves.toMatchObject({ addresses: [PUBLIC_V6] });
    expect(calls).toEqual([]);
  });

  it("with private targets allowed (development), accepts private addresses but still requires https, the port and a resolving host", async () => {
    await expect(validateCallbackUrl("https://hooks.internal/x", true, resolverOf(["10.0.0.5"]).resolve)).resolves.toMatchObject({ addresses: ["10.0.0.5"] });
    await expect(validateCallbackUrl("https://127.0.0.1:8443/x", true, resolverOf([]).resolve)).resolves.toMatchObject({ addresses: ["127.0.0.1"] });
    expect(await refusal("https://hooks.internal/x", resolverOf([]).resolve, true)).toBe("host hooks.internal does not resolve");
    expect(await refusal("http://127.0.0.1/x", resolverOf([]).resolve, true)).toBe("must use https");
    expect(await refusal("https://127.0.0.1:3000/x", resolverOf([]).resolve, true)).toBe("must use port 443 or 8443");
  });
});

describe("nonPublicReason", () => {
  it.each(["8.8.8.8", PUBLIC_V4, "2001:4860:4860::8888", PUBLIC_V6, "::ffff:8.8.8.8", "64:ff9b::808:808"])("finds nothing wrong with public %s", (address) => {
    expect(nonPublicReason(address)).toBeNull();
  });

  it("judges IPv4-mapped and NAT64 forms by the IPv4 address they carry", () => {
    expect(nonPublicReason("::ffff:192.168.1.1")).toBe(nonPublicReason("192.168.1.1"));
    expect(nonPublicReason("64:ff9b::c0a8:101")).toBe(nonPublicReason("192.168.1.1"));
    expect(nonPublicReason("192.168.1.1")).toBe("is a private address");
  });

  it("names what is not an IP address", () => {
    expect(nonPublicReason("hooks.example.com")).toBe("is not an IP address");
  });
});
