import { coerceValue, mergeParams } from "../../services/gateway/gateway.params";
import { consistentTotal } from "../../lib/http/paging";

const schema = {
  type: "object",
  properties: {
    page: { type: "integer" },
    ratio: { type: "number" },
    isTest: { type: "boolean" },
    ids: { type: "array", items: { type: "integer" } },
    name: { type: "string" },
  },
};

describe("query coercion by schema", () => {
  it("coerces what the schema asks for and leaves the rest for validation to refuse", () => {
    expect(coerceValue("12", schema.properties.page)).toBe(12);
    expect(coerceValue("1.5", schema.properties.page)).toBe("1.5");
    expect(coerceValue("ten", schema.properties.page)).toBe("ten");
    expect(coerceValue("0.25", schema.properties.ratio)).toBe(0.25);
    expect(coerceValue("true", schema.properties.isTest)).toBe(true);
    expect(coerceValue("yes", schema.properties.isTest)).toBe("yes");
    expect(coerceValue("1,2, 3", schema.properties.ids)).toEqual([1, 2, 3]);
    expect(coerceValue(["1", "2,3"], schema.properties.ids)).toEqual([1, 2, 3]);
    expect(coerceValue("", schema.properties.ids)).toEqual([]);
    expect(coerceValue("007", schema.properties.name)).toBe("007");
  });
});

describe("mergeParams", () => {
  it("merges query, body and path, coercing only query and path", () => {
    expect(mergeParams({ page: "2" }, { name: "x", ratio: "3" }, { ids: "4" }, schema)).toEqual({ page: 2, name: "x", ratio: "3", ids: [4] });
  });

  it("refuses a name given twice", () => {
    expect(() => mergeParams({ name: "a" }, { name: "b" }, {}, schema)).toThrow(/given more than once/);
    expect(() => mergeParams({}, { id: "b" }, { id: "c" }, schema)).toThrow(/given more than once/);
  });

  it("takes a writeOnly field (a secret) from the body only, never echoing it", () => {
    const secret = { type: "object", properties: { ...schema.properties, accessToken: { type: "string", writeOnly: true } } };
    expect(mergeParams({ page: "1" }, { accessToken: "in-body" }, {}, secret)).toEqual({ page: 1, accessToken: "in-body" });
    let err: { message?: string; data?: unknown } = {};
    try {
      mergeParams({ accessToken: "in-url-value" }, {}, {}, secret);
    } catch (e) {
      err = e as typeof err;
    }
    expect(err.message).toMatch(/"accessToken" is a secret: send it in the JSON body/);
    expect(err.data).toEqual({ errors: [{ path: "accessToken", message: "must be sent in the body, not in the query string" }] });
    expect(JSON.stringify(err)).not.toContain("in-url-value");
  });

  it("refuses a body that is not an object", () => {
    expect(() => mergeParams({}, [1, 2], {}, schema)).toThrow(/JSON object/);
  });

  it("keeps __proto__ as a plain (refusable) field", () => {
    const out = mergeParams({}, JSON.parse('{"__proto__": {"admin": true}}'), {}, schema);
    expect(Object.keys(out)).toEqual(["__proto__"]);
    expect(({} as Record<string, unknown>).admin).toBeUndefined();
  });
});

describe("consistentTotal (a page and its count read in two snapshots)", () => {
  it("takes the rows read over a count that saw more or fewer", () => {
    expect(consistentTotal(1, 0, 0, 10)).toBe(0); // a row committed after the page was read
    expect(consistentTotal(3, 5, 0, 10)).toBe(5); // rows committed after the count
    expect(consistentTotal(25, 5, 2, 10)).toBe(25);
    expect(consistentTotal(19, 10, 1, 10)).toBe(20); // a full page: at least what it shows
    expect(consistentTotal(42, 10, 1, 10)).toBe(42);
    expect(consistentTotal(42, 0, 7, 10)).toBe(42); // past the end: only the count knows
  });
});
