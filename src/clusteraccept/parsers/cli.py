"""``python -m clusteraccept.parsers TOOL FILE``: print a tool output's parsed structure as JSON.

Exit 0 on success; on unparseable input ``FILE:LINE: expected ..., got ...`` on stderr and exit 2.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import sys
from pathlib import Path
from typing import Any

from clusteraccept import parsers
from clusteraccept.errors import ParseError


def to_jsonable(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | frozenset | set):
        return [to_jsonable(v) for v in obj]
    return obj


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(
            f"usage: python -m clusteraccept.parsers TOOL FILE   (tools: {', '.join(sorted(parsers.TOOLS))})",
            file=sys.stderr,
        )
        return 2
    tool, file = args
    try:
        fn = parsers.get(tool)
    except KeyError as exc:
        print(f"{file}: {exc.args[0]}", file=sys.stderr)
        return 2
    try:
        text = sys.stdin.read() if file == "-" else Path(file).read_text(errors="replace")
    except OSError as exc:
        print(f"{file}: cannot read: {exc.strerror}", file=sys.stderr)
        return 2
    try:
        result = fn(text)
    except ParseError as exc:
        print(f"{file}:{exc.line_no}: expected {exc.expected}, got {exc.got!r}", file=sys.stderr)
        return 2
    print(json.dumps(to_jsonable(result), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
