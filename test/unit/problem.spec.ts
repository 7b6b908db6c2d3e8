import { Errors } from "moleculer";
import { ApiError } from "../../lib/errors";
import { toProblem } from "../../lib/problem";

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
});
