// The README's example, as a reader runs it: its code block saved as
// example.mjs in a folder where the package is installed, run with `node`
// against a real server, printing what the README says it prints.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, mkdir, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { startServer } from "./support/server.mjs";

const CLIENT = fileURLToPath(new URL("..", import.meta.url));

let server;
let folder;

before(async () => {
  server = await startServer();
  folder = await mkdtemp(join(tmpdir(), "agent-runner-example-"));
});

after(async () => {
  await server?.stop();
  if (folder) await rm(folder, { recursive: true, force: true });
});

/** The body of the first fenced block of `language` after `heading`. */
function block(markdown, heading, language) {
  const section = markdown.slice(markdown.indexOf(heading));
  const match = new RegExp("```" + language + "\\n([\\s\\S]*?)```").exec(section);
  assert.ok(match, `no ${language} block under ${heading}`);
  return match[1];
}

test("the README's example runs as written and prints what it shows", async () => {
  const readme = await readFile(join(CLIENT, "README.md"), "utf8");
  // `npm install /path/to/clients/typescript` links the package in.
  await mkdir(join(folder, "node_modules"));
  await symlink(CLIENT, join(folder, "node_modules", "agent-runner-client"), "dir");
  await writeFile(join(folder, "example.mjs"), block(readme, "## Example", "js"));
  const { stdout, stderr } = await promisify(execFile)(process.execPath, ["example.mjs"], {
    cwd: folder,
    env: { ...process.env, AGENT_RUNNER_URL: server.baseUrl },
    timeout: 30_000,
  });
  assert.equal(stderr, "");
  assert.equal(stdout, block(readme, "It prints:", "text"));
});

test("the README's example type-checks as TypeScript against the package's types", async () => {
  const readme = await readFile(join(CLIENT, "README.md"), "utf8");
  const project = join(folder, "typescript");
  await mkdir(join(project, "node_modules"), { recursive: true });
  await symlink(CLIENT, join(project, "node_modules", "agent-runner-client"), "dir");
  await writeFile(join(project, "package.json"), JSON.stringify({ type: "module" }));
  await writeFile(join(project, "example.ts"), block(readme, "## Example", "js"));
  // What the example uses of Node's globals (@types/node is not a
  // dependency of this package).
  await writeFile(
    join(project, "node.d.ts"),
    "declare const process: { env: Record<string, string | undefined>; " +
      "on(event: string, listener: () => void): void; stdout: { write(text: string): void } };\n",
  );
  const options = {
    target: "ES2022",
    lib: ["ES2022", "DOM"],
    module: "NodeNext",
    moduleResolution: "NodeNext",
    strict: true,
    noEmit: true,
    types: [],
  };
  await writeFile(
    join(project, "tsconfig.json"),
    JSON.stringify({ compilerOptions: options, files: ["example.ts", "node.d.ts"] }),
  );
  const tsc = join(CLIENT, "node_modules", ".bin", "tsc");
  await promisify(execFile)(tsc, ["-p", project], { timeout: 60_000 });
});
