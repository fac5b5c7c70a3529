"""Parsed built-in suite files, cached per user, so that a rank reads one without PyYAML.

Importing yaml costs a rank ~15 ms of CPU (its pure-Python modules and their regexes load even
for libyaml's loader); on 16 ranks over 2 cores that is ~0.13 s before the first collective.
A file whose parse is plain JSON data (mappings with text keys, lists, text, numbers,
booleans, null) is kept as JSON together with the text it came from, one entry per path; a
later read uses the entry only while the file's text is the same, character for character,
so an edit (or a clock that lies about mtimes) never serves a stale parse. Only the built-in
suites are cached (suitefile decides), so the entries stay one per suite and install: a
user's own files, often written to temporary directories, would leave one each. Entries are
written to a private temporary file and renamed into place, so ranks that miss together each
write a whole copy and a reader sees one whole copy; a cache that cannot be read or written
is passed by silently: it only ever saves time. Errors are never cached (invalid YAML raises
before anything is written), so their messages come from the parser every time.
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from commbench import user_cache, write_cache_entry

FORMAT = 1  # bump when an entry's layout changes


def entry(path: Path) -> Path:
    """The cache file of the suite file at `path` (resolved): its stem and a hash of the path."""
    return user_cache("suites") / f"{path.stem}-{zlib.crc32(str(path).encode()):08x}.json"


def load(path: Path, text: str, parse: Callable[[str], Any]) -> Any:
    """parse(text), the `text` read from `path`, or the parse cached for exactly that text."""
    import json  # ~2 ms against yaml's ~15

    where = entry(path)
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):  # a miss, whatever way
        kept = json.loads(where.read_text())
        if kept["format"] == FORMAT and kept["path"] == str(path) and kept["text"] == text:
            return kept["data"]
    data = parse(text)
    _store(where, path, text, data)
    return data


def _store(where: Path, path: Path, text: str, data: Any) -> None:
    """Write the entry if JSON gives `data` back unchanged (it would not for dates, sets,
    binary, NaN or keys that are not text); atomically, or not at all."""
    import json

    try:
        blob = json.dumps({"format": FORMAT, "path": str(path), "text": text, "data": data})
    except (TypeError, ValueError):
        return
    if json.loads(blob)["data"] != data:
        return
    write_cache_entry(where, blob)
