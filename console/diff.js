// A run's changes, for the console's run page: its diff (GET
// /v1/runs/{id}/diff) shown as a unified diff, added lines green, removed
// ones red, file headers bold; the counts of its `changes`; and a file the
// browser saves (the workspace's archive).
//
// The diff is what the run wrote into its workspace, model-written and
// untrusted: every line is set as text (textContent), never as markup.

/** Lines shown at most; past them, a note says how many more there are. */
const MAX_LINES = 5000;

/** Lines of a file's header in a git diff, before its first hunk. */
const HEADER = /^(diff --git |--- |\+\+\+ |index |new file mode |deleted file mode |old mode |new mode |similarity index |dissimilarity index |rename from |rename to |copy from |copy to |Binary files )/;

/** `@@ -OLD[,COUNT] +NEW[,COUNT] @@`: the lines a hunk holds on each side. */
const HUNK = /^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@/;

/**
 * The kind of each line of a unified diff: `file` (the `diff --git` line
 * that starts a file), `meta` (the rest of its header), `hunk` (`@@`),
 * `add`, `del`, `context`, `note` (`\ No newline at end of file`). A
 * hunk's lines are counted by its header, so that a removed line that
 * starts `-- ` is never taken for a header.
 */
export function classify(lines) {
  const kinds = [];
  let old = 0;
  let added = 0;
  for (const line of lines) {
    let kind;
    // A line that no hunk line could be (` `, `+`, `-`, `\`) ends a hunk
    // whose counts were wrong.
    if ((old > 0 || added > 0) && !/^[ +\-\\]|^$/.test(line)) {
      old = 0;
      added = 0;
    }
    if (old > 0 || added > 0) {
      if (line.startsWith("+") && added > 0) {
        kind = "add";
        added -= 1;
      } else if (line.startsWith("-") && old > 0) {
        kind = "del";
        old -= 1;
      } else if (line.startsWith("\\")) {
        kind = "note";
      } else {
        kind = "context";
        old = Math.max(0, old - 1);
        added = Math.max(0, added - 1);
      }
    } else if (line.startsWith("\\")) {
      // After a hunk's last line.
      kind = "note";
    } else if (line.startsWith("diff --git ")) {
      kind = "file";
    } else if (HEADER.test(line)) {
      kind = "meta";
    } else {
      const hunk = HUNK.exec(line);
      if (hunk) {
        kind = "hunk";
        old = hunk[1] === undefined ? 1 : Number(hunk[1]);
        added = hunk[2] === undefined ? 1 : Number(hunk[2]);
      } else {
        kind = "context";
      }
    }
    kinds.push(kind);
  }
  return kinds;
}

/**
 * Shows `text`, a unified diff, in `container` (replacing what it held, and
 * keeping where it was scrolled to): a scrollable `pre`, or "No changes"
 * for an empty diff.
 */
export function renderDiff(container, text) {
  const before = container.querySelector("pre.diff");
  const scroll = before ? { top: before.scrollTop, left: before.scrollLeft } : null;
  if (!text) {
    const empty = document.createElement("p");
    empty.className = "empty diff-empty";
    empty.textContent = "No changes";
    container.replaceChildren(empty);
    return;
  }
  const lines = text.split("\n");
  if (lines[lines.length - 1] === "") lines.pop();
  const shown = lines.slice(0, MAX_LINES);
  const kinds = classify(shown);
  const body = document.createElement("div");
  body.className = "diff-lines";
  for (let i = 0; i < shown.length; i += 1) {
    const line = document.createElement("span");
    line.className = `line ${kinds[i]}`;
    line.textContent = shown[i];
    body.append(line);
  }
  const pre = document.createElement("pre");
  pre.className = "diff";
  pre.append(body);
  const parts = [pre];
  if (lines.length > shown.length) {
    const more = document.createElement("p");
    more.className = "empty diff-more";
    more.textContent = `${lines.length - shown.length} more lines not shown: download the workspace, or read GET /v1/runs/{id}/diff.`;
    parts.push(more);
  }
  container.replaceChildren(...parts);
  if (scroll) {
    pre.scrollTop = scroll.top;
    pre.scrollLeft = scroll.left;
  }
}

/**
 * The counts of a run's `changes`, as parts to show: `["3 files", "+10",
 * "−2"]`; `null` when there are none (the run has not ended).
 */
export function changesParts(changes) {
  if (!changes) return null;
  const files = `${changes.files} ${changes.files === 1 ? "file" : "files"}`;
  return [files, `+${changes.insertions}`, `\u2212${changes.deletions}`];
}

/** Shows a run's `changes` in `element` (`3 files, +10 −2`), or hides it when there are none. */
export function renderChanges(element, changes) {
  const parts = changesParts(changes);
  element.hidden = parts === null;
  if (parts === null) {
    element.replaceChildren();
    return;
  }
  const [files, insertions, deletions] = parts;
  const added = document.createElement("span");
  added.className = "added";
  added.textContent = insertions;
  const removed = document.createElement("span");
  removed.className = "removed";
  removed.textContent = deletions;
  element.replaceChildren(`${files}, `, added, " ", removed);
}

/** Has the browser save `blob` as a file named `name`. */
export function saveBlob(blob, name) {
  const url = URL.createObjectURL(blob);
  const link = document.createElement("a");
  link.href = url;
  link.download = name;
  link.hidden = true;
  document.body.append(link);
  link.click();
  link.remove();
  // Once the browser has taken it.
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}
