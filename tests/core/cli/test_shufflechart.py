"""The shuffle chart's axis says where it ends (issue 58.10: the top tick read 3 or 4 where the axis ran to 3.3 or
4.4)."""

import re

from wds_core.cli.shufflechart import _panel, nice_top


def test_the_top_of_an_axis_is_a_round_number_at_or_above_the_data():
    for value in (0.7, 1.0, 3.0, 3.15, 4.4, 17.0, 120.0, 999.0):
        top = nice_top(value)
        assert value <= top <= 2.5 * value
        assert top == float(f"{top:g}")  # what its label says


def test_the_top_tick_is_the_axis_top():
    parts = _panel(60.0, "distinct shards a batch", [1.0, 2.0, 3.1, 2.5], [("global", 3.0, "grey")])
    labels = [float(x) for x in re.findall(r'text-anchor="end">([0-9.]+)</text>', "".join(parts))]
    assert labels[0] == 4.0 and labels[1] == 0.0  # 3.1 x 1.05 -> the axis runs to 4, and says 4
