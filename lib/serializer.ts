/**
 * Moleculer's JSON serializer, except for answers whose data is a Buffer (the byte ranges pulled by
 * lib/remote-file.ts): those cross as a small binary frame (magic, the length of the envelope's
 * JSON, the envelope with its data left out, then the bytes as they are) instead of being turned
 * into base64 and a JSON string on one side and parsed back on the other — that was most of the
 * CPU an upload cost both nodes (bench/media). Every node of a cluster must run this serializer
 * (as every node runs lib/nats-transporter.ts).
 */
import { Serializers } from "moleculer";

const MAGIC = Buffer.from("\u0000PGW-BIN1");
const HEAD = MAGIC.length + 4;

const JsonSerializer = Serializers.JSON as unknown as new () => {
  serialize(obj: unknown, type?: string): Buffer;
  deserialize(buf: Buffer, type?: string): unknown;
};

export class BinaryAnswerSerializer extends JsonSerializer {
  override serialize(obj: unknown, type?: string): Buffer {
    const data = (obj as { data?: unknown } | null)?.data;
    if (type !== "RES" || !Buffer.isBuffer(data)) return super.serialize(obj, type);
    const envelope = Buffer.from(JSON.stringify({ ...(obj as object), data: null }));
    const out = Buffer.allocUnsafe(HEAD + envelope.length + data.length);
    MAGIC.copy(out, 0);
    out.writeUInt32BE(envelope.length, MAGIC.length);
    envelope.copy(out, HEAD);
    data.copy(out, HEAD + envelope.length);
    return out;
  }

  override deserialize(buf: Buffer, type?: string): unknown {
    if (buf.length < HEAD || buf[0] !== 0 || !buf.subarray(0, MAGIC.length).equals(MAGIC)) return super.deserialize(buf, type);
    const length = buf.readUInt32BE(MAGIC.length);
    const packet = JSON.parse(buf.toString("utf8", HEAD, HEAD + length)) as { data: unknown };
    packet.data = buf.subarray(HEAD + length);
    return packet;
  }
}
