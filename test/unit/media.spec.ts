import { describeContent, sniffMagic } from "../../lib/messaging/magic";
import { contentDisposition, notModified, parseRange } from "../../services/media/media.content";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { open } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { imageSize, jpegSize, mp4Duration } from "../../services/media/media.probe";
import { gif, jpeg, mp4, png, webp } from "../helpers/media";

describe("media: kinds by magic numbers", () => {
  it("tells the five formats from their first bytes only", () => {
    expect(sniffMagic(jpeg())).toBe("jpeg");
    expect(sniffMagic(png())).toBe("png");
    expect(sniffMagic(gif())).toBe("gif");
    expect(sniffMagic(Buffer.concat([Buffer.from("GIF87a"), Buffer.alloc(10)]))).toBe("gif");
    expect(sniffMagic(webp())).toBe("webp");
    expect(sniffMagic(mp4())).toBe("mp4");
  });

  it("refuses look-alikes: a RIFF that is not WEBP, an ISO file of another brand, text, a truncated signature", () => {
    expect(sniffMagic(Buffer.from("RIFF\0\0\0\0WAVEfmt "))).toBeNull();
    expect(sniffMagic(Buffer.from("00000014667479707174202000000200", "hex"))).toBeNull(); // QuickTime
    expect(sniffMagic(Buffer.from("00000018667479706865696300000000", "hex"))).toBeNull(); // HEIC
    expect(sniffMagic(Buffer.from("\x89PNG"))).toBeNull();
    expect(sniffMagic(Buffer.from("GIF8"))).toBeNull();
    expect(sniffMagic(Buffer.from("hello.png"))).toBeNull();
  });

  it.each([
    ["%PDF-1.7\n", /PDF document \(application\/pdf\)/],
    ["<svg xmlns='http://www.w3.org/2000/svg'/>", /^SVG\/HTML text \(image\/svg\+xml\)$/],
    ['<?xml version="1.0"?>\n<!-- x -->\n<svg width="1">', /^SVG\/HTML text \(image\/svg\+xml\)$/],
    ["\n<!doctype html><title>x</title>", /^SVG\/HTML text \(text\/html\)$/],
    ["<html><body>hi</body></html>", /^SVG\/HTML text \(text\/html\)$/],
    ["just some words", /^text$/],
    ["PK\x03\x04rest", /ZIP archive/],
    ["\x00\x01\x02\x03binary", /unknown kind/],
  ])("names what %j is", (head, name) => {
    expect(describeContent(Buffer.from(head, "latin1"))).toMatch(name);
  });
});

describe("media: header dimensions", () => {
  it("reads width and height of each image format", () => {
    expect(imageSize("png", png(640, 480))).toMatchObject({ width: 640, height: 480 });
    expect(imageSize("gif", gif(300, 200))).toMatchObject({ width: 300, height: 200 });
    expect(imageSize("jpeg", jpeg(1920, 1080))).toMatchObject({ width: 1920, height: 1080 });
    expect(imageSize("webp", webp(16383, 2))).toMatchObject({ width: 16383, height: 2 });
  });

  it("answers null for a truncated or odd header instead of failing", () => {
    expect(jpegSize(jpeg().subarray(0, 30))).toMatchObject({ width: null, height: null });
    expect(jpegSize(Buffer.from([0xff, 0xd8, 0xff, 0xda, 0, 4, 0, 0, 0, 0, 0, 0]))).toMatchObject({ width: null });
    expect(imageSize("png", png().subarray(0, 20))).toMatchObject({ width: null });
    expect(imageSize("webp", Buffer.from("RIFF\0\0\0\0WEBPVP8Z"))).toMatchObject({ width: null });
  });

  it("answers null for a width or height past 2^31-1 (the integer column), whatever the format", () => {
    const huge = png(1, 1);
    huge.writeUInt32BE(2 ** 31 - 1, 16);
    expect(imageSize("png", huge)).toMatchObject({ width: 2 ** 31 - 1, height: 1 });
    huge.writeUInt32BE(2 ** 31, 16);
    expect(imageSize("png", huge)).toEqual({ width: null, height: null, durationMs: null });
    huge.writeUInt32BE(1, 16);
    huge.writeUInt32BE(0xffffffff, 20);
    expect(imageSize("png", huge)).toEqual({ width: null, height: null, durationMs: null });
    // VP8X holds 24-bit sizes, GIF and JPEG 16-bit: all within range.
    expect(imageSize("gif", gif(65535, 65535))).toMatchObject({ width: 65535, height: 65535 });
  });
});

const be32 = (n: number) => {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n);
  return b;
};
const be64 = (n: bigint) => {
  const b = Buffer.alloc(8);
  b.writeBigUInt64BE(n);
  return b;
};
const mp4Box = (type: string, ...payload: Buffer[]) => {
  const body = Buffer.concat(payload);
  return Buffer.concat([be32(8 + body.length), Buffer.from(type, "latin1"), body]);
};
/** An mvhd payload: version 0 (32-bit duration) or 1 (64-bit). */
function mvhd(version: 0 | 1, timescale: number, duration: bigint): Buffer {
  if (version === 0) return Buffer.concat([Buffer.from([0, 0, 0, 0]), be32(0), be32(0), be32(timescale), be32(Number(duration)), Buffer.alloc(80)]);
  return Buffer.concat([Buffer.from([1, 0, 0, 0]), be64(0n), be64(0n), be32(timescale), be64(duration), Buffer.alloc(80)]);
}
const ftyp = mp4Box("ftyp", Buffer.from("isom\0\0\x02\0isommp41", "latin1"));

describe("media: MP4 duration (moov/mvhd)", () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "mp4-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  let n = 0;
  async function durationOf(bytes: Buffer): Promise<number | null> {
    const file = path.join(dir, `f${n++}.mp4`);
    writeFileSync(file, bytes);
    const fh = await open(file, "r");
    try {
      return await mp4Duration(fh, bytes.length);
    } finally {
      await fh.close();
    }
  }

  it("reads version 0 and version 1 headers", async () => {
    expect(await durationOf(Buffer.concat([ftyp, mp4Box("moov", mp4Box("mvhd", mvhd(0, 600, 1500n)))]))).toBe(2500);
    expect(await durationOf(Buffer.concat([ftyp, mp4Box("moov", mp4Box("mvhd", mvhd(1, 1000, 123_456n)))]))).toBe(123_456);
  });

  it("walks past other boxes inside moov, and finds a moov after a large mdat", async () => {
    const moov = mp4Box("moov", mp4Box("trak", Buffer.alloc(40)), mp4Box("udta", Buffer.alloc(8)), mp4Box("mvhd", mvhd(0, 90_000, 900_000n)));
    expect(await durationOf(Buffer.concat([ftyp, mp4Box("mdat", Buffer.alloc(100_000)), moov]))).toBe(10_000);
  });

  it("takes a box of size 1 (64-bit size) and of size 0 (to the end of the file)", async () => {
    const payload = Buffer.alloc(64, 1);
    const largeMdat = Buffer.concat([be32(1), Buffer.from("mdat", "latin1"), be64(BigInt(16 + payload.length)), payload]);
    const moov = mp4Box("moov", mp4Box("mvhd", mvhd(0, 1000, 42n)));
    expect(await durationOf(Buffer.concat([ftyp, largeMdat, moov]))).toBe(42);
    const body = mp4Box("mvhd", mvhd(0, 1000, 7n));
    const moovToEnd = Buffer.concat([be32(0), Buffer.from("moov", "latin1"), body]);
    expect(await durationOf(Buffer.concat([ftyp, moovToEnd]))).toBe(7);
  });

  it("answers null for box sizes past the file or past any number, and too small ones", async () => {
    const moov = mp4Box("moov", mp4Box("mvhd", mvhd(0, 1000, 42n)));
    const huge64 = Buffer.concat([be32(1), Buffer.from("mdat", "latin1"), be64(0xffffffffffffff00n), Buffer.alloc(8)]);
    expect(await durationOf(Buffer.concat([ftyp, huge64, moov]))).toBeNull();
    const past32 = Buffer.concat([be32(0xfffffff0), Buffer.from("mdat", "latin1"), Buffer.alloc(8)]);
    expect(await durationOf(Buffer.concat([ftyp, past32, moov]))).toBeNull();
    const tooSmall = Buffer.concat([be32(4), Buffer.from("free", "latin1")]);
    expect(await durationOf(Buffer.concat([ftyp, tooSmall, moov]))).toBeNull();
    const small64 = Buffer.concat([be32(1), Buffer.from("free", "latin1"), be64(8n)]);
    expect(await durationOf(Buffer.concat([ftyp, small64, moov]))).toBeNull();
    expect(await durationOf(ftyp)).toBeNull();
  });

  it("answers null for a duration past 2^53 ms or unknown (all ones), and for a zero timescale", async () => {
    const of = (version: 0 | 1, timescale: number, duration: bigint) =>
      durationOf(Buffer.concat([ftyp, mp4Box("moov", mp4Box("mvhd", mvhd(version, timescale, duration)))]));
    expect(await of(1, 1000, 0xfffffffffffffffen)).toBeNull();
    expect(await of(1, 1, BigInt(Number.MAX_SAFE_INTEGER))).toBeNull(); // seconds: 1000 times past
    expect(await of(1, 1000, BigInt(Number.MAX_SAFE_INTEGER))).toBe(Number.MAX_SAFE_INTEGER);
    expect(await of(1, 1000, BigInt(Number.MAX_SAFE_INTEGER) + 1n)).toBeNull();
    expect(await of(1, 1000, 0xffffffffffffffffn)).toBeNull();
    expect(await of(0, 1000, 0xffffffffn)).toBeNull();
    expect(await of(0, 0, 100n)).toBeNull();
    expect(await of(0, 1, 0xfffffffen)).toBe(0xfffffffe * 1000);
  });
});

describe("media: conditional and partial GET", () => {
  const etag = '"abc"';
  it("matches If-None-Match weakly, in a list, or *", () => {
    expect(notModified('"abc"', etag)).toBe(true);
    expect(notModified('W/"abc"', etag)).toBe(true);
    expect(notModified('"x", "abc"', etag)).toBe(true);
    expect(notModified("*", etag)).toBe(true);
    expect(notModified('"abcd"', etag)).toBe(false);
    expect(notModified(undefined, etag)).toBe(false);
  });

  it.each([
    ["bytes=0-9", { kind: "part", start: 0, length: 10 }],
    ["bytes=90-", { kind: "part", start: 90, length: 10 }],
    ["bytes=-5", { kind: "part", start: 95, length: 5 }],
    ["bytes=-500", { kind: "part", start: 0, length: 100 }],
    ["bytes=50-5000", { kind: "part", start: 50, length: 50 }],
    ["bytes=99-99", { kind: "part", start: 99, length: 1 }],
    ["bytes=100-", { kind: "unsatisfiable" }],
    ["bytes=100-200", { kind: "unsatisfiable" }],
    ["bytes=-0", { kind: "unsatisfiable" }],
    ["bytes=0-1,4-5", { kind: "whole" }],
    ["bytes=9-3", { kind: "whole" }],
    ["bytes=-", { kind: "whole" }],
    ["items=0-9", { kind: "whole" }],
    ["bytes=a-b", { kind: "whole" }],
    ["bytes=99999999999999999999-", { kind: "unsatisfiable" }],
    ["bytes=0-99999999999999999999", { kind: "part", start: 0, length: 100 }],
    ["bytes=10-9007199254740993", { kind: "part", start: 10, length: 90 }],
    ["bytes=-99999999999999999999", { kind: "part", start: 0, length: 100 }],
    ["bytes=99999999999999999999-5", { kind: "whole" }],
  ])("answers %s of a 100-byte file", (header, expected) => {
    expect(parseRange(header, 100)).toEqual(expected);
  });

  it("writes a Content-Disposition no file name can break out of", () => {
    const d = contentDisposition('a"b\r\nSet-Cookie: x=1;/..\\été.png');
    expect(d).toMatch(/^inline; filename="[A-Za-z0-9._ -]+"; filename\*=UTF-8''[A-Za-z0-9%._~!-]+$/);
    expect(d).not.toMatch(/[\r\n]/);
    expect(contentDisposition("../../etc/passwd")).toMatch(/^inline; filename="passwd"/);
    expect(contentDisposition(".hidden")).toMatch(/^inline; filename="_hidden"/);
  });
});
