"""One parser and one set of bounds for every number a user gives: flags, `--set`, `--model`
overrides, sizes, iterations, worlds, and the integers of every JSON or YAML file read.

A number of thousands of digits (Python's int() refuses more than 4300, with a ValueError that
would surface as an internal error) or a count that expands work without end (a billion
iterations, a world of 100000 ranks checked pair by pair) fails at once with one line that
names the bound. The bounds sit a few times above the largest real use; the shape and suite
bounds (layers, sweep points) are in traffic/bounds.py, which uses these parsers.
"""

from __future__ import annotations

import re

from commbench.errors import UsageError

MAX_DIGITS = 20  # 2**64 has 20 digits: no count or byte size commbench takes has more
MAX_COUNT = 2**31 - 1  # any other count: MPI's int (counts, ranks, tags)
MAX_ITERS = 100_000  # iterations of one point (OSU's largest default is 10000, IMB's 1000)
MAX_WORLD = 65536  # ranks of one job: a world, --world, --gpus
MAX_BYTES = 1 << 40  # one message or buffer: 1 TiB (the largest GPU has 192 GiB)

ECHO_CHARS = 120  # a value echoed in a message is cut to this many characters
MESSAGE_WORD_CHARS = 240  # a word of a message (a path, an echoed value) is cut past this


def digits_error(text: str, what: str) -> UsageError:
    """The error for a number of more than MAX_DIGITS digits (before int() is tried)."""
    n = sum(c.isdigit() for c in text)
    return UsageError(
        f"{what + ': ' if what else ''}a number of {n} digits, over the bound of "
        f"{MAX_DIGITS} digits a number commbench reads may have"
    )


def parse_int(text: str, least: int, says: str, most: int = MAX_COUNT, why: str = "") -> int:
    """An integer flag's text in [least, most] (argtypes turns the UsageError into argparse's
    error, which names the flag): `says` tells the lower bound ("at least 1"), `why` the upper
    one. Past MAX_DIGITS digits it fails before int() is tried."""
    if sum(c.isdigit() for c in text) > MAX_DIGITS:
        raise digits_error(text, repr(shown(text)))
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"{shown(text)!r} is not an integer") from None
    if value < least:
        raise UsageError(f"{text!r} must be {says}")
    if value > most:
        raise UsageError(f"{text!r} is over the bound of {most}" + (f" ({why})" if why else ""))
    return value


def shown(text: str, keep: int = ECHO_CHARS) -> str:
    """`text` as an error message echoes it: whole when short, else its start and end around
    a count of what was cut, so a 100 KB value does not become a 100 KB message."""
    if len(text) <= keep:
        return text
    head, tail = text[: keep * 2 // 3], text[-(keep // 6) :]
    return f"{head}...({len(text) - len(head) - len(tail)} characters)...{tail}"


def shorten_message(message: str, keep: int = MESSAGE_WORD_CHARS) -> str:
    """A one-line error with every word longer than any path (an echoed value with no
    spaces) cut by `shown`: the one place every error message passes before it is printed."""
    return re.sub(rf"\S{{{keep + 1},}}", lambda m: shown(m.group(0), keep), message)


def bounded_json_int(text: str) -> int:
    """json.loads(parse_int=...): a JSON integer, refused past MAX_DIGITS digits."""
    if sum(c.isdigit() for c in text) > MAX_DIGITS:
        raise digits_error(text, "a JSON integer")
    return int(text)
