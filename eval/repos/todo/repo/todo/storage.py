"""Tasks as text, one a line: "[x] Buy milk" (done) or "[ ] Buy milk"."""

from .model import Task


def dumps(tasks):
    """`tasks` as the text of a to-do file."""
    lines = []
    for task in tasks:
        mark = "x" if task.done else " "
        lines.append(f"[{mark}] {task.title}")
    return "".join(line + "\n" for line in lines)


def loads(text):
    """The tasks of a to-do file's text; blank lines are skipped."""
    tasks = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if len(line) < 5 or line[0] != "[" or line[2:4] != "] ":
            raise ValueError(f"not a task line: {line!r}")
        tasks.append(Task(title=line[4:], done=line[1] == "x"))
    return tasks
