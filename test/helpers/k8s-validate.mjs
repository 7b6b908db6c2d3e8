// Validates Kubernetes objects against the API's schemas (kubernetes-models, generated from the
// Kubernetes OpenAPI document). An ES module run by its own Node process: kubernetes-models is
// ESM-only, which jest's CommonJS loader cannot import. Reads a JSON array of objects on stdin and
// prints a JSON array of problems, [{ kind, name, error }], empty when every object is valid.
const input = await new Promise((resolve, reject) => {
  let text = "";
  process.stdin.setEncoding("utf8");
  process.stdin.on("data", (d) => (text += d));
  process.stdin.on("end", () => resolve(text));
  process.stdin.on("error", reject);
});
const problems = [];
for (const obj of JSON.parse(input)) {
  const name = obj?.metadata?.name;
  const kind = obj?.kind;
  let Model;
  try {
    // "apps/v1" -> kubernetes-models/apps/v1/Deployment; the core group "v1" -> kubernetes-models/v1/Service.
    Model = (await import(`kubernetes-models/${obj.apiVersion}/${kind}`))[kind];
  } catch {
    problems.push({ kind, name, error: `no schema for ${obj?.apiVersion} ${kind}` });
    continue;
  }
  try {
    new Model(obj).validate();
  } catch (e) {
    problems.push({ kind, name, error: e.message });
  }
}
process.stdout.write(JSON.stringify(problems));
