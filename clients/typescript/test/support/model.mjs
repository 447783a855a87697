// A stand-in for an OpenAI-compatible model server that streams its answer,
// so that a real agent-runner sends `model_delta` events. Each answer waits
// until the test releases it, so that it streams while the test follows.
import { createServer } from "node:http";
import { once } from "node:events";

/**
 * Starts the model: every `POST /v1/chat/completions` is answered, once
 * `release()` is called, with `pieces` as streamed text and a stop. Answers
 * `{ profile, release, close }`, where `profile(name)` is the TOML of a model
 * profile that uses it.
 */
export async function startStreamingModel(pieces) {
  let open;
  const gate = new Promise((resolve) => (open = resolve));
  const server = createServer(async (request, response) => {
    request.resume();
    await once(request, "end");
    if (request.method !== "POST" || request.url !== "/v1/chat/completions") {
      response.writeHead(404).end();
      return;
    }
    await gate;
    response.writeHead(200, { "content-type": "text/event-stream" });
    const chunk = (delta, finish) =>
      `data: ${JSON.stringify({ choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    response.write(chunk({ role: "assistant", content: "" }, null));
    for (const piece of pieces) response.write(chunk({ content: piece }, null));
    response.write(chunk({}, "stop"));
    response.end("data: [DONE]\n\n");
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const baseUrl = `http://127.0.0.1:${server.address().port}/v1`;
  return {
    profile: (name) =>
      [`[models.${name}]`, 'kind = "openai"', `base_url = "${baseUrl}"`, 'model = "stand-in"', "stream = true"].join(
        "\n",
      ),
    /** Lets the waiting answer (and every later one) stream. */
    release: () => open(),
    close: async () => {
      server.closeAllConnections();
      server.close();
      await once(server, "close");
    },
  };
}
