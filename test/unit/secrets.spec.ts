/**
 * The sealing of secrets at rest (lib/security/secrets.ts), here social-profile tokens, and key files
 * generated once into DATA_DIR (lib/security/key-file.ts): what keeps a stored token secret and bound to
 * its row, and what lets keys rotate.
 */
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { createCipheriv } from "node:crypto";
import { keyFileOnce, readKeyFile } from "../../lib/security/key-file";
import { signingKey } from "../../services/exports/exports.signing";
import { keyIdOf, SecretBox, secretBox, SecretUnreadableError, SECRETS_KEY_FILE } from "../../lib/security/secrets";
import { profileAad } from "../../services/profiles/profiles.models";

const key = () => randomBytes(32);
const AAD = profileAad("acme", "5f0c6a1e-3b7d-4c2a-9e51-8d4f2b6a7c10");
const tmpDir = () => fs.mkdtempSync(path.join(os.tmpdir(), "pgw-keys-"));

function unreadable(fn: () => unknown): SecretUnreadableError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(SecretUnreadableError);
    return err as SecretUnreadableError;
  }
  throw new Error("expected the token to be unreadable");
}

describe("SecretBox", () => {
  it("round-trips a token, with a fresh IV each time and the key's id recorded", () => {
    const k = key();
    const box = new SecretBox(k);
    const a = box.seal("EAAB-token-é-🎉", AAD);
    const b = box.seal("EAAB-token-é-🎉", AAD);
    expect(a.keyId).toBe(keyIdOf(k));
    expect(a.keyId).toMatch(/^[0-9a-f]{16}$/);
    expect(a.iv).toHaveLength(12);
    expect(a.tag).toHaveLength(16);
    expect(a.iv.equals(b.iv)).toBe(false);
    expect(a.ciphertext.equals(b.ciphertext)).toBe(false);
    expect(a.ciphertext.toString("latin1")).not.toContain("EAAB-token");
    expect(box.open(a, AAD)).toBe("EAAB-token-é-🎉");
  });

  it("refuses a ciphertext moved to another row (other AAD)", () => {
    const box = new SecretBox(key());
    const sealed = box.seal("token", AAD);
    expect(unreadable(() => box.open(sealed, profileAad("acme", "0b6e4c1e-8a8c-4f5e-9a0e-3d2f1c4b5a69"))).reason).toBe("NOT_AUTHENTIC");
    expect(unreadable(() => box.open(sealed, profileAad("other", "5f0c6a1e-3b7d-4c2a-9e51-8d4f2b6a7c10"))).reason).toBe("NOT_AUTHENTIC");
  });

  it("refuses a tampered tag, ciphertext or IV", () => {
    const box = new SecretBox(key());
    const sealed = box.seal("token", AAD);
    const flip = (b: Buffer) => Buffer.from(b.map((x, i) => (i === 0 ? x ^ 1 : x)));
    expect(unreadable(() => box.open({ ...sealed, tag: flip(sealed.tag) }, AAD)).reason).toBe("NOT_AUTHENTIC");
    expect(unreadable(() => box.open({ ...sealed, tag: sealed.tag.subarray(0, 8) }, AAD)).reason).toBe("NOT_AUTHENTIC");
    expect(unreadable(() => box.open({ ...sealed, ciphertext: flip(sealed.ciphertext) }, AAD)).reason).toBe("NOT_AUTHENTIC");
    expect(unreadable(() => box.open({ ...sealed, iv: flip(sealed.iv) }, AAD)).reason).toBe("NOT_AUTHENTIC");
  });

  it("reads what the previous key wrote, and seals only under the current one", () => {
    const oldKey = key();
    const newKey = key();
    const sealedOld = new SecretBox(oldKey).seal("old-token", AAD);
    const box = new SecretBox(newKey, oldKey);
    expect(box.open(sealedOld, AAD)).toBe("old-token");
    expect(box.isCurrent(sealedOld.keyId)).toBe(false);
    const resealed = box.seal("old-token", AAD);
    expect(resealed.keyId).toBe(keyIdOf(newKey));
    expect(new SecretBox(newKey).open(resealed, AAD)).toBe("old-token");
  });

  it("fails honestly, naming the key id and never the token, for a key it does not have", () => {
    const sealed = new SecretBox(key()).seal("very-secret-token", AAD);
    const err = unreadable(() => new SecretBox(key(), key()).open(sealed, AAD));
    expect(err.reason).toBe("UNKNOWN_KEY");
    expect(err.keyId).toBe(sealed.keyId);
    expect(err.message).toContain(sealed.keyId);
    expect(err.message).not.toContain("very-secret-token");
    // A forged key id naming the current key does not help either.
    const box = new SecretBox(key());
    expect(unreadable(() => box.open({ ...sealed, keyId: box.currentKeyId }, AAD)).reason).toBe("NOT_AUTHENTIC");
  });

  it("refuses an IV that is not 12 bytes, even one that authenticates", () => {
    const k = key();
    const iv = randomBytes(16);
    const cipher = createCipheriv("aes-256-gcm", k, iv);
    cipher.setAAD(AAD);
    const ciphertext = Buffer.concat([cipher.update("token", "utf8"), cipher.final()]);
    const sealed = { keyId: keyIdOf(k), iv, tag: cipher.getAuthTag(), ciphertext };
    expect(unreadable(() => new SecretBox(k).open(sealed, AAD)).reason).toBe("NOT_AUTHENTIC");
  });

  it("refuses keys that are not 32 bytes", () => {
    expect(() => new SecretBox(randomBytes(16))).toThrow(/32 bytes/);
    expect(() => new SecretBox(key(), randomBytes(31))).toThrow(/32 bytes/);
  });
});

describe("secretBox(config)", () => {
  it("uses SECRETS_KEY and SECRETS_KEY_PREVIOUS as given, writing nothing", () => {
    const dir = tmpDir();
    const current = key();
    const previous = key();
    const box = secretBox({ secretsKey: current.toString("base64"), secretsKeyPrevious: previous.toString("base64"), dataDir: dir });
    expect(box.currentKeyId).toBe(keyIdOf(current));
    expect(box.open(new SecretBox(previous).seal("t", AAD), AAD)).toBe("t");
    expect(fs.readdirSync(dir)).toEqual([]);
  });

  it("without SECRETS_KEY generates one key into DATA_DIR (mode 0600) and reuses it", () => {
    const dir = path.join(tmpDir(), "data");
    const first = secretBox({ secretsKey: null, secretsKeyPrevious: null, dataDir: dir });
    const file = path.join(dir, SECRETS_KEY_FILE);
    expect(fs.statSync(file).mode & 0o777).toBe(0o600);
    expect(Buffer.from(fs.readFileSync(file, "utf8"), "base64")).toHaveLength(32);
    const sealed = first.seal("t", AAD);
    const second = secretBox({ secretsKey: null, secretsKeyPrevious: null, dataDir: dir });
    expect(second.currentKeyId).toBe(first.currentKeyId);
    expect(second.open(sealed, AAD)).toBe("t");
    expect(fs.readdirSync(dir)).toEqual([SECRETS_KEY_FILE]);
  });

  it("refuses a key file that is not strict base64 (base64url, inner spaces), as the variables are", () => {
    let k = key();
    while (!/[-_]/.test(k.toString("base64url"))) k = key();
    for (const text of [k.toString("base64url"), `${k.toString("base64").slice(0, 20)} ${k.toString("base64").slice(20)}`]) {
      const dir = tmpDir();
      fs.writeFileSync(path.join(dir, SECRETS_KEY_FILE), text, { mode: 0o600 });
      expect(() => secretBox({ secretsKey: null, secretsKeyPrevious: null, dataDir: dir })).toThrow(/not 32 bytes in base64/);
    }
  });

  it("with create: false reads an existing key file and never creates one", () => {
    const dir = tmpDir();
    expect(() => secretBox({ secretsKey: null, secretsKeyPrevious: null, dataDir: dir }, { create: false })).toThrow(/does not exist/);
    expect(fs.readdirSync(dir)).toEqual([]);
    const made = secretBox({ secretsKey: null, secretsKeyPrevious: null, dataDir: dir });
    expect(secretBox({ secretsKey: null, secretsKeyPrevious: null, dataDir: dir }, { create: false }).currentKeyId).toBe(made.currentKeyId);
  });

  it("refuses a key file that does not hold 32 bytes", () => {
    const dir = tmpDir();
    fs.writeFileSync(path.join(dir, SECRETS_KEY_FILE), "c2hvcnQ=");
    expect(() => secretBox({ secretsKey: null, secretsKeyPrevious: null, dataDir: dir })).toThrow(/not 32 bytes/);
  });
});

describe("keyFileOnce", () => {
  it("writes once (0600), then returns what is there; many callers at once agree", async () => {
    const dir = tmpDir();
    let made = 0;
    const values = await Promise.all(
      Array.from({ length: 20 }, (_, i) => Promise.resolve().then(() => keyFileOnce(dir, "k.key", () => `value-${i}-${++made}`))),
    );
    expect(new Set(values).size).toBe(1);
    expect(fs.statSync(path.join(dir, "k.key")).mode & 0o777).toBe(0o600);
    expect(keyFileOnce(dir, "k.key", () => "other")).toBe(values[0]);
    expect(fs.readdirSync(dir)).toEqual(["k.key"]);
  });

  it("only reads an existing key file: nothing is written or created in its directory", () => {
    const dir = tmpDir();
    fs.writeFileSync(path.join(dir, "k.key"), "existing-value\n", { mode: 0o600 });
    const before = fs.readdirSync(dir);
    const writes = [jest.spyOn(fs, "writeFileSync"), jest.spyOn(fs, "linkSync"), jest.spyOn(fs, "mkdirSync"), jest.spyOn(fs, "openSync")];
    try {
      expect(keyFileOnce(dir, "k.key", () => "generated")).toBe("existing-value");
      for (const spy of writes.slice(0, 3)) expect(spy).not.toHaveBeenCalled();
      // Opened read-only (tests run as root, so a 0500 directory would not refuse a write: no write is attempted at all).
      for (const [, flags] of writes[3]!.mock.calls) expect(Number(flags) & (fs.constants.O_WRONLY | fs.constants.O_RDWR | fs.constants.O_CREAT)).toBe(0);
    } finally {
      for (const spy of writes) spy.mockRestore();
    }
    expect(fs.readdirSync(dir)).toEqual(before);
  });

  it("refuses to follow a symlink, and warns about a key file others may read", () => {
    const dir = tmpDir();
    fs.writeFileSync(path.join(dir, "real.key"), "value", { mode: 0o600 });
    fs.symlinkSync(path.join(dir, "real.key"), path.join(dir, "k.key"));
    expect(() => keyFileOnce(dir, "k.key", () => "generated")).toThrow(/symbolic link/);
    expect(fs.readFileSync(path.join(dir, "real.key"), "utf8")).toBe("value");

    fs.writeFileSync(path.join(dir, "loose.key"), "loose-value", { mode: 0o644 });
    fs.chmodSync(path.join(dir, "loose.key"), 0o644);
    const warn = jest.fn();
    expect(readKeyFile(path.join(dir, "loose.key"), warn)).toBe("loose-value");
    expect(warn).toHaveBeenCalledWith(expect.stringMatching(/mode 0644.*0600/));
    const quiet = jest.fn();
    expect(keyFileOnce(dir, "real.key", () => "x", quiet)).toBe("value");
    expect(quiet).not.toHaveBeenCalled();
  });

  it("removes the file written aside when putting the key in place fails", () => {
    const dir = tmpDir();
    const link = jest.spyOn(fs, "linkSync").mockImplementation(() => {
      throw Object.assign(new Error("EIO: i/o error"), { code: "EIO" });
    });
    try {
      expect(() => keyFileOnce(dir, "k.key", () => "generated")).toThrow(/EIO/);
    } finally {
      link.mockRestore();
    }
    expect(fs.readdirSync(dir)).toEqual([]);
  });

  it("makes processes started at the same moment agree on one key", async () => {
    const dir = tmpDir();
    const script = path.join(dir, "race.ts");
    fs.writeFileSync(
      script,
      `import { keyFileOnce } from ${JSON.stringify(path.join(__dirname, "../../lib/security/key-file"))};\n` +
        `process.stdout.write(keyFileOnce(${JSON.stringify(path.join(dir, "data"))}, "secrets.key", () => "key-of-" + process.pid));\n`,
    );
    const tsx = path.join(__dirname, "../../node_modules/tsx/dist/cli.mjs");
    const run = () =>
      new Promise<string>((resolve, reject) => execFile(process.execPath, [tsx, script], { cwd: dir }, (err, stdout) => (err ? reject(err) : resolve(stdout))));
    const keys = await Promise.all(Array.from({ length: 6 }, run));
    expect(keys[0]).toMatch(/^key-of-\d+$/);
    expect(new Set(keys).size).toBe(1);
    expect(fs.readdirSync(path.join(dir, "data"))).toEqual(["secrets.key"]);
  }, 60000);

  it("keeps the exports signing key as before: generated once, 0600, reused", () => {
    const dir = tmpDir();
    const config = { exportSigningKey: null, dataDir: dir } as never;
    const a = signingKey(config);
    expect(a.length).toBeGreaterThanOrEqual(32);
    expect(signingKey(config).equals(a)).toBe(true);
    expect(fs.statSync(path.join(dir, "export-signing.key")).mode & 0o777).toBe(0o600);
    fs.writeFileSync(path.join(dir, "export-signing.key"), "short");
    expect(() => signingKey(config)).toThrow(/fewer than 32 characters/);
  });
});
