"""Python side of tests/canonical_json_python.rs: json.dumps each case exactly as given.

stdin (UTF-8 JSON): a list of cases {"value": NODE, "options": {"sort_keys", "separators",
"ensure_ascii", "indent"}}. Values travel as tagged nodes so that each reaches Python as the exact
object the Rust side holds:
  ["null"] | ["bool", b] | ["int", "decimal text"] | ["float", "16 hex digits of the IEEE-754 bits"]
  | ["str", s] | ["list", [NODE...]] | ["dict", [[key, NODE]...]]   (dict entries in insertion order)
stdout: a JSON list (ASCII only) with json.dumps(value, **options) for each case, in order.
"""

import json
import struct
import sys


def decode(node):
    tag = node[0]
    if tag == "null":
        return None
    if tag == "bool":
        return node[1]
    if tag == "int":
        return int(node[1])
    if tag == "float":
        return struct.unpack(">d", bytes.fromhex(node[1]))[0]
    if tag == "str":
        return node[1]
    if tag == "list":
        return [decode(item) for item in node[1]]
    if tag == "dict":
        result = {}
        for key, item in node[1]:
            if key in result:
                raise ValueError(f"duplicate key {key!r} in a transported dict")
            result[key] = decode(item)
        return result
    raise ValueError(f"unknown node tag {tag!r}")


def main():
    cases = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    outputs = []
    for case in cases:
        options = case["options"]
        outputs.append(
            json.dumps(
                decode(case["value"]),
                sort_keys=options["sort_keys"],
                separators=tuple(options["separators"]),
                ensure_ascii=options["ensure_ascii"],
                indent=options["indent"],
            )
        )
    sys.stdout.write(json.dumps(outputs))


if __name__ == "__main__":
    main()
