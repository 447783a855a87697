// A TCP proxy in front of a server, with real sockets: it forwards bytes both
// ways, records what each connection asked, and can cut the connections of
// an event stream once a number of `id:` lines have passed.
import { createServer, connect } from "node:net";
import { EventEmitter, once } from "node:events";

/**
 * Starts a proxy to `127.0.0.1:targetPort`. With `cutAfterIds: N` and
 * `cuts: K`, the first K connections that carry an event stream are cut
 * right after the bytes of their Nth `id:` line have been forwarded
 * (mid-event): the server's socket is destroyed, the client's ended once
 * those bytes are out. Answers `{ url, connections, close }`, where each
 * connection is `{ request, response, openedAt, cut, closed }` (`request`
 * and `response`: the bytes each way, as text; `openedAt`: when, in ms since
 * the epoch; `closed`: whether its client socket has closed), and `changes`
 * emits `response` and `closed` as they happen.
 */
export async function startProxy(targetPort, { cutAfterIds = Infinity, cuts = 0 } = {}) {
  const connections = [];
  const changes = new EventEmitter();
  const sockets = new Set();
  let cutsLeft = cuts;
  const server = createServer((client) => {
    const record = { request: "", response: "", openedAt: Date.now(), cut: false, closed: false };
    connections.push(record);
    const upstream = connect(targetPort, "127.0.0.1");
    sockets.add(client).add(upstream);
    client.on("data", (chunk) => {
      record.request += chunk.toString("latin1");
      upstream.write(chunk);
    });
    upstream.on("data", (chunk) => {
      if (record.cut) return;
      const text = chunk.toString("latin1");
      const cutAt =
        cutsLeft > 0 && isEventStream(record.request)
          ? endOfIdLine(record.response + text, cutAfterIds) - record.response.length
          : -1;
      if (cutAt < 0 || cutAt > text.length) {
        record.response += text;
        client.write(chunk);
        changes.emit("response");
        return;
      }
      cutsLeft -= 1;
      record.cut = true;
      record.response += text.slice(0, cutAt);
      upstream.destroy();
      client.end(chunk.subarray(0, cutAt));
    });
    client.on("close", () => {
      record.closed = true;
      sockets.delete(client);
      upstream.destroy();
      changes.emit("closed");
    });
    upstream.on("close", () => {
      sockets.delete(upstream);
      if (!record.cut) client.destroy();
    });
    // Each error is followed by a close, handled above.
    client.on("error", () => undefined);
    upstream.on("error", () => undefined);
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    connections,
    changes,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      server.close();
      await once(server, "close");
    },
  };
}

function isEventStream(request) {
  return /^GET \/v1\/runs\/[^/ ]+\/events[ ?]/.test(request);
}

/** The offset just past the `n`th `id:` line of `text`, or -1. */
function endOfIdLine(text, n) {
  const lines = /^id:[^\n]*\n/gm;
  let match;
  for (let count = 1; (match = lines.exec(text)) !== null; count += 1) {
    if (count === n) return match.index + match[0].length;
  }
  return -1;
}
