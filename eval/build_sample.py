#!/usr/bin/env python3
"""Writes the scripted sample of the task set (to stdout, as JSONL): tasks in
the task set's format whose model is scripted, one that solves its problem,
one that does not, a fact answered, and a one-shot answer, so that the runner
and its scorer are tested without a real model (the project's tests run it).
And three extractions of one order line: answered right (in a fenced block),
answered with two of six fields wrong (and the other four right only as the
scorer normalises them), and not answered with JSON at all.

    python3 eval/build_sample.py > eval/tasks/sample.jsonl
"""

import json

from build_extraction_tasks import BOOLEAN, NUMBER, STRING, array, enum, task

STUB = 'def add(a, b):\n    """The sum of a and b.\n    >>> add(2, 3)\n    5\n    """\n'
RIGHT = STUB + "    return a + b\n"
WRONG = STUB + "    return a - b\n"
EXAMPLES = (
    "from solution import add\n"
    "assert add(2, 3) == 5, add(2, 3)\n"
    "print('1 of 1 examples pass')\n"
)
HIDDEN = "\n\ndef check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n\ncheck(add)\n"


def solving(code, answer):
    return {
        "scripted": [
            {"content": "", "tool_calls": [{"id": "w", "name": "write_file",
                                            "arguments": {"path": "solution.py", "content": code}}]},
            {"content": "", "tool_calls": [{"id": "t", "name": "run_command",
                                            "arguments": {"command": "test"}}]},
            {"content": answer},
        ]
    }


def coding(name, model):
    return {
        "id": name,
        "request": {
            "prompt": "Complete add in solution.py; run the test command.",
            "tools": ["read_file", "write_file", "run_command"],
            "commands": ["test"],
            "workspace": {"files": {"solution.py": STUB, "test_examples.py": EXAMPLES}},
            "model": model,
        },
        # As the HumanEval tasks are scored: the file imported as its module.
        "check": {"file": "solution.py", "module": "solution.py",
                  "python": "from solution import *\n" + HIDDEN},
        "one_shot": {
            "prompt": "Complete this function:\n" + STUB,
            "model": {"scripted": [{"content": "Here:\n```python\n" + RIGHT + "```\n"}]},
            "check": {"python": HIDDEN},
        },
    }


ORDER = "Order 4471: 3 blue mugs at 4.50 each, gift-wrapped. Tags: kitchen, gift.\n"
ORDER_FIELDS = [
    ("item", STRING, "what was ordered, in the singular", "Blue mug"),
    ("quantity", NUMBER, "how many", 3),
    ("unit_price", NUMBER, "the price of one", 4.5),
    ("gift_wrap", BOOLEAN, "whether it is gift-wrapped", True),
    ("colour", enum("blue", "red", "green"), None, "blue"),
    ("tags", array(STRING), "the order's tags", ["kitchen", "gift"]),
]


def extraction(name, *answers):
    """An extraction of the order line whose model answers `answers` in
    turn (a run with a schema asks again after an answer that is not
    valid output, twice by default)."""
    sample = task(name, "order line", ORDER, ORDER_FIELDS)
    sample["request"]["limits"] = {"max_steps": 4}
    sample["request"]["model"] = {"scripted": [{"content": answer} for answer in answers]}
    return sample


def main():
    print(json.dumps(coding("sample-solved", solving(RIGHT, "Done: add returns a + b."))))
    wrong = coding("sample-wrong", solving(WRONG, "Done."))
    wrong["one_shot"]["model"] = {"scripted": [{"content": "```python\n" + WRONG + "```"}]}
    print(json.dumps(wrong))
    print(
        json.dumps(
            {
                "id": "sample-fact",
                "request": {
                    "prompt": "Which port? Answer with the number.",
                    "tools": ["read_file"],
                    "workspace": {"files": {"service.ini": "port = 8731\n"}},
                    "model": {"scripted": [
                        {"content": "", "tool_calls": [{"id": "r", "name": "read_file",
                                                        "arguments": {"path": "service.ini"}}]},
                        {"content": "It listens on 8731."},
                    ]},
                },
                "check": {"answer_contains": "8731"},
            }
        )
    )
    right = {"item": "Blue mug", "quantity": 3, "unit_price": 4.5, "gift_wrap": True,
             "colour": "blue", "tags": ["kitchen", "gift"]}
    print(json.dumps(extraction("sample-json-right", "```json\n" + json.dumps(right) + "\n```")))
    # Right as normalised: case and spacing, 3.0 for 3, the tags in another
    # order; wrong: gift_wrap and colour.
    wrong = ('{"item": "  BLUE  mug ", "quantity": 3.0, "unit_price": 4.50, "gift_wrap": false, '
             '"colour": "red", "tags": ["Gift", "kitchen"]}')
    print(json.dumps(extraction("sample-json-wrong", wrong)))
    prose = "The order is for three blue mugs."
    print(json.dumps(extraction("sample-json-prose", prose, prose, prose)))


if __name__ == "__main__":
    main()
