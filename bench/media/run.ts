/**
 * bench/media: media uploads end to end, whole processes, on PostgreSQL.
 *
 * Per file size (200 images of 1 MiB, then 20 videos of 15 MiB; sizes and counts are options), with
 * 10 concurrent clients:
 *  - ours: fresh `npm start` processes as k8s runs them, a gateway node (gateway, auth) and a media
 *    node (media), joined over the NATS at BENCH_NATS_URL (default nats://127.0.0.1:4222); with
 *    `--together`, every service in one process. Each file is a `POST /media` multipart upload;
 *    every answer must be 201 with the file's size and SHA-256.
 *  - floor, in the same run, A B A B: a bare Node HTTP server that writes each request body straight
 *    to a file (temp name, fsync, rename), as `curl --data-binary @file` to a minimal receiver would.
 *  - the gateway process's peak RSS (VmHWM), a fresh gateway per size: streamed uploads keep it flat
 *    whatever the file size.
 * Targets: throughput ratio >= 0.5; gateway peak RSS within 10 % between 1 MiB and 15 MiB files.
 *
 *   npm run bench:media [-- --images 200 --videos 20 --image-mib 1 --video-mib 15 --clients 10] [--together]
 *   BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres (default)
 */
import { createHash, randomBytes, randomUUID } from "node:crypto";
import { createWriteStream, mkdirSync, mkdtempSync, openAsBlob, readFileSync, rmSync, writeFileSync } from "node:fs";
import { open, rename } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import os from "node:os";
import path from "node:path";
import { pipeline } from "node:stream/promises";
import { parseArgs } from "node:util";
import { createBenchDatabase } from "../database";
import { startService, type BenchService } from "../service";

const { values } = parseArgs({
  options: {
    images: { type: "string", default: "200" },
    videos: { type: "string", default: "20" },
    "image-mib": { type: "string", default: "1" },
    "video-mib": { type: "string", default: "15" },
    clients: { type: "string", default: "10" },
    together: { type: "boolean", default: false },
  },
});
const NATS = process.env.BENCH_NATS_URL ?? "nats://127.0.0.1:4222";
const API = "/api/partner-gateway/v1";
const CLIENTS = Number(values.clients);
const MIB = 1024 * 1024;

function kib(pid: number, field: "VmRSS" | "VmHWM"): number {
  const m = new RegExp(`${field}:\\s+(\\d+) kB`).exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return Number(m![1]);
}

function be32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n);
  return b;
}

function box(type: string, payload: Buffer): Buffer {
  return Buffer.concat([be32(8 + payload.length), Buffer.from(type, "latin1"), payload]);
}

/** A PNG of `bytes`: signature, a 640x480 IHDR, then one chunk of random bytes (never decoded). */
function png(bytes: number): Buffer {
  const ihdr = Buffer.concat([be32(640), be32(480), Buffer.from([8, 6, 0, 0, 0])]);
  const head = Buffer.concat([Buffer.from("89504e470d0a1a0a", "hex"), be32(13), Buffer.from("IHDR"), ihdr, be32(0)]);
  const dataLen = bytes - head.length - 12;
  return Buffer.concat([head, be32(dataLen), Buffer.from("zRND"), randomBytes(dataLen), be32(0)]);
}

/** An MP4 of `bytes`: ftyp, a moov with an mvhd of 12.5 s, and an mdat of random bytes. */
function mp4(bytes: number): Buffer {
  const ftyp = box("ftyp", Buffer.concat([Buffer.from("isom"), be32(512), Buffer.from("isomiso2mp41")]));
  const mvhd = Buffer.alloc(100);
  mvhd.writeUInt32BE(1000, 12); // timescale
  mvhd.writeUInt32BE(12500, 16); // duration
  mvhd.writeUInt32BE(0x00010000, 20); // rate
  const moov = box("moov", box("mvhd", mvhd));
  const mdatLen = bytes - ftyp.length - moov.length - 8;
  return Buffer.concat([ftyp, moov, box("mdat", randomBytes(mdatLen))]);
}

interface Sample {
  file: string;
  size: number;
  sha256: string;
}

function makeFiles(dir: string, kind: "image" | "video", count: number, bytes: number): Sample[] {
  mkdirSync(dir, { recursive: true });
  return Array.from({ length: count }, (_, i) => {
    const data = kind === "image" ? png(bytes) : mp4(bytes);
    const file = path.join(dir, `${kind}-${i}.${kind === "image" ? "png" : "mp4"}`);
    writeFileSync(file, data);
    return { file, size: data.length, sha256: createHash("sha256").update(data).digest("hex") };
  });
}

/** Runs `one` over every sample with CLIENTS at a time: seconds. */
async function concurrently(samples: Sample[], one: (s: Sample) => Promise<void>): Promise<number> {
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: CLIENTS }, async () => {
      while (next < samples.length) await one(samples[next++]!);
    }),
  );
  return (performance.now() - t0) / 1000;
}

/** The floor: a bare receiver writing each body to a file (temp name, fsync, rename). */
function rawReceiver(dir: string): Promise<Server> {
  mkdirSync(dir, { recursive: true });
  const server = createServer((req, res) => {
    const tmp = path.join(dir, `.${randomUUID()}`);
    pipeline(req, createWriteStream(tmp))
      .then(async () => {
        const fh = await open(tmp, "r+");
        await fh.sync();
        await fh.close();
        await rename(tmp, path.join(dir, randomUUID()));
        res.writeHead(201).end();
      })
      .catch(() => res.writeHead(500).end());
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)));
}

async function rawUploads(port: number, samples: Sample[]): Promise<number> {
  return concurrently(samples, async (s) => {
    const r = await fetch(`http://127.0.0.1:${port}/upload`, {
      method: "POST",
      body: await openAsBlob(s.file),
      headers: { "content-type": "application/octet-stream" },
    });
    if (r.status !== 201) throw new Error(`raw: ${r.status}`);
  });
}

async function mediaUploads(svc: BenchService, key: string, samples: Sample[]): Promise<number> {
  return concurrently(samples, async (s) => {
    const form = new FormData();
    form.append("file", await openAsBlob(s.file), path.basename(s.file));
    const r = await fetch(`http://127.0.0.1:${svc.port}${API}/media`, { method: "POST", headers: { "x-api-key": key }, body: form });
    const body = await r.text();
    if (r.status !== 201) throw new Error(`POST /media: ${r.status} ${body}`);
    const out = JSON.parse(body) as { size: number; sha256: string };
    if (out.size !== s.size || out.sha256 !== s.sha256) throw new Error(`POST /media stored ${out.size} bytes ${out.sha256}, sent ${s.size} ${s.sha256}`);
  });
}

async function main() {
  const benchDb = await createBenchDatabase();
  const dir = mkdtempSync(path.join(os.tmpdir(), "pgw-bench-media-"));
  const cluster = { TRANSPORTER: NATS, EXPORT_SIGNING_KEY: "bench-export-signing-key-0123456789abcdef", SECRETS_KEY: randomBytes(32).toString("base64") };
  const sizes = [
    { kind: "image" as const, count: Number(values.images), bytes: Number(values["image-mib"]) * MIB },
    { kind: "video" as const, count: Number(values.videos), bytes: Number(values["video-mib"]) * MIB },
  ];
  console.log(values.together ? "one process: every service" : "two processes over NATS: gateway,auth | media");
  let gateway: BenchService | null = null;
  let media: BenchService | null = null;
  let raw: Server | null = null;
  const peaks: number[] = [];
  try {
    raw = await rawReceiver(path.join(dir, "raw"));
    const rawPort = (raw.address() as { port: number }).port;
    const port = 3940 + Math.floor(Math.random() * 40);
    for (const { kind, count, bytes } of sizes) {
      const samples = makeFiles(path.join(dir, "in"), kind, count, bytes);
      const total = samples.reduce((n, s) => n + s.size, 0) / MIB;
      const env = { DATA_DIR: path.join(dir, `data-${kind}`), MEDIA_DIR: path.join(dir, `media-${kind}`), MEDIA_ACCOUNT_MAX_BYTES: String(64 * 1024 * MIB) };
      gateway = await startService(benchDb.url, port, values.together ? env : { ...env, ...cluster, SERVICES: "gateway,auth" });
      media = values.together ? gateway : await startService(benchDb.url, port + 50, { ...env, ...cluster, SERVICES: "media" });
      const key = gateway.adminKey(`bench-media-${kind}`, "MEDIA");
      // The gateway has the media routes once the media node has joined.
      for (;;) {
        const r = await fetch(`http://127.0.0.1:${port}${API}/media`, { headers: { "x-api-key": key } });
        if (r.status === 200) break;
        await new Promise((res) => setTimeout(res, 100));
      }
      // Warm both paths with a few files, then A B A B.
      await rawUploads(rawPort, samples.slice(0, CLIENTS));
      await mediaUploads(gateway, key, samples.slice(0, CLIENTS));
      const startMb = kib(gateway.pid, "VmRSS") / 1024;
      const runs: Array<{ raw: number; ours: number }> = [];
      for (let round = 0; round < 2; round++) {
        const rawS = await rawUploads(rawPort, samples);
        const oursS = await mediaUploads(gateway, key, samples);
        runs.push({ raw: total / rawS, ours: total / oursS });
      }
      const peakMb = kib(gateway.pid, "VmHWM") / 1024;
      peaks.push(peakMb);
      const f = (x: number) => x.toFixed(0);
      for (const [i, r] of runs.entries()) {
        console.log(
          `${count} ${kind}s of ${bytes / MIB} MiB, round ${i + 1}: ours ${f(r.ours)} MiB/s (${((count / total) * r.ours).toFixed(1)} files/s), raw writes ${f(r.raw)} MiB/s; ratio ${(r.ours / r.raw).toFixed(2)} (target >= 0.5)`,
        );
      }
      const median = runs.map((r) => r.ours / r.raw).sort((a, b) => a - b);
      console.log(
        `  ratio, both rounds: ${median.map((x) => x.toFixed(2)).join(", ")}; gateway RSS ${startMb.toFixed(0)} MB after warm-up, peak ${peakMb.toFixed(0)} MB`,
      );
      await gateway.stop();
      if (media !== gateway) await media.stop();
      gateway = media = null;
      rmSync(path.join(dir, "in"), { recursive: true, force: true });
      rmSync(path.join(dir, "raw"), { recursive: true, force: true });
      mkdirSync(path.join(dir, "raw"));
    }
    console.log(
      `gateway peak RSS ${peaks[0]!.toFixed(0)} MB with ${sizes[0]!.bytes / MIB} MiB files, ${peaks[1]!.toFixed(0)} MB with ${sizes[1]!.bytes / MIB} MiB files: ${(((peaks[1]! - peaks[0]!) / peaks[0]!) * 100).toFixed(1)} % apart (target within 10 %)`,
    );
  } finally {
    await gateway?.stop().catch(() => undefined);
    await media?.stop().catch(() => undefined);
    raw?.close();
    await benchDb.drop();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
