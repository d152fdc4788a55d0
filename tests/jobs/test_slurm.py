"""SLURM's formats under hostile input: bounded before expansion, ASCII digits only, linear."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from tests.helpers import peak_allocation
from tfdevices import EnvVarError, LaunchError, TfDevicesError
from tfdevices.jobs.slurm import MAX_GPUS, MAX_HOSTS, MAX_TASKS, expand_nodelist, expand_tasks_per_node, parse_gpu_list


@pytest.mark.parametrize(
    "text, expected",
    [
        ("node[01-03],gpu7", ["node01", "node02", "node03", "gpu7"]),
        ("r[1-2]n[8,10]", ["r1n8", "r1n10", "r2n8", "r2n10"]),
        (" a , b ", ["a", "b"]),
        ("n[098-101]", ["n098", "n099", "n100", "n101"]),
        ("x", ["x"]),
    ],
)
def test_node_lists(text, expected):
    assert expand_nodelist(text) == expected


@pytest.mark.parametrize(
    "text, first_words",
    [
        ("n[0-10000000]", "SLURM_STEP_NODELIST names more than 100,000 hosts."),
        ("n[0-999]x[0-999]", "SLURM_STEP_NODELIST names more than 100,000 hosts."),
        (
            "n[0-99999999999]",
            "SLURM_STEP_NODELIST: entry 1 of a bracket is not a number or a range 'a-b' (ASCII digits, at most 9 ",
        ),
        (
            "n[\u0663]",
            "SLURM_STEP_NODELIST: entry 1 of a bracket is not a number or a range 'a-b' (ASCII digits, at most 9 ",
        ),
        (
            "n[1-\uff13]",
            "SLURM_STEP_NODELIST: entry 1 of a bracket is not a number or a range 'a-b' (ASCII digits, at most 9 ",
        ),
        ("n[3-1]", "SLURM_STEP_NODELIST: range 1 of a bracket runs backwards."),
        ("n[1-3],n2", "SLURM_STEP_NODELIST: host 4 of the 4 it names repeats host 2."),
        ("n[1-2", "SLURM_STEP_NODELIST has unbalanced brackets."),
        ("n]", "SLURM_STEP_NODELIST has unbalanced brackets."),
        ("n[[1]]", "SLURM_STEP_NODELIST has unbalanced brackets."),
        ("a,,b", "SLURM_STEP_NODELIST has an empty host name."),
        ("", "SLURM_STEP_NODELIST has an empty host name."),
        ("n[]", "SLURM_STEP_NODELIST: entry 1 of a bracket is not a number or a range 'a-b' (ASCII digits, at most 9 "),
        ("h" * 2_000_000, "SLURM_STEP_NODELIST is longer than 1,048,576 characters."),
        (",".join(f"h{i}" for i in range(MAX_HOSTS + 1)), "SLURM_STEP_NODELIST names more than 100,000 hosts."),
    ],
)
def test_bad_node_lists(text, first_words):
    with pytest.raises(LaunchError) as err:
        expand_nodelist(text)
    message = str(err.value)
    assert message.startswith(first_words) and "HINT:" in message
    assert len(message) < 400


def test_node_list_limit_is_exact():
    assert len(expand_nodelist(f"n[1-{MAX_HOSTS}]")) == MAX_HOSTS
    with pytest.raises(LaunchError, match="more than"):
        expand_nodelist(f"n[0-{MAX_HOSTS}]")


def test_repeats_in_a_long_list_are_found_and_listed_shortly():
    with pytest.raises(LaunchError) as err:
        expand_nodelist("n[00000-15999],n[00000-15999]")
    assert "host 16,001 of the 32,000 it names repeats host 1." in str(err.value)


@pytest.mark.parametrize("text, expected", [("2(x3),1", [2, 2, 2, 1]), ("4", [4]), (" 1(x2) ", [1, 1])])
def test_tasks_per_node(text, expected):
    assert expand_tasks_per_node(text) == expected


@pytest.mark.parametrize(
    "text, first_words",
    [
        ("1(x100000000)", "SLURM_STEP_TASKS_PER_NODE describes more than 100,000 nodes or 10,000,000 tasks."),
        ("100000000(x100000)", "SLURM_STEP_TASKS_PER_NODE describes more than 100,000 nodes or 10,000,000 tasks."),
        ("\u0663", "entry 1 of SLURM_STEP_TASKS_PER_NODE is not 'N' or 'N(xM)' with N, M >= 1 (ASCII digits)."),
        ("2(x\u0663)", "entry 1 of SLURM_STEP_TASKS_PER_NODE is not 'N' or 'N(xM)' with N, M >= 1 (ASCII digits)."),
        ("1(x0)", "entry 1 of SLURM_STEP_TASKS_PER_NODE is not 'N' or 'N(xM)' with N, M >= 1 (ASCII digits)."),
        ("0", "entry 1 of SLURM_STEP_TASKS_PER_NODE is not 'N' or 'N(xM)' with N, M >= 1 (ASCII digits)."),
        ("9" * 50, "entry 1 of SLURM_STEP_TASKS_PER_NODE is not 'N' or 'N(xM)' with N, M >= 1 (ASCII digits)."),
    ],
)
def test_bad_tasks_per_node(text, first_words):
    with pytest.raises(LaunchError) as err:
        expand_tasks_per_node(text)
    assert str(err.value).startswith(first_words) and "HINT:" in str(err.value)


@pytest.mark.parametrize(
    "text, first_words",
    [
        ("0-100000000", "entry 1 of SLURM_STEP_GPUS is past the last GPU index a node can have (1023)."),
        ("0-99999999999", "entry 1 of SLURM_STEP_GPUS is not a GPU index or range (ASCII digits)."),
        ("\u0663", "entry 1 of SLURM_STEP_GPUS is not a GPU index or range (ASCII digits)."),
        ("0,0", "SLURM_STEP_GPUS names the same GPU more than once."),
        ("0-3,2", "SLURM_STEP_GPUS names the same GPU more than once."),
        ("gpu:2(IDX:0-1),gpu:1(IDX:1)", "SLURM_STEP_GPUS names the same GPU more than once."),
        ("gpu:\u0662(IDX:0-1)", "SLURM_STEP_GPUS: GRES entry 1 is not 'gpu[:type]:N(IDX:list)'."),
        (",".join(["0-1023"] * 200), "SLURM_STEP_GPUS names the same GPU more than once."),
    ],
)
def test_bad_gpu_lists(text, first_words):
    with pytest.raises(EnvVarError) as err:
        parse_gpu_list(text)
    assert str(err.value).startswith(first_words) and "HINT:" in str(err.value)
    assert len(str(err.value)) < 400


def test_largest_gpu_list_is_accepted():
    assert parse_gpu_list(f"0-{MAX_GPUS - 1}").indices == list(range(MAX_GPUS))


# ---------------------------------------------------------------- fuzzing: only our errors, bounded results

_NODE_ALPHABET = "nodegpu0123456789[],-x \u0663\uff11"


@settings(max_examples=400, deadline=None)
@given(
    st.one_of(
        st.text(alphabet=_NODE_ALPHABET, max_size=40),
        st.builds(
            lambda p, a, b: f"{p}[{a}-{b}]",
            st.sampled_from(["n", "r1n", ""]),
            st.integers(0, 10**10),
            st.integers(0, 10**10),
        ),
        st.builds(lambda a, b, c, d: f"n[{a}-{b}]m[{c}-{d}]", *[st.integers(0, 10**6)] * 4),
    )
)
def test_fuzz_node_lists(text):
    try:
        hosts = expand_nodelist(text)
    except TfDevicesError as err:
        assert isinstance(err, LaunchError) and "HINT:" in str(err) and len(str(err)) < 600
    else:
        assert 1 <= len(hosts) <= MAX_HOSTS
        assert len(set(hosts)) == len(hosts)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(alphabet="0123456789(x),\u0663 ", max_size=30),
        st.lists(
            st.builds(lambda n, m: f"{n}(x{m})", st.integers(0, 10**9), st.integers(0, 10**9)), min_size=1, max_size=5
        ).map(",".join),
    )
)
def test_fuzz_tasks_per_node(text):
    try:
        counts = expand_tasks_per_node(text)
    except TfDevicesError as err:
        assert isinstance(err, LaunchError) and "HINT:" in str(err)
    else:
        assert len(counts) <= MAX_HOSTS and sum(counts) <= MAX_TASKS and min(counts) >= 1


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(alphabet="0123456789,-()nul\u0663gpu:IDXa ", max_size=40),
        st.builds(lambda a, b: f"{a}-{b}", st.integers(0, 10**12), st.integers(0, 10**12)),
    )
)
def test_fuzz_gpu_lists(text):
    try:
        indices, _ = parse_gpu_list(text)
    except TfDevicesError as err:
        assert isinstance(err, EnvVarError) and "HINT:" in str(err)
    else:
        assert len(indices) == len(set(indices)) <= MAX_GPUS
        assert all(0 <= i < MAX_GPUS for i in indices)


@pytest.mark.parametrize(
    "parse, text",
    [
        (expand_nodelist, "n[0-99999]x[0-99999]"),
        (expand_nodelist, "n[0-999999999]"),
        (expand_tasks_per_node, "999999999(x999999999)"),
        (parse_gpu_list, "0-999999999"),
    ],
)
def test_hostile_sizes_are_refused_without_allocating(parse, text):
    def refuse() -> None:
        with pytest.raises(TfDevicesError):
            parse(text)

    peak = peak_allocation(refuse)
    assert peak < 1 << 20, f"{peak} bytes allocated to refuse {text!r}"


def test_parsers_read_slurms_formats() -> None:
    assert expand_nodelist("gpu-a[09-11]") == ["gpu-a09", "gpu-a10", "gpu-a11"]
    assert expand_nodelist("n[1-2,5],x") == ["n1", "n2", "n5", "x"]
    assert expand_tasks_per_node("4") == [4]
    assert parse_gpu_list("") == ([], [])
    assert parse_gpu_list("gpu:1(IDX:N/A)") == ([], [])
    indices, notes = parse_gpu_list("(null)", variable="GPU_DEVICE_ORDINAL")
    assert indices == [] and "(null)" in notes[0]
    assert parse_gpu_list("gpu:a100:2(IDX:0,2),shard:4(0/4)").indices == [0, 2]
