"""The parsed-suite cache (traffic/suitecache.py): a hit only for the same text of the same
path, nothing cached that JSON would not give back or that failed to parse, a broken or
unwritable cache passed by, built-in suites only, and a warm read that never imports yaml."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from commbench import ENV_CACHE
from commbench.errors import UsageError
from commbench.traffic import suitecache
from commbench.traffic.suitefile import SUITES_DIR, load_suite, suite_names

from conftest import REPO


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_CACHE, str(tmp_path / "cache"))
    return tmp_path / "cache" / "suites"


class Counting:
    """A parse that counts its calls."""

    def __init__(self, result):
        self.result, self.calls = result, 0

    def __call__(self, text):
        self.calls += 1
        return self.result


def test_same_text_is_read_from_the_cache(cache, tmp_path):
    path, data = tmp_path / "a.yaml", {"runs": [{"pattern": "tp", "degrees": {"tp": [2, 4]}}]}
    parse = Counting(data)
    assert suitecache.load(path, "text", parse) == data
    assert suitecache.load(path, "text", parse) == data
    assert parse.calls == 1
    assert [p.name for p in cache.iterdir()] == [suitecache.entry(path).name]


def test_changed_text_or_other_path_is_parsed_again(cache, tmp_path):
    path = tmp_path / "a.yaml"
    parse = Counting({"x": 1})
    suitecache.load(path, "text", parse)
    suitecache.load(path, "text, edited", parse)
    suitecache.load(tmp_path / "b.yaml", "text, edited", parse)
    assert parse.calls == 3
    assert suitecache.load(path, "text, edited", Counting({"x": 2})) == {"x": 1}  # the new entry


@pytest.mark.parametrize("junk", ["", "{not json", "[1, 2]", '{"format": 1}', "\udcff"])
def test_a_broken_entry_is_a_miss_and_is_rewritten(cache, tmp_path, junk):
    path = tmp_path / "a.yaml"
    cache.mkdir(parents=True)
    suitecache.entry(path).write_text(junk, errors="surrogateescape")
    parse = Counting({"x": 1})
    assert suitecache.load(path, "text", parse) == {"x": 1}
    assert json.loads(suitecache.entry(path).read_text())["data"] == {"x": 1}


@pytest.mark.parametrize(
    "data",
    [{1: "int key"}, {"when": __import__("datetime").date(2024, 1, 1)}, [float("nan")], {b"k"}],
)
def test_what_json_would_not_give_back_is_not_cached(cache, tmp_path, data):
    path = tmp_path / "a.yaml"
    parse = Counting(data)
    suitecache.load(path, "text", parse)
    suitecache.load(path, "text", parse)
    assert parse.calls == 2
    assert not suitecache.entry(path).exists()


def test_an_unwritable_cache_only_costs_the_parse(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache directory would be")
    monkeypatch.setenv(ENV_CACHE, str(blocker))
    parse = Counting({"x": 1})
    assert suitecache.load(tmp_path / "a.yaml", "text", parse) == {"x": 1}
    assert suitecache.load(tmp_path / "a.yaml", "text", parse) == {"x": 1}
    assert parse.calls == 2


@pytest.mark.parametrize("name", suite_names())
def test_built_in_suites_load_the_same_from_the_cache(cache, name):
    cold = load_suite(name)  # parsed by yaml, entry written
    assert suitecache.entry((SUITES_DIR / f"{name}.yaml").resolve()).exists()
    warm = load_suite(name)
    assert warm.runs and [vars(r) for r in warm.runs] == [vars(r) for r in cold.runs]  # eq=False
    assert dataclasses.replace(warm, runs=()) == dataclasses.replace(cold, runs=())


def test_a_failed_parse_is_never_cached(cache, tmp_path):
    def invalid(text):
        raise UsageError("a.yaml: not valid YAML at line 2")

    for _ in range(2):
        with pytest.raises(UsageError, match="not valid YAML at line 2"):
            suitecache.load(tmp_path / "a.yaml", "runs: [unclosed\n", invalid)
    assert not suitecache.entry(tmp_path / "a.yaml").exists()


def test_only_built_in_suites_are_cached(cache, tmp_path):
    """A user's suite file (often a temporary one) leaves no entry; a built-in one does."""
    mine = tmp_path / "mine.yaml"
    mine.write_text((SUITES_DIR / "tp.yaml").read_text())
    assert [vars(r) | {"where": ""} for r in load_suite(str(mine)).runs] == [
        vars(r) | {"where": ""} for r in load_suite("tp").runs
    ]
    assert [p.name for p in cache.iterdir()] == [
        suitecache.entry((SUITES_DIR / "tp.yaml").resolve()).name
    ]


def test_a_warm_read_imports_no_yaml(tmp_path):
    """A rank reading a suite it has read before never imports yaml (on the old form, with
    no cache, every read did: ~15 ms of CPU a rank)."""
    code = (
        "import sys; from commbench.traffic.suitefile import load_suite; "
        "load_suite('smoke'); print('yaml' in sys.modules)"
    )
    env = {"PYTHONPATH": str(REPO), ENV_CACHE: str(tmp_path), "PATH": "/usr/bin:/bin"}
    runs = [
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        for _ in range(2)
    ]
    assert [r.returncode for r in runs] == [0, 0], [r.stderr for r in runs]
    assert [r.stdout.strip() for r in runs] == ["True", "False"]
