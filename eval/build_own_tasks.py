#!/usr/bin/env python3
"""Writes the task set's own tasks (beside HumanEval's), to stdout as JSONL:
reading one file to answer a fact from it, and fixing a one-line bug that a
failing test shows. Each is run three times by `run.py --repeat 3`.

    python3 eval/build_own_tasks.py > eval/tasks/own.jsonl
"""

import json

# run_command last: the fact tasks have no command to run, so not it.
TOOLS = ["read_file", "edit_file", "write_file", "search", "list_dir", "run_command"]

FACTS = [
    (
        "fact-port",
        {
            "README.md": "# inventory\n\nA small inventory service. Its settings are in config/.\n",
            "config/service.ini": "[service]\nname = inventory\nport = 8731\nworkers = 4\n",
            "config/logging.ini": "[logging]\nlevel = info\nport = 514\n",
            "src/app.py": "def main():\n    print('inventory')\n",
        },
        "On which port does the service listen? Its settings are in config/service.ini. "
        "Answer with the number.",
        "8731",
    ),
    (
        "fact-owner",
        {
            "docs/team.md": "# Team\n\n- Billing: owned by Priya Raman (on call: Tuesdays)\n"
            "- Search: owned by Tomás Ortega\n- Storage: owned by Wen Li\n",
            "docs/index.md": "# Docs\n\nSee team.md for who owns what.\n",
        },
        "Who owns the billing component, according to docs/team.md? Answer with the name.",
        "Priya Raman",
    ),
    (
        "fact-version",
        {
            "pyproject.toml": '[project]\nname = "parsers"\nversion = "2.14.1"\n'
            'requires-python = ">=3.9"\n',
            "parsers/__init__.py": "",
        },
        "What version of the project does pyproject.toml give? Answer with the version.",
        "2.14.1",
    ),
]

BUGS = [
    (
        "bugfix-range",
        "stats.py",
        "def total(values):\n    \"\"\"The sum of `values`.\"\"\"\n    result = 0\n"
        "    for i in range(1, len(values)):\n        result += values[i]\n    return result\n\n\n"
        "def mean(values):\n    \"\"\"The mean of `values` (not empty).\"\"\"\n"
        "    return total(values) / len(values)\n",
        "from stats import mean, total\n\nassert total([1, 2, 3]) == 6, total([1, 2, 3])\n"
        "assert mean([2, 4]) == 3, mean([2, 4])\nprint('all tests pass')\n",
        "from stats import mean, total\nassert total([]) == 0\nassert total([5]) == 5\n"
        "assert total([1, 2, 3, 4]) == 10\nassert mean([1, 2, 3]) == 2\n",
    ),
    (
        "bugfix-compare",
        "grades.py",
        "def passed(score):\n    \"\"\"Whether `score` (0 to 100) passes: 50 or more.\"\"\"\n"
        "    return score > 50\n",
        "from grades import passed\n\nassert passed(50), 'a score of 50 passes'\n"
        "assert passed(80)\nassert not passed(49)\nprint('all tests pass')\n",
        "from grades import passed\nassert passed(50) and passed(100) and passed(51)\n"
        "assert not passed(0) and not passed(49)\n",
    ),
    (
        "bugfix-key",
        "inventory.py",
        "def restock(stock, item, count):\n    \"\"\"Adds `count` of `item` to `stock` (a dict) and returns it.\"\"\"\n"
        "    stock[item] = stock.get(item, 0) - count\n    return stock\n",
        "from inventory import restock\n\nassert restock({}, 'pen', 3) == {'pen': 3}\n"
        "assert restock({'pen': 1}, 'pen', 2) == {'pen': 3}\nprint('all tests pass')\n",
        "from inventory import restock\nassert restock({'a': 1}, 'b', 4) == {'a': 1, 'b': 4}\n"
        "assert restock({'a': 1}, 'a', 0) == {'a': 1}\n",
    ),
]


def main():
    for name, files, prompt, answer in FACTS:
        print(
            json.dumps(
                {
                    "id": name,
                    "request": {"prompt": prompt, "tools": TOOLS[:-1], "workspace": {"files": files},
                                "limits": {"max_steps": 8, "timeout_ms": 600000},
                                "context": {"max_context_chars": 16000}},
                    "check": {"answer_contains": answer},
                }
            )
        )
    for name, module, source, tests, hidden in BUGS:
        print(
            json.dumps(
                {
                    "id": name,
                    "request": {
                        "prompt": "The tests in test_examples.py fail. Find the bug in "
                        f"{module}, fix it, and run the `test` command to check.",
                        "tools": TOOLS,
                        "commands": ["test"],
                        "workspace": {"files": {module: source, "test_examples.py": tests}},
                        "limits": {"max_steps": 12, "timeout_ms": 600000},
                        "context": {"max_context_chars": 16000},
                    },
                    "check": {"file": module, "python": hidden, "module": module},
                }
            )
        )


if __name__ == "__main__":
    main()
