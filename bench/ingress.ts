/** Posting to the internal ingress as an upstream does, for the benches: one body, or n objects in arrays, 4 at a time. */

/** POSTs `body` as JSON; anything but 202 fails the bench. */
export async function post(url: string, body: unknown): Promise<void> {
  const r = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  if (r.status !== 202) throw new Error(`ingress: ${r.status} ${await r.text()}`);
  await r.arrayBuffer();
}

/** Posts make(i) for every i < n in arrays of `size`, four requests at a time. */
export async function inArrays(url: string, n: number, make: (i: number) => unknown, size = 1000): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: 4 }, async () => {
      for (;;) {
        const from = next;
        if (from >= n) return;
        next += size;
        await post(
          url,
          Array.from({ length: Math.min(size, n - from) }, (_, k) => make(from + k)),
        );
      }
    }),
  );
}
