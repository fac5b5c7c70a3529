"""The routed-counts cache (traffic/routecache.py): a hit gives the draw's counts exactly,
every option the draw reads is in the key, a broken or unwritable cache is passed by, and a
warm rank builds an EP program without importing numpy.random."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pytest

from commbench import ENV_CACHE
from commbench.traffic.patterns import ep

from conftest import REPO

SHAPE = (96, 16, 2, 4)  # tokens, experts, top_k, sources


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_CACHE, str(tmp_path / "cache"))
    return tmp_path / "cache" / "routes"


@pytest.mark.parametrize("router", ep.ROUTERS)
def test_a_hit_is_the_draw_itself(cache, router):
    opts = ep.Options(router=router, groups=4, group_limit=2)
    drawn = ep._route(opts, *SHAPE)
    cold = ep.route(opts, *SHAPE)
    assert len(list(cache.glob("*.json"))) == 1
    warm = ep.route(opts, *SHAPE)
    for got in (cold, warm):
        assert got.dtype == np.int64 and np.array_equal(got, drawn)


@pytest.mark.parametrize(
    "change",
    [
        {"router": "dirichlet"},
        {"seed": 7},
        {"zipf_s": 2.0},
        {"dirichlet_alpha": 0.3},
        {"groups": 2, "group_limit": 1},
        {"group_limit": 1},
    ],
)
def test_every_option_the_draw_reads_keys_the_entry(cache, change):
    base = ep.Options(router="dirichlet" if "dirichlet_alpha" in change else "zipf", groups=4)
    other = dataclasses.replace(base, **change)
    ep.route(base, *SHAPE)
    assert np.array_equal(ep.route(other, *SHAPE), ep._route(other, *SHAPE))
    assert len(list(cache.glob("*.json"))) == 2


def test_another_shape_is_another_entry(cache):
    opts = ep.Options(router="zipf")
    ep.route(opts, *SHAPE)
    bigger = (SHAPE[0] * 2, *SHAPE[1:])
    assert np.array_equal(ep.route(opts, *bigger), ep._route(opts, *bigger))
    assert ep.route(opts, *bigger).sum() == bigger[0] * bigger[2] * bigger[3]


def test_a_broken_entry_is_drawn_again_and_rewritten(cache):
    opts = ep.Options(router="zipf")
    ep.route(opts, *SHAPE)
    (entry,) = cache.glob("*.json")
    entry.write_text('{"key": ')
    assert np.array_equal(ep.route(opts, *SHAPE), ep._route(opts, *SHAPE))
    assert entry.read_text().startswith('{"key": "')


def test_an_unwritable_cache_is_passed_by(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv(ENV_CACHE, str(tmp_path / "file"))  # a file where the folder would be
    opts = ep.Options(router="zipf")
    assert np.array_equal(ep.route(opts, *SHAPE), ep._route(opts, *SHAPE))


def test_a_warm_rank_never_imports_numpy_random(tmp_path):
    code = (
        "import sys; from commbench.traffic.patterns import ep; "
        f"c = ep.route(ep.Options(router='zipf'), *{SHAPE!r}); "
        "print(int(c.sum()), 'numpy.random' in sys.modules)"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), ENV_CACHE: str(tmp_path)}
    runs = [
        subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        for _ in range(2)
    ]
    total = SHAPE[0] * SHAPE[2] * SHAPE[3]
    assert [r.stdout.split() for r in runs] == [[str(total), "True"], [str(total), "False"]], [
        r.stderr for r in runs
    ]


def test_routing_expected_prices_the_mean(cache):
    """routing: expected (issue 31, defect 9): uniform gives T k / E per expert exactly; a
    skewed router the mean of EXPECT_DRAWS draws, each source still sending T k; its own
    cache entry beside the single draw's."""
    tokens, experts, top_k, sources = SHAPE
    flat = ep.route(ep.Options(routing="expected"), *SHAPE)
    assert (flat == tokens * top_k // experts).all()
    skew = ep.Options(router="zipf", routing="expected")
    mean = ep.route(skew, *SHAPE)
    assert (mean.sum(axis=1) == tokens * top_k).all()
    draws = [ep._draw(skew, *SHAPE, [0, 1, j]) for j in range(ep.EXPECT_DRAWS)]
    assert np.abs(mean - np.mean(draws, axis=0)).max() <= 1
    one = ep.route(ep.Options(router="zipf"), *SHAPE)
    assert not np.array_equal(one, mean)
    assert len(list(cache.glob("*.json"))) == 3
    with pytest.raises(Exception, match="routing 'mean': choose from draw, expected"):
        ep.Options(routing="mean")
