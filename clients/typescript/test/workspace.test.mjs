// Repositories in, patches out, against a real server: uploads (.tar.gz and
// .zip) and a git clone seed workspaces; a run's diff, its `changes`, and
// its workspace as a .tar.gz come back; what is refused is refused with
// the server's code.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { AgentRunner, AgentRunnerError } from "../dist/index.js";
import { gitRepo, isGzip, readTarGz, tarGz, zip } from "./support/archives.mjs";
import { eventOf } from "./support/runs.mjs";
import { startServer } from "./support/server.mjs";

let server;
let runner;
let repos;

before(async () => {
  repos = await mkdtemp(join(tmpdir(), "agent-runner-repos-"));
  await gitRepo(join(repos, "app"), [{ "hello.txt": "hello\n" }, { "hello.txt": "hello again\n" }]);
  server = await startServer({ config: ["[workspaces]", `git_allow = ["file://${repos}/"]`].join("\n") });
  runner = new AgentRunner({ baseUrl: server.baseUrl });
});

after(async () => {
  await server?.stop();
  if (repos) await rm(repos, { recursive: true, force: true });
});

const LIB = "pub fn f() {}\n";
const PATCH = [
  "--- a/src/lib.rs",
  "+++ b/src/lib.rs",
  "@@ -1 +1,3 @@",
  "-pub fn f() {}",
  "+pub fn f() -> u32 {",
  "+    1",
  "+}",
  "",
].join("\n");

/** A model that patches src/lib.rs, writes NOTES.md, then answers "Done". */
function patchThenNote() {
  return {
    scripted: [
      { content: "", tool_calls: [{ id: "p1", name: "apply_patch", arguments: { patch: PATCH } }] },
      { content: "", tool_calls: [{ id: "w1", name: "write_file", arguments: { path: "NOTES.md", content: "# notes\n" } }] },
      { content: "Done" },
    ],
  };
}

/** Asserts that `promise` rejects with an AgentRunnerError of `status` and `code`. */
async function rejectsWith(promise, status, code) {
  const error = await promise.then(
    () => assert.fail(`expected ${status} ${code}`),
    (error) => error,
  );
  assert.ok(error instanceof AgentRunnerError, `${error}`);
  assert.equal(error.status, status, error.message);
  assert.equal(error.code, code, error.message);
  return error;
}

test("a .tar.gz upload seeds a run; its diff, changes and archive show the patch", async () => {
  const upload = await runner.upload(tarGz({ "src/lib.rs": LIB, "README.md": "from the archive\n" }), {
    filename: "project.tar.gz",
  });
  assert.match(upload.id, /^[0-9a-f-]{36}$/);
  assert.equal(upload.files, 2);
  assert.ok(upload.size > 0);
  assert.ok(upload.created_at);
  assert.deepEqual(await runner.getUpload(upload.id), upload);

  const run = await runner.createRun(
    {
      prompt: "Make f return 1",
      tools: ["apply_patch", "write_file"],
      // `files` are written last, over the archive's.
      workspace: { archive: upload.id, files: { "README.md": "from the request\n" } },
      model: patchThenNote(),
    },
    { wait: true },
  );
  assert.equal(run.status, "completed", run.error ?? "");
  assert.ok(run.tools.includes("apply_patch"));
  const results = (await runner.messages(run.id)).filter((message) => message.role === "tool");
  assert.deepEqual(results.map((message) => [message.call_id, message.is_error]), [["p1", false], ["w1", false]]);

  const diff = await runner.diff(run.id);
  assert.match(diff, /^diff --git a\/src\/lib\.rs b\/src\/lib\.rs$/m);
  assert.match(diff, /^-pub fn f\(\) \{\}$/m);
  assert.match(diff, /^\+pub fn f\(\) -> u32 \{$/m);
  assert.match(diff, /^diff --git a\/NOTES\.md b\/NOTES\.md$/m);
  assert.match(diff, /^new file mode/m);
  assert.match(diff, /^\+# notes$/m);
  assert.doesNotMatch(diff, /README\.md/, "the seed is where the diff starts");
  assert.deepEqual(run.changes, { files: 2, insertions: 4, deletions: 1 });

  const archive = await runner.archive(run.id);
  assert.ok(isGzip(archive));
  const entries = readTarGz(archive);
  assert.equal(entries.get("src/lib.rs")?.content, "pub fn f() -> u32 {\n    1\n}\n");
  assert.equal(entries.get("NOTES.md")?.content, "# notes\n");
  assert.equal(entries.get("README.md")?.content, "from the request\n");

  // The same bytes, as a stream.
  const streamed = new Uint8Array(await new Response(await runner.archiveStream(run.id)).arrayBuffer());
  assert.deepEqual(readTarGz(streamed), entries);
});

test("a live run's diff is its workspace as it is now; changes come at its end", async () => {
  const run = await runner.createRun({
    prompt: "Patch, then ask",
    tools: ["apply_patch", "write_file"],
    approval: { tools: ["write_file"] },
    workspace: { files: { "src/lib.rs": LIB } },
    model: patchThenNote(),
  });
  await eventOf(runner, run.id, (event) => event.type === "actions_required");
  const paused = await runner.getRun(run.id);
  assert.equal(paused.status, "requires_action");
  assert.equal(paused.changes, null);
  const during = await runner.diff(run.id);
  assert.match(during, /^\+pub fn f\(\) -> u32 \{$/m);
  assert.doesNotMatch(during, /NOTES\.md/, "not written yet");

  await runner.approve(run.id, "w1");
  await eventOf(runner, run.id, (event) => event.type === "run_end");
  assert.match(await runner.diff(run.id), /^\+# notes$/m);
  assert.deepEqual((await runner.getRun(run.id)).changes, { files: 2, insertions: 4, deletions: 1 });
});

test("a run that changes nothing has an empty diff", async () => {
  const run = await runner.createRun(
    { prompt: "Look only", workspace: { files: { "a.txt": "a\n" } }, model: { scripted: [{ content: "Nothing to do" }] } },
    { wait: true },
  );
  assert.equal(await runner.diff(run.id), "");
  assert.deepEqual(run.changes, { files: 0, insertions: 0, deletions: 0 });
});

test("a .zip upload seeds a run, by contentType", async () => {
  const upload = await runner.upload(zip({ "docs/guide.md": "# Guide\n", "src/lib.rs": LIB }), {
    contentType: "application/zip",
  });
  assert.equal(upload.files, 2);
  const run = await runner.createRun(
    {
      prompt: "Add a line",
      tools: ["write_file"],
      workspace: { archive: upload.id },
      model: {
        scripted: [
          {
            content: "",
            tool_calls: [{ id: "w", name: "write_file", arguments: { path: "docs/guide.md", content: "# Guide\nRead me.\n" } }],
          },
          { content: "Done" },
        ],
      },
    },
    { wait: true },
  );
  assert.equal(run.status, "completed", run.error ?? "");
  const diff = await runner.diff(run.id);
  assert.match(diff, /^diff --git a\/docs\/guide\.md b\/docs\/guide\.md$/m);
  assert.match(diff, /^\+Read me\.$/m);
  assert.deepEqual(run.changes, { files: 1, insertions: 1, deletions: 0 });
  assert.equal(readTarGz(await runner.archive(run.id)).get("src/lib.rs")?.content, LIB);
});

test("a git clone seeds a run at its ref; .git is in the archive only when asked", async () => {
  const run = await runner.createRun(
    {
      prompt: "Greet differently",
      tools: ["write_file"],
      workspace: { git: { url: `file://${repos}/app`, ref: "v1" } },
      model: {
        scripted: [
          { content: "", tool_calls: [{ id: "w", name: "write_file", arguments: { path: "hello.txt", content: "changed\n" } }] },
          { content: "Done" },
        ],
      },
    },
    { wait: true },
  );
  assert.equal(run.status, "completed", run.error ?? "");
  const diff = await runner.diff(run.id);
  assert.match(diff, /^-hello$/m, "against v1, not the branch's head");
  assert.match(diff, /^\+changed$/m);
  assert.deepEqual(run.changes, { files: 1, insertions: 1, deletions: 1 });

  const without = readTarGz(await runner.archive(run.id));
  assert.equal(without.get("hello.txt")?.content, "changed\n");
  assert.ok(![...without.keys()].some((path) => path === ".git" || path.startsWith(".git/")), "no .git by default");
  const withGit = readTarGz(await runner.archive(run.id, { includeGit: true }));
  assert.ok([...withGit.keys()].some((path) => path.startsWith(".git/")), "includeGit keeps .git");
});

test("uploads refused: an escaping entry, a link out, a wrong type, an unknown id", async () => {
  const escaping = await rejectsWith(
    runner.upload(tarGz({ "ok.txt": "ok", "../escape.txt": "out" }), { filename: "bad.tgz" }),
    422,
    "invalid_archive",
  );
  assert.match(escaping.message, /escape|\.\./);
  await rejectsWith(
    runner.upload(tarGz({ "ok.txt": "ok", "out": { link: "../../etc/passwd" } }), { contentType: "application/gzip" }),
    422,
    "invalid_archive",
  );
  await rejectsWith(
    runner.upload(new TextEncoder().encode("not an archive"), { contentType: "application/gzip" }),
    422,
    "invalid_archive",
  );
  // The types do not allow it; a plain-JavaScript caller might.
  await rejectsWith(runner.upload(tarGz({ "a.txt": "a" }), { contentType: "text/plain" }), 415, "unsupported_media_type");

  const unknown = randomUUID();
  await rejectsWith(runner.getUpload(unknown), 404, "upload_not_found");
  await rejectsWith(runner.deleteUpload(unknown), 404, "upload_not_found");
  await rejectsWith(
    runner.createRun({ prompt: "hi", workspace: { archive: unknown }, model: { scripted: [{ content: "x" }] } }),
    404,
    "upload_not_found",
  );
});

test("a deleted upload is gone, for reading and for runs", async () => {
  const upload = await runner.upload(tarGz({ "a.txt": "a\n" }), { filename: "A.TAR.GZ" });
  await runner.deleteUpload(upload.id);
  await rejectsWith(runner.getUpload(upload.id), 404, "upload_not_found");
  await rejectsWith(
    runner.createRun({ prompt: "hi", workspace: { archive: upload.id }, model: { scripted: [{ content: "x" }] } }),
    404,
    "upload_not_found",
  );
});

test("a git URL the server does not allow is 422 git_not_allowed", async () => {
  const refused = await rejectsWith(
    runner.createRun({ prompt: "hi", workspace: { git: { url: "https://example.com/app.git" } } }),
    422,
    "git_not_allowed",
  );
  assert.match(refused.message, /git_allow/);
});

test("an unknown run's diff and archive are 404 not_found", async () => {
  const unknown = randomUUID();
  await rejectsWith(runner.diff(unknown), 404, "not_found");
  await rejectsWith(runner.archive(unknown), 404, "not_found");
  await rejectsWith(runner.archiveStream(unknown), 404, "not_found");
});
