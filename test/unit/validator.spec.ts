import { ApiError } from "../../lib/errors";
import { toProblem } from "../../lib/http/problem";
import { checkText } from "../../lib/http/text";
import { compileChecker, FULL_REPORT_MAX_VALUES, holdsMoreThan, MAX_FIELD_ERRORS, toFieldErrors } from "../../lib/http/validator";

const schema = {
  $id: "ValidatorSpecIn",
  type: "object",
  additionalProperties: false,
  required: ["ids"],
  properties: {
    ids: { type: "array", maxItems: 20000, items: { type: "string", pattern: "^[a-f]+$" } },
    n: { type: "integer" },
  },
} as const;

describe("field errors of large bodies", () => {
  const check = compileChecker(schema);

  it("names the first 100 distinct errors and counts the rest in one closing entry", () => {
    const res = check({ ids: Array.from({ length: 20000 }, (_, i) => `x${i}`) });
    expect(res).not.toBe(true);
    const errors = res as Array<{ path: string; message: string; errorsNotShown?: number }>;
    expect(errors).toHaveLength(MAX_FIELD_ERRORS + 1);
    expect(errors[0]).toEqual({ path: "ids[0]", message: 'must match pattern "^[a-f]+$"' });
    expect(errors[MAX_FIELD_ERRORS]!.errorsNotShown).toBe(20000 - MAX_FIELD_ERRORS);
    // The problem body names 100 and counts the rest.
    const problem = toProblem(new ApiError("VALIDATION_ERROR", "bad", { errors }), "r1");
    expect(problem.errors).toHaveLength(MAX_FIELD_ERRORS);
    expect(problem.errorsNotShown).toBe(20000 - MAX_FIELD_ERRORS);
  });

  it("reports each distinct error once", () => {
    const errors = toFieldErrors([
      { instancePath: "/ids/0", keyword: "pattern", schemaPath: "#/a", params: {}, message: "m" },
      { instancePath: "/ids/0", keyword: "pattern", schemaPath: "#/b", params: {}, message: "m" },
      { instancePath: "", keyword: "required", schemaPath: "#/c", params: { missingProperty: "ids" }, message: "x" },
    ]);
    expect(errors).toEqual([
      { path: "ids[0]", message: "m" },
      { path: "ids", message: "is required" },
    ]);
  });

  it("answers a body holding more values than any valid one with its first error alone", () => {
    const res = check({ ids: ["ok"], n: "x", extra: new Array(FULL_REPORT_MAX_VALUES + 1).fill(0) });
    expect(res).not.toBe(true);
    expect((res as unknown[]).length).toBe(1);
  });

  it("counts values only as far as it needs", () => {
    expect(holdsMoreThan({ a: [1, 2, { b: [3] }] }, 6)).toBe(false);
    expect(holdsMoreThan({ a: [1, 2, { b: [3, 4, 5] }] }, 6)).toBe(true);
    expect(holdsMoreThan("text", 0)).toBe(false);
  });
});

describe("checkText", () => {
  const errorOf = (v: unknown) => {
    try {
      checkText(v);
      return null;
    } catch (e) {
      return (e as ApiError).data as { errors: Array<{ path: string; message: string }> };
    }
  };

  it("names where a NUL is, in arrays and objects", () => {
    expect(errorOf({ a: [{ b: "ok" }, { b: "x\u0000" }] })?.errors[0]?.path).toBe("a[1].b");
    expect(errorOf(["\u0000"])?.errors[0]?.path).toBe("[0]");
    expect(errorOf({ ["k\u0000"]: 1 })?.errors[0]).toEqual({ path: "k\u0000", message: "is not a valid name" });
    expect(errorOf({ a: [1, "fine", { c: "\ud800" }] })?.errors[0]?.path).toBe("a[2].c");
    expect(errorOf({ a: new Array(400000).fill(0) })).toBeNull();
  });

  it("refuses nesting deeper than 32 levels, naming the first value too deep", () => {
    let deep: unknown = 1;
    for (let i = 0; i < 33; i++) deep = [deep];
    expect(errorOf(deep)?.errors[0]?.message).toBe("is nested too deeply");
    let ok: unknown = 1;
    for (let i = 0; i < 32; i++) ok = [ok];
    expect(errorOf(ok)).toBeNull();
  });
});
