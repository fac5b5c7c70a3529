import pytest

from commbench.errors import UsageError
from commbench.sizes import format_size, parse_size, parse_sizes, sweep


@pytest.mark.parametrize(
    "text,value",
    [
        ("8", 8),
        ("64K", 65536),
        ("256M", 256 << 20),
        ("1G", 1 << 30),
        ("1.5K", 1536),
        ("4KiB", 4096),
        ("2mb", 2 << 20),
    ],
)
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["12Q", "-1", "0", "", "1.3", "K", "1e3"])
def test_parse_size_rejects(text):
    with pytest.raises(UsageError):
        parse_size(text)


def test_sweep_factor_and_step():
    assert sweep(8, 64) == [8, 16, 32, 64]
    assert sweep(8, 100, 4) == [8, 32]
    assert sweep(8, 32, step=8) == [8, 16, 24, 32]
    with pytest.raises(UsageError, match="larger than"):
        sweep(1024, 8)
    with pytest.raises(UsageError):
        sweep(8, 64, factor=1)


def test_parse_sizes_sorted_unique():
    assert parse_sizes("1K,8,1K") == [8, 1024]


def test_format_size():
    assert format_size(8) == "8 B"
    assert format_size(65536) == "64 KiB"
    assert format_size(256 << 20) == "256 MiB"
