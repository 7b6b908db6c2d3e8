/** Text checks shared by every listener that takes JSON (the partner gateway, the internal ingress). */
import { ApiError } from "./errors";

const BAD_TEXT = /\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const MAX_DEPTH = 32;

/**
 * Text no database can store faithfully (NUL, unpaired UTF-16 surrogates) and absurdly deep nesting
 * are refused up front, naming where, instead of failing deep down or being silently altered.
 */
export function checkText(value: unknown): void {
  const stack: Array<[unknown, string, number]> = [[value, "", 0]];
  while (stack.length) {
    const [v, path, depth] = stack.pop()!;
    if (depth > MAX_DEPTH)
      throw new ApiError("VALIDATION_ERROR", `The request is nested more than ${MAX_DEPTH} levels deep.`, {
        errors: [{ path, message: "is nested too deeply" }],
      });
    if (typeof v === "string") {
      if (BAD_TEXT.test(v))
        throw new ApiError("VALIDATION_ERROR", "The request holds text with NUL or unpaired surrogate characters.", {
          errors: [{ path, message: "must not contain NUL or unpaired surrogate characters" }],
        });
    } else if (v && typeof v === "object") {
      for (const [k, child] of Object.entries(v as Record<string, unknown>)) {
        const childPath = Array.isArray(v) ? `${path}[${k}]` : path ? `${path}.${k}` : k;
        if (BAD_TEXT.test(k))
          throw new ApiError("VALIDATION_ERROR", "The request holds a field name with NUL or unpaired surrogate characters.", {
            errors: [{ path: childPath, message: "is not a valid name" }],
          });
        stack.push([child, childPath, depth + 1]);
      }
    }
  }
}
