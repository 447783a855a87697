// Requests of deterministic runs (inline scripted models), and waiting for
// a state with a deadline.

/** A run that lists its workspace once, then answers "Done". */
export function listThenDone(prompt = "Inspect the workspace") {
  return {
    prompt,
    tools: ["list_dir"],
    model: {
      scripted: [
        { content: "", tool_calls: [{ id: "1", name: "list_dir", arguments: {} }], delay_ms: 50 },
        { content: "Done", usage: { input_tokens: 12, output_tokens: 3 } },
      ],
    },
  };
}

/** A run of `steps` slow steps (`delayMs` each), each listing the workspace, then "Done". */
export function slowRun(steps, delayMs) {
  const scripted = [];
  for (let step = 1; step <= steps; step += 1) {
    scripted.push({
      content: "",
      tool_calls: [{ id: String(step), name: "list_dir", arguments: {} }],
      delay_ms: delayMs,
    });
  }
  scripted.push({ content: "Done", delay_ms: delayMs });
  return {
    prompt: "Take your time",
    tools: ["list_dir"],
    limits: { max_steps: steps + 1 },
    model: { scripted },
  };
}

/**
 * The README's paused run: a client tool call (`lookup_order`, call "1"),
 * then a `write_file` that waits for approval (call "2"), then "Noted.".
 */
export function pausingRun() {
  return {
    prompt: "Note the order status",
    approval: { tools: ["write_file"] },
    client_tools: [
      {
        name: "lookup_order",
        description: "Find an order",
        parameters: {
          type: "object",
          properties: { order_id: { type: "string" } },
          required: ["order_id"],
          additionalProperties: false,
        },
      },
    ],
    model: {
      scripted: [
        { content: "", tool_calls: [{ id: "1", name: "lookup_order", arguments: { order_id: "42" } }] },
        {
          content: "",
          tool_calls: [{ id: "2", name: "write_file", arguments: { path: "status.txt", content: "shipped" } }],
        },
        { content: "Noted." },
      ],
    },
  };
}

/** The run's first event (from its start) that `matches`; fails past `timeoutMs`. */
export async function eventOf(runner, runId, matches, timeoutMs = 10_000) {
  for await (const event of runner.events(runId, { signal: AbortSignal.timeout(timeoutMs) })) {
    if (matches(event)) return event;
  }
  throw new Error(`run ${runId} ended without the event awaited`);
}

/**
 * Resolves once `emitter` emits `name` with `holds()` true (checked at once
 * too); fails past `timeoutMs`.
 */
export function until(emitter, name, holds, timeoutMs = 10_000) {
  if (holds()) return Promise.resolve();
  return new Promise((resolve, reject) => {
    const check = () => {
      if (!holds()) return;
      clearTimeout(timer);
      emitter.off(name, check);
      resolve();
    };
    const timer = setTimeout(() => {
      emitter.off(name, check);
      reject(new Error(`timed out waiting for ${name}`));
    }, timeoutMs);
    emitter.on(name, check);
  });
}

/** Collects every event of an async iterable. */
export async function collect(events) {
  const seen = [];
  for await (const event of events) seen.push(event);
  return seen;
}

/** The sequences of the stored events (every event but `model_delta`). */
export function sequences(events) {
  return events.filter((event) => event.type !== "model_delta").map((event) => event.sequence);
}

/** 1, 2, ..., n. */
export function oneTo(n) {
  return Array.from({ length: n }, (_, index) => index + 1);
}
