import { Errors } from "moleculer";
import { ConnectionError, ConnectionRefusedError, DatabaseError } from "sequelize";
import { ApiError, databaseUnavailable, isDatabaseUnavailable } from "../../lib/errors";
import { toProblem } from "../../lib/http/problem";

describe("toProblem", () => {
  it("keeps the detail and extensions of a documented error", () => {
    const p = toProblem(new ApiError("KEY_NOT_FOUND", "No API key x in this account.", { existingId: 7 }), "r1");
    expect(p).toEqual({
      type: "/docs#problem-key-not-found",
      title: "API key not found",
      status: 404,
      detail: "No API key x in this account.",
      requestId: "r1",
      existingId: 7,
    });
  });

  it("turns Moleculer's 422 validation error into a 400 with field errors", () => {
    const err = new Errors.ValidationError("Parameters validation error!", "VALIDATION_ERROR", [
      { path: "operations", message: "is required", nodeID: "n1", action: "auth.create" },
    ]);
    const p = toProblem(err, "r2");
    expect(p.status).toBe(400);
    expect(p.errors).toEqual([{ path: "operations", message: "is required" }]);
    expect(JSON.stringify(p)).not.toMatch(/n1|auth\.create/);
  });

  it("reduces any unexpected error to a bare 500", () => {
    const p = toProblem(new Error("SELECT password FROM users"), "r3");
    expect(p).toEqual({ type: "about:blank", title: "Internal Server Error", status: 500, detail: "Internal Server Error", requestId: "r3" });
    expect(toProblem(new Errors.MoleculerServerError("db down at /srv/x.ts", 500, "DB"), "r").detail).toBe("Internal Server Error");
    expect(toProblem(undefined, "r").status).toBe(500);
  });

  it("does not pass on the message of an undocumented client error", () => {
    const p = toProblem(new Errors.MoleculerClientError("Service 'secret.internal' is not found", 404, "WEIRD"), "r4");
    expect(p.status).toBe(404);
    expect(p.detail).not.toContain("secret");
  });

  it("maps body-parser failures", () => {
    expect(toProblem({ type: "entity.parse.failed", status: 400, message: "Unexpected token" }, "r").status).toBe(400);
    expect(toProblem({ type: "entity.too.large", status: 413 }, "r").status).toBe(413);
    expect(toProblem({ type: "charset.unsupported", status: 415 }, "r").status).toBe(415);
  });

  it("answers 503 when the service behind a route is not available, naming no internals", () => {
    for (const err of [
      new Errors.ServiceNotFoundError({ action: "contacts.list", nodeID: "node-7" }),
      new Errors.ServiceNotAvailableError({ action: "contacts.list", nodeID: "node-7" }),
      new Errors.RequestTimeoutError({ action: "contacts.list", nodeID: "node-7" }),
    ]) {
      const p = toProblem(err, "r");
      expect(p.status).toBe(503);
      expect(JSON.stringify(p)).not.toMatch(/contacts\.list|node-7/);
    }
  });

  it("answers 503 with retryAfter for every way a call can miss its node, never 500 or 404", () => {
    const web503 = Object.assign(new Errors.MoleculerError("Service unavailable", 503), { name: "ServiceUnavailableError" });
    for (const err of [
      new Errors.RequestRejectedError({ action: "contacts.list", nodeID: "node-7" }),
      new (Errors.BrokerDisconnectedError as unknown as new () => Error)(),
      new Errors.QueueIsFullError({ action: "contacts.list", nodeID: "node-7", size: 1, limit: 1 }),
      web503,
      // As they arrive from another node: plain objects with code and type.
      {
        name: "MoleculerRetryableError",
        code: 503,
        type: "REQUEST_REJECTED",
        message: "Request is rejected when call 'contacts.list' action on 'node-7' node.",
      },
      { name: "MoleculerRetryableError", code: 404, type: "SERVICE_NOT_AVAILABLE", message: "x" },
    ]) {
      const p = toProblem(err, "r");
      expect({ status: p.status, type: p.type, retryAfter: p.retryAfter }).toEqual({ status: 503, type: "/docs#problem-service-unavailable", retryAfter: 5 });
      expect(JSON.stringify(p)).not.toMatch(/contacts\.list|node-7/);
    }
  });

  it("answers 503 with retryAfter when the database cannot be reached, and 500 for a statement it refuses", () => {
    const refused = new ConnectionRefusedError(Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:5432"), { code: "ECONNREFUSED" }));
    const lost = new DatabaseError(Object.assign(new Error("Connection terminated unexpectedly"), { sql: "SELECT 1", parameters: [] }) as never);
    const shutdown = new DatabaseError(
      Object.assign(new Error("terminating connection due to administrator command"), { code: "57P01", sql: "SELECT 1", parameters: [] }) as never,
    );
    const generic = new ConnectionError(new Error("Connection terminated"));
    for (const err of [refused, lost, shutdown, generic, { name: "SequelizeConnectionRefusedError", message: "x" }, databaseUnavailable()]) {
      expect(isDatabaseUnavailable(err) || (err as { type?: string }).type === "SERVICE_UNAVAILABLE").toBe(true);
      const p = toProblem(err, "r");
      expect({ status: p.status, retryAfter: p.retryAfter }).toEqual({ status: 503, retryAfter: 5 });
      expect(JSON.stringify(p)).not.toMatch(/ECONNREFUSED|5432|administrator/);
    }
    const syntax = new DatabaseError(Object.assign(new Error('syntax error at or near "SELEC"'), { code: "42601", sql: "SELEC", parameters: [] }) as never);
    expect(isDatabaseUnavailable(syntax)).toBe(false);
    expect(toProblem(syntax, "r").status).toBe(500);
  });
});
