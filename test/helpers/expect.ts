/** The one check of a problem answer: status, RFC 9457 content type and body, requestId = X-Request-Id. */
export function expectProblem(res: { status: number; headers: Headers; body: any }, status: number): void {
  expect(res.status).toBe(status);
  expect(res.headers.get("content-type")).toMatch(/^application\/problem\+json/);
  expect(res.body).toEqual(
    expect.objectContaining({
      type: expect.any(String),
      title: expect.any(String),
      status,
      detail: expect.any(String),
      requestId: res.headers.get("x-request-id"),
    }),
  );
}
