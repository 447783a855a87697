// Starts a real agent-runner server for a test file: `agent-runner serve`
// with a temporary configuration, SQLite database and workspaces, on a free
// port, and stops it.
import { spawn } from "node:child_process";
import { once } from "node:events";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

const REPO = fileURLToPath(new URL("../../../../", import.meta.url));
const BIN = process.env.AGENT_RUNNER_BIN ?? join(REPO, "target/debug/agent-runner");
const START_DEADLINE_MS = 30_000;

/**
 * Starts a server. `server`: lines of its `[server]` table beyond the bind
 * address; `config`: TOML appended to its configuration. Answers
 * `{ baseUrl, port, stop }`.
 */
export async function startServer({ server = [], config: extra = "" } = {}) {
  const dir = await mkdtemp(join(tmpdir(), "agent-runner-client-"));
  const config = join(dir, "config.toml");
  await writeFile(
    config,
    [
      "[server]",
      'bind = "127.0.0.1:0"',
      ...server,
      "[storage]",
      `database_url = "sqlite://${join(dir, "db.sqlite")}"`,
      `workspaces_dir = "${join(dir, "workspaces")}"`,
      extra,
    ].join("\n"),
  );
  const child = spawn(BIN, ["serve", "--config", config], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, RUST_LOG: "warn" },
  });
  let log = "";
  child.stderr.setEncoding("utf8").on("data", (text) => {
    log += text;
  });
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = once(child, "exit");
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 5_000);
      await exited;
      clearTimeout(timer);
    }
    await rm(dir, { recursive: true, force: true });
  };
  try {
    const baseUrl = await listeningUrl(child, () => log);
    await checkReady(baseUrl);
    return { baseUrl, port: Number(new URL(baseUrl).port), stop };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** The URL of the server's `listening on URL` line on stdout. */
async function listeningUrl(child, log) {
  const lines = createInterface({ input: child.stdout });
  const timer = setTimeout(() => child.kill("SIGKILL"), START_DEADLINE_MS);
  try {
    for await (const line of lines) {
      const match = /^listening on (http:\/\/\S+)$/.exec(line);
      if (match) {
        // Nothing else is printed there, but a full pipe would block it.
        child.stdout.resume();
        return match[1];
      }
    }
  } finally {
    clearTimeout(timer);
  }
  throw new Error(`${BIN} exited before listening (${child.exitCode ?? child.signalCode}):\n${log()}`);
}

/**
 * `GET /readyz` answers 200: the server prints its address once its storage
 * is open and its socket bound, so it is ready then, with nothing to wait for.
 */
async function checkReady(baseUrl) {
  const { status } = await fetch(`${baseUrl}/readyz`);
  if (status !== 200) throw new Error(`${baseUrl}/readyz answered ${status} once listening`);
}
