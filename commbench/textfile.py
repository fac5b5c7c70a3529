"""The one reader of every text file a user gives: suites, thresholds, calibrations, plans,
the base files of exports, Hugging Face configs; and the JSON and YAML parsers they all use.

Text is UTF-8. A byte that is not is refused with one line naming the file, the byte's offset,
line and value (a Latin-1 `é` saved by an old editor), except where a comment is all that
holds such bytes: a comment is never read, so the file is read with them replaced. Integers
of more than limits.MAX_DIGITS digits are refused by the parsers themselves (Python's int()
would raise a ValueError past 4300 digits, an internal error).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from commbench.errors import UsageError
from commbench.keys import unique_key_loader, unique_pairs
from commbench.limits import MAX_DIGITS, bounded_json_int, digits_error


def read_text(path: str | Path, what: str, comment: str | None = None) -> str:
    """The text of `path` (`what` names it in messages: a flag, "plan", "calibration").
    `comment`: the format's comment marker (`#` for YAML); bytes that are not UTF-8 are
    tolerated when every one of them sits after the marker on its line."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise UsageError(f"cannot read {what} {path}: {e.strerror or e}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        bad = _bad_offsets(data)
        if comment is None or not all(_in_comment(data, at, comment.encode()) for at in bad):
            line = data.count(b"\n", 0, e.start) + 1
            raise UsageError(
                f"{what} {path}: byte {e.start} (line {line}, 0x{data[e.start]:02x}) is not "
                "UTF-8: save the file as UTF-8"
            ) from None
    return data.decode("utf-8", errors="replace")


def _bad_offsets(data: bytes) -> list[int]:
    """Offsets of every byte of `data` that does not decode as UTF-8."""
    out: list[int] = []
    at = 0
    while at < len(data):
        try:
            data[at:].decode("utf-8")
            break
        except UnicodeDecodeError as e:
            out.extend(range(at + e.start, at + e.end))
            at += e.end
    return out


def _in_comment(data: bytes, at: int, marker: bytes) -> bool:
    start = data.rfind(b"\n", 0, at) + 1
    return marker in data[start:at]


def loads_json(text: str, where: str) -> Any:
    """JSON text, its integers bounded; one line naming `where` and the line when it is not
    JSON."""
    try:
        return json.loads(text, parse_int=bounded_json_int, object_pairs_hook=unique_pairs)
    except json.JSONDecodeError as e:
        raise UsageError(f"{where}:{e.lineno}: not valid JSON ({e.msg})") from None
    except RecursionError:
        raise UsageError(f"{where}: not valid JSON (nested too deeply)") from None
    except ValueError as e:  # a number over the bound (UsageError), a key given twice
        raise UsageError(f"{where}: {e}") from None


def read_json(path: str | Path, what: str) -> Any:
    """The JSON document of a file the user named."""
    return loads_json(read_text(path, what), f"{what} {path}")


class _LongInt(UsageError):
    """A YAML integer of more than MAX_DIGITS digits, and its line."""

    def __init__(self, text: str, line: int) -> None:
        super().__init__(str(digits_error(text, "")))
        self.line = line


@cache
def yaml_loader() -> type:
    """The one YAML loader every reader gets, made once (yaml is imported only by those who
    parse YAML): yaml's safe loader (libyaml's when built: ~50 ms less per rank) refusing a key
    given twice (keys.unique_key_loader), with integers bounded by MAX_DIGITS."""
    import yaml

    class BoundedLoader(unique_key_loader()):  # type: ignore[misc]
        pass

    def construct_int(loader: Any, node: Any) -> int:
        text = loader.construct_scalar(node)
        if sum(c.isdigit() for c in text) > MAX_DIGITS:
            raise _LongInt(text, node.start_mark.line + 1)
        return yaml.SafeLoader.construct_yaml_int(loader, node)

    BoundedLoader.add_constructor("tag:yaml.org,2002:int", construct_int)
    return BoundedLoader


def loads_yaml(text: str, where: str, strict: bool = True) -> Any:
    """YAML text with bounded integers. A YAMLError is one line naming `where` and the line,
    or, not `strict` (a `--set` value), the text itself as a string."""
    import yaml

    try:
        return yaml.load(text, Loader=yaml_loader())
    except yaml.YAMLError as e:
        if not strict:
            return text
        mark = getattr(e, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]  # one line
        raise UsageError(f"{where}: not valid YAML{line} ({problem})") from None
    except _LongInt as e:
        line = f" line {e.line}" if "\n" in text.strip() else ""
        raise UsageError(f"{where}{line}: {e}") from None
