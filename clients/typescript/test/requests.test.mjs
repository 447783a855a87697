// What the client sends and how it reads the answers, for the calls whose
// bodies are not JSON (uploads, diffs, archives), against a stand-in
// `fetch`: no server needed.
import assert from "node:assert/strict";
import { test } from "node:test";
import { AgentRunner, AgentRunnerError, archiveType } from "../dist/index.js";

const UPLOAD = {
  id: "01a22985-2898-7256-bd76-a3a04a90e80a",
  size: 3,
  files: 1,
  created_at: "2026-01-02T03:04:05.123456Z",
  expires_at: null,
};

/** A client whose `fetch` records each request and answers `answer(request)`. */
function recording(answer) {
  const requests = [];
  const runner = new AgentRunner({
    baseUrl: "http://runner.test/",
    token: "secret",
    fetch: async (url, init) => {
      const request = new Request(url, init);
      requests.push({
        method: request.method,
        url: request.url,
        headers: Object.fromEntries(request.headers),
        body: init.body === undefined ? undefined : new Uint8Array(await request.arrayBuffer()),
      });
      return answer(request);
    },
  });
  return { runner, requests };
}

const json = (status, body) =>
  new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json" } });

test("archiveType tells an archive's kind by its name", () => {
  assert.equal(archiveType("project.tar.gz"), "application/gzip");
  assert.equal(archiveType("PROJECT.TGZ"), "application/gzip");
  assert.equal(archiveType("dir/project.zip"), "application/zip");
  assert.throws(() => archiveType("project.tar"), TypeError);
  assert.throws(() => archiveType("project.gz"), TypeError);
  assert.throws(() => archiveType(undefined), TypeError);
});

test("upload sends the bytes as they are, with the archive's Content-Type", async () => {
  const { runner, requests } = recording(() => json(201, UPLOAD));
  const bytes = new Uint8Array([0x1f, 0x8b, 0x08]);
  assert.deepEqual(await runner.upload(bytes, { filename: "a.tgz" }), UPLOAD);
  await runner.upload(bytes.buffer, { contentType: "application/x-zip-compressed" });
  await runner.upload(new Blob([bytes]), { contentType: "application/zip", filename: "ignored.tar.gz" });
  assert.deepEqual(
    requests.map((request) => [request.method, request.url, request.headers["content-type"]]),
    [
      ["POST", "http://runner.test/v1/uploads", "application/gzip"],
      ["POST", "http://runner.test/v1/uploads", "application/x-zip-compressed"],
      ["POST", "http://runner.test/v1/uploads", "application/zip"],
    ],
  );
  for (const request of requests) {
    assert.deepEqual(request.body, bytes);
    assert.equal(request.headers.authorization, "Bearer secret");
  }
  // A kind the name does not tell is refused before anything is sent.
  await assert.rejects(runner.upload(bytes, { filename: "a.rar" }), TypeError);
  await assert.rejects(runner.upload(bytes, {}), TypeError);
  assert.equal(requests.length, 3);
});

test("getUpload and deleteUpload name the upload in the path", async () => {
  const { runner, requests } = recording((request) =>
    request.method === "DELETE" ? new Response(null, { status: 204 }) : json(200, UPLOAD),
  );
  assert.deepEqual(await runner.getUpload(UPLOAD.id), UPLOAD);
  assert.equal(await runner.deleteUpload("a/b"), undefined);
  assert.deepEqual(
    requests.map((request) => [request.method, request.url]),
    [
      ["GET", `http://runner.test/v1/uploads/${UPLOAD.id}`],
      ["DELETE", "http://runner.test/v1/uploads/a%2Fb"],
    ],
  );
});

test("diff answers the text as it is", async () => {
  const text = "diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-a\n+é\n";
  const { runner, requests } = recording(
    () => new Response(text, { headers: { "content-type": "text/x-diff; charset=utf-8" } }),
  );
  assert.equal(await runner.diff("run-1"), text);
  assert.deepEqual(requests.map((request) => [request.method, request.url]), [["GET", "http://runner.test/v1/runs/run-1/diff"]]);
});

test("archive and archiveStream answer the bytes; includeGit asks for .git", async () => {
  const bytes = new Uint8Array([0x1f, 0x8b, 1, 2, 3, 255]);
  const { runner, requests } = recording(
    () => new Response(bytes, { headers: { "content-type": "application/gzip" } }),
  );
  assert.deepEqual(await runner.archive("run-1"), bytes);
  assert.deepEqual(await runner.archive("run-1", { includeGit: true }), bytes);
  const stream = await runner.archiveStream("run-1", { includeGit: false });
  assert.deepEqual(new Uint8Array(await new Response(stream).arrayBuffer()), bytes);
  assert.deepEqual(
    requests.map((request) => request.url),
    [
      "http://runner.test/v1/runs/run-1/archive",
      "http://runner.test/v1/runs/run-1/archive?include_git=true",
      "http://runner.test/v1/runs/run-1/archive",
    ],
  );
});

test("the new error codes come through as they are", async () => {
  for (const [status, code] of [
    [404, "upload_not_found"],
    [422, "invalid_archive"],
    [422, "git_not_allowed"],
    [429, "too_many_downloads"],
  ]) {
    const { runner } = recording(() =>
      new Response(JSON.stringify({ error: { code, message: `refused: ${code}` } }), {
        status,
        headers: { "content-type": "application/json", "retry-after": "2" },
      }),
    );
    for (const call of [
      () => runner.upload(new Uint8Array([1]), { filename: "a.zip" }),
      () => runner.diff("run-1"),
      () => runner.archive("run-1"),
      () => runner.archiveStream("run-1"),
    ]) {
      const error = await call().then(
        () => assert.fail("expected an AgentRunnerError"),
        (error) => error,
      );
      assert.ok(error instanceof AgentRunnerError);
      assert.deepEqual([error.status, error.code, error.message, error.retryAfter], [status, code, `refused: ${code}`, 2]);
    }
  }
});

test("a connection that breaks in the middle of an archive is connection_lost", async () => {
  const { runner } = recording(() => {
    const body = new ReadableStream({
      start(controller) {
        controller.enqueue(new Uint8Array([0x1f, 0x8b]));
        controller.error(new Error("reset"));
      },
    });
    return new Response(body, { headers: { "content-type": "application/gzip" } });
  });
  for (const call of [() => runner.archive("run-1"), () => runner.diff("run-1")]) {
    const error = await call().then(
      () => assert.fail("expected an AgentRunnerError"),
      (error) => error,
    );
    assert.ok(error instanceof AgentRunnerError);
    assert.equal(error.code, "connection_lost");
  }
});
