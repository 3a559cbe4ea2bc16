"""Counts in text read in the singular for one and in the plural otherwise."""

from pdplan.wording import counted


def test_one_reads_in_the_singular_and_every_other_count_in_the_plural():
    assert [counted(n, "end-to-end check") for n in (0, 1, 2)] == [
        "0 end-to-end checks", "1 end-to-end check", "2 end-to-end checks"]


def test_a_noun_whose_plural_is_not_an_added_s_names_it_and_large_counts_have_separators():
    assert counted(1, "loss", "losses") == "1 loss"
    assert counted(1200, "loss", "losses") == "1,200 losses"
