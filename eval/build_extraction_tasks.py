#!/usr/bin/env python3
"""Writes the task set's extraction tasks, to stdout as JSONL: a short text
in the prompt (an email, an invoice, a bug report...), the fields to take
from it, and the JSON document expected. Each run has no tools and carries
the fields' JSON Schema as `output_schema`; `run.py --no-schema` runs the
same requests without it, so that the prompt alone asks for the same JSON.
The texts are written for this set.

    python3 eval/build_extraction_tasks.py > eval/tasks/extraction.jsonl
    python3 eval/build_extraction_tasks.py --terse > eval/tasks/extraction-terse.jsonl

With `--terse` the prompt names the fields only, and what each one is
(its meaning, its format) is in the schema, as each property's
`description`: how a program that defines its output by a schema asks.
Without the schema the model then has the names alone.
"""

import json
import sys

DATE = {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"}
STRING = {"type": "string"}
NUMBER = {"type": "number"}
INTEGER = {"type": "integer"}
BOOLEAN = {"type": "boolean"}


def enum(*values):
    return {"type": "string", "enum": list(values)}


def array(items):
    return {"type": "array", "items": items}


def one_of(values):
    return ", ".join(json.dumps(value) for value in values)


# Each task: its id, what the text is, the text, and its fields as
# (name, schema, what the prompt asks for, expected value).
TASKS = [
    (
        "extract-email",
        "email",
        "From: Dana Whitfield <dana.whitfield@larchmont-labs.example>\n"
        "To: product-leads@larchmont-labs.example\n"
        "Subject: Quarterly roadmap review\n\n"
        "Hi all,\n\n"
        "Let's hold the quarterly roadmap review on Thursday, 12 March 2026, starting at\n"
        "2:30 pm. It will be online only: I'll send the video link the day before.\n"
        "I'd like Marco Bellini, Aiko Tanaka and Sven Lindqvist to join. Sven, please\n"
        "bring the hiring numbers.\n\n"
        "Thanks,\nDana\n",
        [
            ("sender_name", STRING, "the sender's full name", "Dana Whitfield"),
            ("meeting_date", DATE, "the meeting's date, as YYYY-MM-DD", "2026-03-12"),
            ("start_time", {"type": "string", "pattern": "^[0-9]{2}:[0-9]{2}$"},
             "when it starts, as HH:MM on a 24-hour clock", "14:30"),
            ("invitees", array(STRING),
             "the full names of the people asked to join, not counting the sender",
             ["Marco Bellini", "Aiko Tanaka", "Sven Lindqvist"]),
            ("in_person", BOOLEAN, "true if people meet in person, false if online only", False),
        ],
    ),
    (
        "extract-invoice",
        "invoice",
        "Brightwater Office Supply\n"
        "Invoice INV-2026-0417, issued 17 April 2026\n\n"
        "  SKU      Item                  Qty   Unit    Amount\n"
        "  KB-220   Ergonomic keyboard     3    89.90   269.70\n"
        "  MS-115   Wireless mouse         2    24.50    49.00\n\n"
        "  Total due: 318.70 EUR (VAT included)\n"
        "  Status: unpaid, due within 30 days\n",
        [
            ("invoice_number", STRING, "the invoice's number, as printed", "INV-2026-0417"),
            ("issue_date", DATE, "the date it was issued, as YYYY-MM-DD", "2026-04-17"),
            ("currency", enum("EUR", "USD", "GBP"), None, "EUR"),
            ("total", NUMBER, "the total due, as a number", 318.7),
            ("skus", array(STRING), "the SKUs of the invoice's lines", ["KB-220", "MS-115"]),
            ("paid", BOOLEAN, "whether it has been paid", False),
        ],
    ),
    (
        "extract-bug",
        "bug report",
        "Bug #5521, reported by kwame.o\n\n"
        "Since upgrading to 3.8.1, the login page rejects valid passwords when the\n"
        "password contains a '%' character. It happens every time on Firefox and on\n"
        "Safari; Chrome works fine (not tried on Edge). Those users cannot sign in at\n"
        "all, but there is a workaround (reset the password to one without '%'), so\n"
        "I'd call it high rather than critical.\n",
        [
            ("report_id", INTEGER, "the bug's number, as a number", 5521),
            ("component", enum("login", "billing", "search", "export"), None, "login"),
            ("severity", enum("low", "medium", "high", "critical"),
             "the severity the reporter gives", "high"),
            ("version", STRING, "the version it appeared in", "3.8.1"),
            ("always_reproducible", BOOLEAN, "whether it happens every time", True),
            ("affected_browsers", array(enum("chrome", "firefox", "safari", "edge")),
             "the browsers it happens on", ["firefox", "safari"]),
        ],
    ),
    (
        "extract-job",
        "job ad",
        "Kestrel Freight is hiring a Senior Backend Engineer for its Rotterdam office.\n"
        "Hybrid: three days a week in the office, two from home. The salary is\n"
        "EUR 72,000 to 88,000 a year, depending on experience. You will need solid\n"
        "Python, PostgreSQL and Kubernetes; Go is a plus but not required.\n",
        [
            ("job_title", STRING, "the title of the job", "Senior Backend Engineer"),
            ("company", STRING, "the hiring company's name", "Kestrel Freight"),
            ("work_mode", enum("remote", "hybrid", "on-site"), None, "hybrid"),
            ("salary_min", NUMBER, "the lowest yearly salary, as a number", 72000),
            ("salary_max", NUMBER, "the highest yearly salary, as a number", 88000),
            ("required_skills", array(STRING),
             "the skills the ad requires (not those that are only a plus)",
             ["Python", "PostgreSQL", "Kubernetes"]),
        ],
    ),
    (
        "extract-shipping",
        "shipping notice",
        "Good news! Your order #88213 has shipped with UPS.\n"
        "Tracking number: 1Z999AA10123456784\n"
        "It travels as 2 packages: package 1 weighs 1.2 kg, package 2 weighs 0.4 kg.\n"
        "Expected delivery: Tuesday, 9 June 2026. Someone must sign for it at the door.\n",
        [
            ("order_number", INTEGER, "the order's number, as a number", 88213),
            ("carrier", enum("dhl", "ups", "fedex", "usps"), None, "ups"),
            ("tracking_number", STRING, "the tracking number", "1Z999AA10123456784"),
            ("estimated_delivery", DATE, "the expected delivery date, as YYYY-MM-DD", "2026-06-09"),
            ("package_weights_kg", array(NUMBER), "each package's weight in kilograms", [1.2, 0.4]),
            ("signature_required", BOOLEAN, "whether someone must sign for it", True),
        ],
    ),
    (
        "extract-meeting",
        "meeting note",
        "Infrastructure sync, 3 February 2026\n"
        "Present: Lena Vogt, Omar Haddad, Jun Park, Beatriz Souza\n\n"
        "- The backup budget was approved: 4,500 USD for the year.\n"
        "- Omar will migrate the CI runners; Jun will write the restore runbook.\n"
        "- Next sync: 17 February 2026.\n",
        [
            ("meeting_date", DATE, "the meeting's date, as YYYY-MM-DD", "2026-02-03"),
            ("attendee_count", INTEGER, "how many people were present", 4),
            ("budget_approved", BOOLEAN, "whether the budget was approved", True),
            ("budget_usd", NUMBER, "the budget in US dollars, as a number", 4500),
            ("action_owners", array(STRING),
             "the full names of the people given a task", ["Omar Haddad", "Jun Park"]),
            ("next_meeting", DATE, "the next meeting's date, as YYYY-MM-DD", "2026-02-17"),
        ],
    ),
    (
        "extract-review",
        "product review",
        "Rating: 4 out of 5 stars. \"Great sound, so-so battery\"\n\n"
        "I've used the Auralis Q3 headphones daily for a month. The noise cancelling is\n"
        "excellent and they are comfortable on long flights. The battery lasts about\n"
        "18 hours, not the 30 advertised, and the Bluetooth connection drops now and\n"
        "then when my phone is in my pocket. Still, I'd recommend them to a friend.\n",
        [
            ("product", STRING, "the product's name", "Auralis Q3"),
            ("rating", INTEGER, "the stars given, 1 to 5", 4),
            ("recommends", BOOLEAN, "whether the reviewer recommends it", True),
            ("battery_hours", NUMBER, "the battery life the reviewer measured, in hours", 18),
            ("issues", array(enum("battery", "noise", "price", "comfort", "connectivity")),
             "the problems the reviewer reports", ["battery", "connectivity"]),
        ],
    ),
    (
        "extract-address",
        "delivery request",
        "Please send the replacement part to Ms. Ingrid Solberg, Lindenstrasse 14,\n"
        "2nd floor (rear building), 10969 Berlin, Germany. Deliveries on weekdays only,\n"
        "please: nobody is there at the weekend.\n",
        [
            ("recipient", STRING, "the recipient's full name, without a title", "Ingrid Solberg"),
            ("street", STRING, "the street and house number only", "Lindenstrasse 14"),
            ("postal_code", STRING, "the postal code", "10969"),
            ("city", STRING, "the city", "Berlin"),
            ("country_code", enum("DE", "AT", "CH", "NL", "FR"),
             "the country's ISO 3166 two-letter code", "DE"),
            ("delivery_days", array(enum("monday", "tuesday", "wednesday", "thursday", "friday",
                                         "saturday", "sunday")),
             "the days of the week a delivery may come",
             ["monday", "tuesday", "wednesday", "thursday", "friday"]),
        ],
    ),
    (
        "extract-log",
        "log line",
        "2026-07-08T14:03:27.512Z ERROR [payment-worker-3] charge failed order=A-7781 "
        "amount=129.99 currency=GBP attempt=3/5 retryable=true "
        "codes=[card_declined,insufficient_funds]\n",
        [
            ("level", enum("DEBUG", "INFO", "WARN", "ERROR"), None, "ERROR"),
            ("order_id", STRING, "the order's id", "A-7781"),
            ("amount", NUMBER, "the amount, as a number", 129.99),
            ("attempt", INTEGER, "which attempt this was, as a number", 3),
            ("retryable", BOOLEAN, "whether it may be retried", True),
            ("error_codes", array(STRING), "the error codes",
             ["card_declined", "insufficient_funds"]),
        ],
    ),
    (
        "extract-recipe",
        "recipe",
        "Lemon barley salad (serves 4)\n\n"
        "Prep 15 minutes, cook 35 minutes. Vegetarian and nut-free; not vegan (it has\n"
        "feta) and not gluten-free (barley). You need 200 g pearl barley, 1 cucumber,\n"
        "150 g feta, 2 lemons, a bunch of mint and some olive oil.\n",
        [
            ("dish", STRING, "the dish's name", "Lemon barley salad"),
            ("servings", INTEGER, "how many it serves", 4),
            ("prep_minutes", INTEGER, "the preparation time in minutes", 15),
            ("cook_minutes", INTEGER, "the cooking time in minutes", 35),
            ("diet_labels", array(enum("vegetarian", "vegan", "gluten-free", "nut-free")),
             "the labels that apply to the dish", ["vegetarian", "nut-free"]),
        ],
    ),
]


def describe(schema):
    """A field's type in words, for the prompt: what the schema says, so the
    prompt asks for the same document without it."""
    if "enum" in schema:
        return "one of " + one_of(schema["enum"])
    if schema["type"] == "array":
        return "a list of " + (
            "values, each one of " + one_of(schema["items"]["enum"])
            if "enum" in schema["items"]
            else {"string": "strings", "number": "numbers"}[schema["items"]["type"]]
        )
    return {"string": "a string", "number": "a number", "integer": "an integer",
            "boolean": "true or false"}[schema["type"]]


def task(name, kind, text, fields, terse=False):
    if terse:
        names = ", ".join(f'"{field}"' for field, _, _, _ in fields)
        prompt = (
            f"Extract from the {kind} below one JSON object with the fields {names}.\n\n"
            f"Answer with the JSON object only.\n\nThe {kind}:\n\"\"\"\n{text}\"\"\"\n"
        )
    else:
        lines = []
        for field, schema, wanted, _ in fields:
            lines.append(f'- "{field}": {describe(schema)}' + (f" ({wanted})" if wanted else ""))
        prompt = (
            f"Extract these fields from the {kind} below and answer with one JSON object "
            "that has exactly these fields and nothing else:\n"
            + "\n".join(lines)
            + f"\n\nAnswer with the JSON object only.\n\nThe {kind}:\n\"\"\"\n{text}\"\"\"\n"
        )
    # Terse: the schema says what each field is.
    properties = {
        field: dict(schema, description=wanted) if terse and wanted else schema
        for field, schema, wanted, _ in fields
    }
    schema = {
        "type": "object",
        "properties": properties,
        "required": [field for field, _, _, _ in fields],
        "additionalProperties": False,
    }
    expected = {field: value for field, _, _, value in fields}
    assert 3 <= len(fields) <= 6, name
    return {
        "id": name + ("-terse" if terse else ""),
        "request": {
            "prompt": prompt,
            "tools": [],
            "output_schema": schema,
            "limits": {"max_steps": 4, "timeout_ms": 600000},
        },
        "check": {"expect_json": expected},
    }


def main():
    terse = "--terse" in sys.argv[1:]
    for name, kind, text, fields in TASKS:
        print(json.dumps(task(name, kind, text, fields, terse)))


if __name__ == "__main__":
    main()
