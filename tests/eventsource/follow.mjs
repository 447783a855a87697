// Follows one event stream with npm's EventSource, as a browser would, and
// prints what it saw as JSON: every event (its id and type), how often it
// opened a connection, and whether it stopped of itself (readyState CLOSED)
// within the time given.
//
//   node follow.mjs INSTALL_DIR URL WAIT_MS
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [installDir, url, waitMs] = process.argv.slice(2);
const module = join(installDir, "node_modules/eventsource/dist/index.js");
const { EventSource } = await import(pathToFileURL(module).href);

const seen = { events: [], opens: 0, errors: 0, closed: false };
const source = new EventSource(url);
const types = [
  "run_start", "message", "model_start", "model_delta", "model_end", "model_error",
  "tool_start", "tool_end", "actions_required", "run_end",
];
for (const type of types) {
  source.addEventListener(type, (event) => {
    seen.events.push({ id: event.lastEventId, type, data: JSON.parse(event.data) });
  });
}
source.addEventListener("open", () => { seen.opens += 1; });
source.addEventListener("error", () => { seen.errors += 1; });
// The client may mark itself closed just after it tells of the error.
const done = new Promise((resolve) => {
  const started = Date.now();
  const look = setInterval(() => {
    if (source.readyState === EventSource.CLOSED || Date.now() - started > Number(waitMs)) {
      clearInterval(look);
      resolve();
    }
  }, 20);
});
await done;
seen.closed = source.readyState === EventSource.CLOSED;
source.close();
console.log(JSON.stringify(seen));
