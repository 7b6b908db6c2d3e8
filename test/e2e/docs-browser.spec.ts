/**
 * /docs as a person meets it: headless Chromium (Debian's `chromium`, driven by playwright-core)
 * opens the reference against a running app, sees every tag of the fixed list, and sends a request
 * from the page's "Test Request" client with an API key typed into the page; the answer shown is the
 * API's. The page's own headers (CSP, the bundle's caching) are checked over plain HTTP.
 */
import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import { chromium, type Browser, type Page } from "playwright-core";
import { ALL_SERVICES } from "../../lib/config";
import { OPENAPI_TAGS } from "../../lib/http/openapi";
import { startTestApp, type TestApp } from "../helpers/app";
import { REQUIRE_REAL } from "../helpers/db";

/** Debian's package (installed by .ci/run); CHROMIUM_PATH points elsewhere. */
const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";

/**
 * The browser tests: without Chromium they list themselves as a todo, and under
 * REQUIRE_REAL_SERVICES=1 (CI, which installs it) its absence is a failure, never a silent skip.
 */
function describeInChromium(name: string, fn: () => void): void {
  if (fs.existsSync(CHROMIUM)) describe(name, fn);
  else if (REQUIRE_REAL) {
    it(`${name}: runs in Chromium`, () => {
      throw new Error(`REQUIRE_REAL_SERVICES=1 but there is no Chromium at ${CHROMIUM}: apt-get install -y chromium (or set CHROMIUM_PATH)`);
    });
  } else describe(name, () => it.todo(`apt-get install -y chromium (or set CHROMIUM_PATH) to run the browser tests of /docs`));
}

let t: TestApp;
let browser: Browser;
let page: Page;
/** What the page logged (CSP violations show up here) and every URL it asked for. */
const consoleLines: string[] = [];
const requested: string[] = [];

beforeAll(async () => {
  t = await startTestApp({ services: ALL_SERVICES });
}, 120_000);
afterAll(() => t?.stop());

it("serves the page with a CSP that lets scripts and requests come only from this origin", async () => {
  const res = await t.root.get("/docs");
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toMatch(/^text\/html/);
  const csp = res.headers.get("content-security-policy") ?? "";
  expect(csp).toContain("default-src 'none'");
  expect(csp).toContain("script-src 'self';");
  expect(csp).toContain("connect-src 'self';");
  expect(csp).toContain("frame-ancestors 'none'");
  expect(csp).not.toMatch(/unsafe-eval|https?:/);
  expect(res.headers.get("x-content-type-options")).toBe("nosniff");
  expect(res.text).toContain('<script src="docs/scalar.js"></script>');
  expect(res.text).not.toMatch(/<script>|https?:\/\//); // no inline script, no other origin

  // The bundle: vendored (vendor/scalar), gzipped when asked, revalidated by its version.
  const bundle = await fetch(`${t.root.baseUrl}/docs/scalar.js`, { headers: { "accept-encoding": "gzip" } });
  expect(bundle.status).toBe(200);
  expect(bundle.headers.get("content-type")).toMatch(/^text\/javascript/);
  const etag = bundle.headers.get("etag")!;
  const version = JSON.parse(fs.readFileSync(path.join(__dirname, "../../vendor/scalar/version.json"), "utf8")).version;
  expect(etag).toBe(`"scalar-${version}"`);
  // fetch decodes gzip itself: the header says it was sent compressed.
  expect(bundle.headers.get("content-encoding")).toBe("gzip");
  expect(await bundle.text()).toContain("createApiReference");
  const again = await fetch(`${t.root.baseUrl}/docs/scalar.js`, { headers: { "if-none-match": etag } });
  expect(again.status).toBe(304);
  // A client that takes no gzip gets the bundle as the package ships it (fetch always asks for gzip: plain http here).
  const plain = await new Promise<{ status?: number; encoding?: string; body: string }>((resolve, reject) => {
    http
      .get(`${t.root.baseUrl}/docs/scalar.js`, (r) => {
        const chunks: Buffer[] = [];
        r.on("data", (c: Buffer) => chunks.push(c)).on("end", () =>
          resolve({ status: r.statusCode, encoding: r.headers["content-encoding"], body: Buffer.concat(chunks).toString("utf8") }),
        );
      })
      .on("error", reject);
  });
  const vendored = JSON.parse(fs.readFileSync(path.join(__dirname, "../../vendor/scalar/version.json"), "utf8")) as { bytes: number };
  expect({ status: plain.status, encoding: plain.encoding, bytes: Buffer.byteLength(plain.body) }).toEqual({
    status: 200,
    encoding: undefined,
    bytes: vendored.bytes,
  });
  expect(plain.body).toContain("createApiReference");
  expect(plain.body).not.toContain("sourceMappingURL");
});

describeInChromium("the reference in a browser", () => {
  beforeAll(async () => {
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--disable-dev-shm-usage"] });
    page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    page.on("console", (m) => consoleLines.push(`${m.type()}: ${m.text()}`));
    page.on("pageerror", (e) => consoleLines.push(`pageerror: ${e.message}`));
    page.on("request", (r) => requested.push(r.url()));
  }, 60_000);
  afterAll(() => browser?.close());

  it("shows every tag, in the document's order", async () => {
    await page.goto(`${t.root.baseUrl}/docs`);
    // Each tag's display name appears in the sidebar (inbox too, before any operation has it).
    for (const tag of OPENAPI_TAGS) await page.getByText(tag.displayName, { exact: true }).first().waitFor({ timeout: 60_000 });
    const text = await page.locator("body").innerText();
    const positions = OPENAPI_TAGS.map((tag) => text.indexOf(`\n${tag.displayName}\n`));
    expect(positions.every((p) => p >= 0)).toBe(true);
    expect([...positions].sort((a, b) => a - b)).toEqual(positions);
    // The problem types are explained on the page.
    await page.getByText("Problem types", { exact: true }).first().waitFor();
    expect(text).toContain("problem-key-scope-exceeded");
  }, 90_000);

  it("opens the Problem types section for a problem's type URI", async () => {
    await page.goto("about:blank"); // a fresh load, as when a link is followed (a hash change alone is the page's own)
    await page.goto(`${t.root.baseUrl}/docs#problem-rate-limited`);
    await page.waitForURL(/#description\/problem-types$/, { timeout: 60_000 });
    await page.getByText("problem-rate-limited", { exact: true }).first().waitFor();
  }, 90_000);

  it("sends a request from the page with the key typed into it, and shows the API's answer", async () => {
    const account = await t.newAccount(["AUTHENTICATION"]);
    await page.goto(`${t.root.baseUrl}/docs#tag/keys/GET/authentication/me`);
    // The reference's authentication box: the X-API-Key value.
    await page.getByLabel("Value").first().fill(account.key.apiKey);
    await page
      .getByRole("button", { name: /Test Request.*\/authentication\/me\b/ })
      .first()
      .click();
    const sent = page.waitForRequest((r) => r.url().endsWith("/api/partner-gateway/v1/authentication/me"));
    await page.getByRole("button", { name: /^Send/ }).first().click();
    const request = await sent;
    expect(request.headers()["x-api-key"]).toBe(account.key.apiKey);
    const response = await request.response();
    expect(response?.status()).toBe(200);
    // The client shows the answer: the calling key, which only the API could know.
    await page.getByText(`"${account.key.id}"`).first().waitFor({ timeout: 30_000 });
    await page.getByText(`"${account.companyId}"`).first().waitFor();
  }, 90_000);

  it("loaded nothing from another origin and broke no CSP rule", () => {
    const origin = new URL(t.root.baseUrl).origin;
    expect(requested.filter((u) => !u.startsWith(origin) && !u.startsWith("data:") && !u.startsWith("blob:"))).toEqual([]);
    expect(consoleLines.filter((l) => /Content Security Policy|pageerror/i.test(l))).toEqual([]);
  });
});
