/**
 * /docs: the OpenAPI document rendered as one self-contained HTML page (no scripts, no CDN, works
 * offline), with an anchor per problem type so that a problem's `type` URI lands on its entry.
 */
import { ERROR_TYPES } from "../../lib/errors";
import { problemTypeUri } from "../../lib/problem";

const esc = (s: unknown) => String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]!);

type Doc = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

function schemaText(schema: unknown, doc: Doc): string {
  return esc(JSON.stringify(resolveRef(schema, doc), null, 2));
}

function resolveRef(schema: unknown, doc: Doc, depth = 0): unknown {
  if (!schema || typeof schema !== "object" || depth > 6) return schema;
  if (Array.isArray(schema)) return schema.map((s) => resolveRef(s, doc, depth + 1));
  const s = schema as Record<string, unknown>;
  if (typeof s.$ref === "string" && s.$ref.startsWith("#/components/schemas/")) {
    return resolveRef(doc.components.schemas[s.$ref.split("/").pop()!], doc, depth + 1);
  }
  return Object.fromEntries(Object.entries(s).map(([k, v]) => [k, resolveRef(v, doc, depth + 1)]));
}

export function renderDocs(doc: Doc): string {
  const ops: string[] = [];
  for (const [path, methods] of Object.entries(doc.paths as Record<string, Record<string, Doc>>)) {
    for (const [method, op] of Object.entries(methods)) {
      const params = (op.parameters as Doc[]).filter((p) => !p.$ref);
      const body = op.requestBody?.content?.["application/json"];
      const form = op.requestBody?.content?.["multipart/form-data"];
      const fileField = form ? Object.entries(form.schema.properties as Record<string, Doc>).find(([, p]) => p.format === "binary")?.[0] : undefined;
      const responses = Object.entries(op.responses as Record<string, Doc>);
      ops.push(`<section class="op" id="${esc(op.operationId)}">
<h3><span class="m ${esc(method)}">${esc(method.toUpperCase())}</span> <code>${esc(doc.servers[0].url)}${esc(path)}</code></h3>
<p><b>${esc(op.summary)}</b></p><p>${esc(op.description)
        .replace(/`([^`]+)`/g, "<code>$1</code>")
        .replace(/\n\n/g, "</p><p>")}</p>
${params.length ? `<h4>Parameters</h4><table><tr><th>name</th><th>in</th><th>required</th><th>schema</th></tr>${params.map((p) => `<tr><td><code>${esc(p.name)}</code></td><td>${esc(p.in)}</td><td>${p.required ? "yes" : "no"}</td><td><pre>${schemaText(p.schema, doc)}</pre></td></tr>`).join("")}</table>` : ""}
${body ? `<h4>Request body</h4><pre>${schemaText(body.schema, doc)}</pre><h4>Example</h4><pre>${esc(JSON.stringify(body.example, null, 2))}</pre>` : ""}
${form ? `<h4>Request body (multipart/form-data)</h4><pre>${schemaText(form.schema, doc)}</pre><h4>Example</h4><pre>${esc(`curl -H 'X-API-Key: pgw_...' -F ${fileField}=@file ${doc.servers[0].url}${path}`)}</pre>` : ""}
<h4>Responses</h4><table><tr><th>status</th><th>meaning</th><th>example</th></tr>${responses
        .map(([status, r]) => {
          const c = r.content ? (Object.values(r.content)[0] as Doc) : null;
          return `<tr><td>${esc(status)}</td><td>${esc(r.description)}</td><td>${c ? `<pre>${esc(JSON.stringify(c.example, null, 2))}</pre>` : ""}</td></tr>`;
        })
        .join("")}</table></section>`);
    }
  }
  const problems = Object.entries(ERROR_TYPES)
    .map(
      ([type, { status, title }]) =>
        `<tr id="${esc(problemTypeUri(type as keyof typeof ERROR_TYPES).split("#")[1])}"><td><code>${esc(problemTypeUri(type as keyof typeof ERROR_TYPES))}</code></td><td>${status}</td><td>${esc(title)}</td></tr>`,
    )
    .join("");
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>${esc(doc.info.title)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{font:15px/1.5 system-ui,sans-serif;max-width:70rem;margin:2rem auto;padding:0 1rem;color:#1d2330}
code,pre{font:13px ui-monospace,monospace;background:#f4f5f7;border-radius:4px}pre{padding:.5rem;overflow:auto;max-height:24rem}
table{border-collapse:collapse;width:100%}td,th{border:1px solid #dde;padding:.3rem .5rem;text-align:left;vertical-align:top}
.op{border-top:2px solid #e4e6eb;margin-top:2rem}.m{display:inline-block;min-width:4.5rem;color:#fff;border-radius:4px;padding:0 .4rem;text-align:center}
.get{background:#2f7d32}.post{background:#1f5fbf}.put{background:#a66a00}.patch{background:#6a3fbf}.delete{background:#b3261e}</style></head>
<body><h1>${esc(doc.info.title)} <small>${esc(doc.info.version)}</small></h1>
<p>${esc(doc.info.description)
    .replace(/`([^`]+)`/g, "<code>$1</code>")
    .replace(/\n\n/g, "</p><p>")}</p>
<p>Machine-readable: <a href="${esc(doc.servers[0].url)}/openapi.json"><code>openapi.json</code></a> (OpenAPI ${esc(doc.openapi)}). Authenticate with the <code>X-API-Key</code> header.</p>
<h2>Operations</h2><ul>${Object.entries(doc.paths as Record<string, Record<string, Doc>>)
    .flatMap(([path, m]) =>
      Object.entries(m).map(([method, op]) => `<li><a href="#${esc(op.operationId)}">${esc(method.toUpperCase())} ${esc(path)}</a> — ${esc(op.summary)}</li>`),
    )
    .join("")}</ul>
${ops.join("\n")}
<h2 id="problems">Problem types</h2><p>Every error is <code>application/problem+json</code> (RFC 9457) with <code>type</code>, <code>title</code>, <code>status</code>, <code>detail</code>, <code>requestId</code> and, for validation errors, <code>errors: [{ path, message }]</code>.</p>
<table><tr><th>type</th><th>status</th><th>title</th></tr>${problems}</table></body></html>`;
}
