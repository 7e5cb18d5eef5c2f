"""Byte sizes (mggcn.utils.units): the one parser of ``--memory``, ``--memory-limit``, ``--tile-bytes``, ..."""

import pytest

from mggcn.utils.errors import ConfigError
from mggcn.utils.units import format_bytes, parse_bytes


@pytest.mark.parametrize("text, value", [("80G", 80 << 30), ("141GiB", 141 << 30), ("512m", 512 << 20),
                                         ("4 MB", 4 << 20), ("1.5g", 3 << 29), ("1e9", 10**9), ("65536", 65536),
                                         ("0", 0), (2048, 2048)])
def test_sizes_as_people_write_them(text, value):
    assert parse_bytes(text) == value


@pytest.mark.parametrize("text", ["lots", "12X", "", "1..5G", "-1G"])
def test_what_is_not_a_size_is_refused_naming_the_option(text):
    with pytest.raises(ConfigError, match=f"memory_limit: expected a size .*got '{text}'") as err:
        parse_bytes(text, "memory_limit")
    assert err.value.option == "memory_limit"
    with pytest.raises(ValueError, match="^expected a size"):  # without an option, the bare message
        parse_bytes(text)


def test_format_bytes():
    assert [format_bytes(n) for n in (512, 1536, 3 << 20, 5 << 30, 2 << 40)] == [
        "512 B", "1.50 KiB", "3.00 MiB", "5.00 GiB", "2.00 TiB"]
