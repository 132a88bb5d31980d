"""Job array expressions (``--array``, a job file's ``array:``): what each form means, and that
every mistake is an error naming what is wrong and how to write it."""

from __future__ import annotations

import pytest

from shoal.spec.arrays import MAX_ARRAY_INDEX, MAX_ARRAY_SIZE, ArrayError, parse_array
from shoal.spec.errors import SpecError
from shoal.spec.loader import load_job_text


@pytest.mark.parametrize(
    ("text", "indices", "cap"),
    [
        ("0-9", list(range(10)), None),
        ("0-999%50", list(range(1000)), 50),
        ("1,3,5-9", [1, 3, 5, 6, 7, 8, 9], None),
        ("0-99:2", list(range(0, 100, 2)), None),
        ("0-15:4%2", [0, 4, 8, 12], 2),
        ("7", [7], None),
        ("9,3,3,5-6", [3, 5, 6, 9], None),  # sorted, each index once (as Slurm's bitmap)
        (" 0 - 3 % 1 ", [0, 1, 2, 3], 1),  # spaces are ignored
        (f"0-{MAX_ARRAY_SIZE - 1}", list(range(MAX_ARRAY_SIZE)), None),
        (f"{MAX_ARRAY_INDEX}", [MAX_ARRAY_INDEX], None),
    ],
)
def test_expressions_give_their_indices_and_cap(text: str, indices: list[int], cap: int) -> None:
    array = parse_array(text)
    assert list(array.indices) == indices
    assert array.cap == cap
    assert (array.first, array.last, array.size) == (indices[0], indices[-1], len(indices))


def test_running_at_once_is_the_cap_or_the_size() -> None:
    assert parse_array("0-9%3").running_at_once == 3
    assert parse_array("0-1%50").running_at_once == 2
    assert parse_array("0-9").running_at_once == 10


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("", "is empty"),
        ("0-", "'0-' is not an index"),
        ("a-b", "'a-b' is not an index"),
        ("1,,2", "'(nothing)' is not an index"),
        ("9-5", "the range 9-5 runs backwards"),
        ("0-9:0", "the step of 0-9:0 must be at least 1"),
        ("0-9%0", "the cap %0 must be at least 1"),
        ("0-9%", "the cap % is not a number"),
        ("0-9%x", "the cap %x is not a number"),
        ("0-9%5%5", "the cap %5%5 is not a number"),
        ("0-10000", "0-10000 has 10,001 elements; an array has at most 10,000"),
        ("0-999999999999", "index 999999999999 is above the largest allowed index"),
        ("-1", "'-1' is not an index"),
    ],
)
def test_mistakes_say_what_is_wrong_and_how_to_write_it(text: str, said: str) -> None:
    with pytest.raises(ArrayError) as caught:
        parse_array(text)
    assert said in caught.value.message
    assert caught.value.hint  # every error says how to fix it
    assert caught.value.hint in str(caught.value)


def test_a_huge_range_is_refused_before_it_is_built() -> None:
    with pytest.raises(ArrayError, match="has 1,000,000 elements"):
        parse_array(f"0-{MAX_ARRAY_INDEX}")


JOB = "version: 1\nname: sweep\narray: {array}\nroles:\n  w:\n    command: 'true'\n"


def test_a_native_job_file_may_carry_its_array() -> None:
    (job,) = load_job_text(JOB.format(array="'0-99%10'"), {}).jobs
    assert job.array == "0-99%10"
    (single,) = load_job_text(JOB.format(array="5"), {}).jobs  # YAML reads it as an int
    assert single.array == "5"


def test_a_bad_array_in_a_job_file_names_the_field() -> None:
    with pytest.raises(SpecError) as caught:
        load_job_text(JOB.format(array="'9-5'"), {})
    (problem,) = caught.value.problems
    assert problem.path == "array"
    assert "runs backwards" in problem.message and problem.hint == "write 5-9"
