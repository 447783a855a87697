// Opens a run's trace in Phoenix's own UI in headless Chromium (Debian's,
// through playwright-core) and saves a screenshot of it: the picture of a
// trace docs/operations.md shows. Fails (exit 1, the reason on stderr) when the
// page does not show the run's spans.
//
//   node trace.mjs INSTALL_DIR PHOENIX_URL PROJECT_ID TRACE_ID SCREENSHOT
import { mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { pathToFileURL } from "node:url";

import { launch } from "./chromium.mjs";

const [installDir, phoenix, project, trace, shot] = process.argv.slice(2);
const module = join(installDir, "node_modules/playwright-core/index.mjs");
const { chromium } = await import(pathToFileURL(module).href);
mkdirSync(dirname(shot), { recursive: true });

const browser = await launch(chromium);
try {
  const context = await browser.newContext({ viewport: { width: 1400, height: 800 } });
  const page = await context.newPage();
  await page.goto(`${phoenix}/projects/${project}/traces/${trace}`);
  // The span tree: the run's span and the tool call's, by name.
  for (const name of ["invoke_agent", "execute_tool list_dir"]) {
    await page.getByText(name, { exact: true }).first().waitFor({ timeout: 60_000 });
  }
  await page.waitForLoadState("networkidle");
  await page.screenshot({ path: shot });
} finally {
  await browser.close();
}
