"""Tasks as text, one a line: "[x] Buy milk" (done) or "[ ] Buy milk", with
" !high" or " !low" at its end for a priority other than normal."""

from .model import PRIORITIES, Task


def dumps(tasks):
    """`tasks` as the text of a to-do file."""
    lines = []
    for task in tasks:
        mark = "x" if task.done else " "
        suffix = "" if task.priority == "normal" else f" !{task.priority}"
        lines.append(f"[{mark}] {task.title}{suffix}")
    return "".join(line + "\n" for line in lines)


def loads(text):
    """The tasks of a to-do file's text; blank lines are skipped."""
    tasks = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if len(line) < 5 or line[0] != "[" or line[2:4] != "] ":
            raise ValueError(f"not a task line: {line!r}")
        title, priority = line[4:], "normal"
        head, _, tail = title.rpartition(" !")
        if head and tail in PRIORITIES:
            title, priority = head, tail
        tasks.append(Task(title=title, done=line[1] == "x", priority=priority))
    return tasks
