"""A key given twice is refused, not settled by the last one: YAML mappings (suite and
thresholds files) and KEY=VALUE lists (`--set`, `--model NAME:k=v`, `--degree`, `--npus`).

PyYAML, like JSON, keeps the last of two equal keys without a word (YAML 1.2 says keys are
unique; PyYAML does not enforce it), and so did every KEY=VALUE flag: `--set a=1 --set a=2`
ran with a=2. A repeat with the same value is harmless and kept; another value is an error
naming both, so what ran is always what the user wrote once.
"""

from __future__ import annotations

from typing import Any

from commbench.errors import UsageError


def assign(out: dict, key: str, value: Any, where: str) -> None:
    """out[key] = value, refusing a key already set to another value (`where`: the flag)."""
    if key in out and out[key] != value:
        raise UsageError(
            f"{where}: {key} given twice ({out[key]!r}, then {value!r}): give each key once"
        )
    out[key] = value


def unique_pairs(pairs: list[tuple[str, Any]]) -> dict:
    """json.loads' object_pairs_hook: an object, refusing a key given twice (ValueError, as
    json's own errors are: the caller names the file)."""
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key!r} given twice: give each key once")
        out[key] = value
    return out


def unique_key_loader() -> type:
    """A new class of PyYAML's safe loader (libyaml's where built) that refuses a mapping key
    given twice with a yaml.constructor.ConstructorError marking the second (its line in the
    message). textfile.yaml_loader, the loader every reader gets, builds on it once."""
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class UniqueKeyLoader(base):  # type: ignore[misc,valid-type]
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # `<<: *anchor`: keys beside it override the merged ones (YAML)
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: the constructor refuses it itself
                    continue
                if first is not None:
                    raise yaml.constructor.ConstructorError(
                        None,
                        None,
                        f"key {key!r} given twice (lines {first} and {line}): give each key once",
                        key_node.start_mark,
                    )
                seen[key] = line
            return super().construct_mapping(node, deep)

    return UniqueKeyLoader
