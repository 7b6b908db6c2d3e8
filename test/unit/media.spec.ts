import { describeContent, sniffMagic } from "../../lib/magic";
import { contentDisposition, notModified, parseRange } from "../../services/media/media.content";
import { imageSize, jpegSize } from "../../services/media/media.probe";
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
    ["bytes=99999999999999999999-", { kind: "whole" }],
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
