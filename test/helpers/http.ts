/** A small HTTP client over Node's fetch, for tests that talk to the real gateway. */
export interface Res<T = any> {
  status: number;
  headers: Headers;
  body: T;
  text: string;
}

export interface ReqOptions {
  headers?: Record<string, string>;
  body?: unknown;
  /** Sent as is (no JSON encoding, no content type added). */
  raw?: string | Buffer;
  /** Sent as multipart/form-data. */
  form?: FormData;
}

export class Http {
  constructor(
    readonly baseUrl: string,
    readonly defaultHeaders: Record<string, string> = {},
  ) {}

  async request(method: string, path: string, opts: ReqOptions = {}): Promise<Res> {
    const headers: Record<string, string> = { ...this.defaultHeaders, ...opts.headers };
    let body: RequestInit["body"];
    if (opts.form !== undefined) body = opts.form;
    else if (opts.raw !== undefined) body = opts.raw as RequestInit["body"];
    else if (opts.body !== undefined) {
      body = JSON.stringify(opts.body);
      headers["content-type"] ??= "application/json";
    }
    const r = await fetch(this.baseUrl + path, { method, headers, body }).catch((err: Error & { cause?: { code?: string } }) => {
      // A kept-alive connection the server closed just as it was reused: a GET is tried once more on
      // a fresh one (as browsers do); any other method's failure is the test's to see.
      if ((method === "GET" || method === "HEAD") && err.cause?.code === "ECONNRESET") return fetch(this.baseUrl + path, { method, headers, body });
      throw err;
    });
    const text = await r.text();
    let parsed: unknown = text;
    if (/json/.test(r.headers.get("content-type") ?? "") && text) parsed = JSON.parse(text);
    return { status: r.status, headers: r.headers, body: parsed, text };
  }

  get(path: string, opts?: ReqOptions) {
    return this.request("GET", path, opts);
  }
  post(path: string, body?: unknown, opts: ReqOptions = {}) {
    return this.request("POST", path, { ...opts, body });
  }
  put(path: string, body?: unknown, opts: ReqOptions = {}) {
    return this.request("PUT", path, { ...opts, body });
  }
  delete(path: string, opts?: ReqOptions) {
    return this.request("DELETE", path, opts);
  }
  with(headers: Record<string, string>) {
    return new Http(this.baseUrl, { ...this.defaultHeaders, ...headers });
  }
}
