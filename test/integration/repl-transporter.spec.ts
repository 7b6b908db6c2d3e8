/**
 * The transporter through which `npm run repl` joins `npm start` (lib/repl/repl-transporter.ts),
 * in-process: calls both ways, calls to a node's own actions never cross it, a socket file left by a
 * killed process is replaced and one a live process listens on is left alone, and the socket file
 * goes when the node stops. Who may connect is tested with real processes in repl.spec.ts.
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { ServiceBroker } from "moleculer";
import { brokerOptions } from "../../moleculer.config";
import { SocketClient, SocketHub, openSocket } from "../../lib/repl/repl-transporter";
import { testConfig } from "../helpers/app";
import { eventually } from "../helpers/eventually";

const tmpDir = () => fs.mkdtempSync(path.join(os.tmpdir(), "pgw-repl-tx-"));

describe("the REPL's socket transporter", () => {
  const config = testConfig({ dataDir: "/nonexistent" });
  const where = { name: "probe", actions: { where: (ctx: { broker: ServiceBroker }) => ctx.broker.nodeID } };

  async function startHub(file: string, nodeID = "hub") {
    let listening = false;
    const tx = new SocketHub(() => file, { onListening: () => (listening = true) });
    const broker = new ServiceBroker(brokerOptions(config, { nodeID, transporter: tx }));
    broker.createService(where as never);
    await broker.start();
    return { broker, tx, listening: () => listening };
  }

  async function startClient(file: string) {
    const client = new ServiceBroker(brokerOptions(config, { nodeID: "client", transporter: new SocketClient(await openSocket(file)) }));
    client.createService({ name: "probe", actions: { where: () => "client" } } as never);
    await client.start();
    return client;
  }

  it("carries calls both ways once joined, and keeps a node's calls to its own actions local", async () => {
    const file = path.join(tmpDir(), "hub.sock");
    const hub = await startHub(file);
    const client = await startClient(file);
    try {
      await eventually(() => expect(hub.broker.registry.nodes.get("client")?.available).toBe(true));
      const sent: string[] = [];
      const send = hub.tx.send.bind(hub.tx);
      hub.tx.send = (topic: string, data: Buffer) => {
        sent.push(topic);
        return send(topic, data);
      };
      for (let i = 0; i < 20; i++) expect(await hub.broker.call("probe.where")).toBe("hub");
      expect(sent.filter((t) => /\.(REQ|RES)\./.test(t))).toEqual([]);
      expect(await client.call("probe.where", {}, { nodeID: "hub" })).toBe("hub");
      expect(await hub.broker.call("probe.where", {}, { nodeID: "client" })).toBe("client");
    } finally {
      await client.stop();
      await hub.broker.stop();
    }
    // Stopping the node removes its socket file.
    expect(fs.existsSync(file)).toBe(false);
  });

  it("replaces a socket file left by a killed process, and leaves one a live process listens on alone", async () => {
    const file = path.join(tmpDir(), "hub.sock");
    // A process killed while listening leaves its socket file behind.
    const killed = spawnSync(process.execPath, [
      "-e",
      `require("net").createServer().listen(${JSON.stringify(file)}, () => process.kill(process.pid, "SIGKILL"))`,
    ]);
    expect(killed.signal).toBe("SIGKILL");
    expect(fs.statSync(file).isSocket()).toBe(true);
    const first = await startHub(file);
    expect(first.listening()).toBe(true);
    // A second node on the same file starts, without the socket, and leaves the first one's in place.
    const second = await startHub(file, "second");
    expect(second.listening()).toBe(false);
    await second.broker.stop();
    expect(fs.existsSync(file)).toBe(true);
    const client = await startClient(file);
    try {
      await eventually(async () => expect(await client.call("probe.where", {}, { nodeID: "hub" })).toBe("hub"));
    } finally {
      await client.stop();
      await first.broker.stop();
    }
  });
});
