// The console's list of schedules: each with its cron, its timezone, its
// next tick and the newest run it made (a link to it), and what it skipped
// or was refused. Read again on each showing: no stream tells of
// schedules. A schedule's name and run body are untrusted text: only ever
// set as text.

/**
 * Reads the tenant's schedules (every page) with `api` and lists them in
 * `list`; `empty` says when there are none, or why they cannot be read.
 * `h` makes elements, `when` writes a time for people.
 */
export async function loadSchedules({ api, h, when, list, empty }) {
  const schedules = [];
  let cursor = null;
  try {
    do {
      const query = new URLSearchParams({ limit: "100" });
      if (cursor) query.set("cursor", cursor);
      const page = await api("GET", `/v1/schedules?${query}`);
      schedules.push(...page.schedules);
      cursor = page.next_cursor;
    } while (cursor);
  } catch (error) {
    if (error.status !== 401) {
      empty.hidden = false;
      empty.textContent = `Cannot read the schedules: ${error.message}`;
    }
    return;
  }
  list.replaceChildren(...schedules.map((schedule) => scheduleItem(schedule, h, when)));
  empty.hidden = schedules.length > 0;
  if (schedules.length === 0) empty.textContent = "No schedules yet.";
}

function scheduleItem(schedule, h, when) {
  const counts = [];
  if (schedule.skipped_ticks > 0) counts.push(`${schedule.skipped_ticks} skipped`);
  if (schedule.refused_ticks > 0) counts.push(`${schedule.refused_ticks} refused`);
  return h(
    "li",
    { class: "schedule-item", dataset: { schedule: schedule.id, enabled: String(schedule.enabled) } },
    h("span", { class: "name" }, schedule.name || schedule.cron),
    schedule.enabled ? null : h("span", { class: "badge archived" }, "disabled"),
    h("span", { class: "cron" }, `${schedule.cron} (${schedule.timezone})`),
    h(
      "span",
      { class: "next" },
      "Next: ",
      schedule.next_run_at ? h("time", { datetime: schedule.next_run_at }, when(schedule.next_run_at)) : "none",
    ),
    h(
      "span",
      { class: "last" },
      "Last run: ",
      schedule.last_run_id
        ? h("a", { href: `#/runs/${schedule.last_run_id}`, class: "last-run" }, schedule.last_run_id.slice(0, 8))
        : "none yet",
    ),
    counts.length > 0 ? h("span", { class: "counts" }, counts.join(", ")) : null,
    h("span", { class: "thread" }, `${schedule.thread} thread, overlap ${schedule.overlap}`),
  );
}
