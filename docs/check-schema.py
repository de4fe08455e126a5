#!/usr/bin/env python3
"""Validate native event lines against docs/event-format.schema.json.

Usage: python3 docs/check-schema.py FILE.jsonl...   (needs the `jsonschema` package)
Exits 1 naming the file, line and reason of the first lines that do not validate.
"""
import json
import sys
from pathlib import Path

import jsonschema

schema = json.loads((Path(__file__).parent / "event-format.schema.json").read_text())
jsonschema.Draft202012Validator.check_schema(schema)
validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
bad = 0
lines = 0
for name in sys.argv[1:]:
    for number, line in enumerate(Path(name).read_text().splitlines(), 1):
        if not line.strip():
            continue
        lines += 1
        for error in validator.iter_errors(json.loads(line)):
            bad += 1
            if bad <= 20:
                print(f"{name}:{number}: {error.message}")
print(f"{lines} lines checked against the event schema, {bad} errors")
sys.exit(1 if bad else 0)
