"""The launcher's output: records cut from byte streams, and what the console shows of them."""

from __future__ import annotations

import io
import logging

from hypothesis import given, settings, strategies as st

from tfdevices.jobs.console import (
    LINE,
    LOGGER,
    PROGRESS,
    PROGRESS_END,
    Console,
    ConsoleHandler,
    Record,
    Splitter,
    on_console,
    say,
)

# Keras' progress bar: "\r" + bar, the next update "\b" * width + "\r" + bar, the last one ends with "\n"
KERAS = b"Epoch 1/2\n\r1/3 [=>  ]\b\b\b\b\b\b\b\b\b\b\r2/3 [==> ]\b\b\b\b\b\b\b\b\b\b\r3/3 [===]\ndone\n"


def records(data: bytes, cuts: list[int] = ()) -> list[Record]:
    splitter, out, start = Splitter(), [], 0
    for cut in sorted(cuts) + [len(data)]:
        out += splitter.feed(data[start:cut])
        start = cut
    return out + splitter.close()


def test_keras_progress_is_progress_and_its_last_state_ends_it():
    assert records(KERAS) == [
        Record("Epoch 1/2"),
        Record("1/3 [=>  ]", PROGRESS),
        Record("2/3 [==> ]", PROGRESS),
        Record("3/3 [===]", PROGRESS_END),
        Record("done"),
    ]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200).map(lambda b: b + KERAS), st.lists(st.integers(0, 400), max_size=12))
def test_any_chunking_gives_the_same_records(data, cuts):
    assert records(data, [c for c in cuts if c <= len(data)]) == records(data)


def test_a_line_without_end_is_cut_and_memory_stays_bounded():
    splitter = Splitter(max_line=1000)
    out = []
    for _ in range(100):
        out += splitter.feed(b"x" * 100)
    assert len(out) == 9 and all(r.kind == LINE and len(r.text) > 1000 for r in out)
    assert len(splitter.close()) == 1


def test_invalid_utf8_is_replaced_not_raised():
    assert records(b"\xff\xfeok\n") == [Record("\ufffd\ufffdok")]


def show(console: Console, *items: tuple[int, bytes]) -> str:
    splitters: dict[int, Splitter] = {}
    for rank, data in items:
        for record in splitters.setdefault(rank, Splitter()).feed(data):
            console.show(rank, record)
    console.finish()
    return console.out.getvalue()


def test_pipe_shows_rank_0_progress_by_its_final_states_only():
    out = show(Console(io.StringIO()), (0, KERAS), (1, KERAS))
    assert out.splitlines() == ["[0] Epoch 1/2", "[0] 3/3 [===]", "[0] done", "[1] done"]


def test_all_ranks_shows_every_rank_progress():
    out = show(Console(io.StringIO(), progress_ranks=None, dedupe=False), (0, KERAS), (1, KERAS))
    assert "[0] 3/3 [===]" in out.splitlines() and "[1] 3/3 [===]" in out.splitlines()


def test_terminal_redraws_progress_in_place_and_keeps_it_last():
    console = Console(io.StringIO(), tty=True)
    out = show(console, (0, b"\r1/3\r2/3\r"), (1, b"hello\n"), (0, b"3/3\n"))
    assert out == (
        "\r\x1b[K[0] 1/3\r\x1b[K[0] 2/3"
        "\r\x1b[K[1] hello\n[0] 2/3"  # a line from another rank: above the progress line, redrawn
        "\r\x1b[K[0] 3/3\n"
    )


def test_a_warning_every_rank_prints_is_shown_once_other_lines_every_time():
    warning = b"/x/epoch_iterator.py:74: UserWarning: shuffle=True was passed\n  self.data_adapter = get(\n"
    out = show(
        Console(io.StringIO()),
        (0, warning + b"rank 0 ready\n"),
        (1, warning + b"rank 1 ready\n"),
        (1, b"ready\n"),
        (0, b"ready\n"),
        (0, b"WARNING:tensorflow:x\n"),
        (0, b"WARNING:tensorflow:x\n"),
    )
    assert out.splitlines() == [
        "[0] /x/epoch_iterator.py:74: UserWarning: shuffle=True was passed",
        "[0]   self.data_adapter = get(",
        "[0] rank 0 ready",
        "[1] rank 1 ready",
        "[1] ready",
        "[0] ready",
        "[0] WARNING:tensorflow:x",
        "[0] WARNING:tensorflow:x",
    ]  # one rank's repeats are its own: all shown


def test_tensorflow_start_up_lines_are_hidden_and_counted_unless_asked():
    noise = (
        b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
        b"I0000 00:00:1795416137.430329     899 cudart_stub.cc:31] Could not find cuda drivers\n"
        b"E0000 00:00:1795416148.220133     899 cuda_platform.cc:52] failed call to cuInit\n"
        b"F0000 00:00:1795416148.220133     899 x.cc:1] fatal: shown\n"
    )
    quiet = Console(io.StringIO())
    assert show(quiet, (0, noise)).splitlines() == ["[0] F0000 00:00:1795416148.220133     899 x.cc:1] fatal: shown"]
    assert quiet.hidden_tf_logs == 3
    assert len(show(Console(io.StringIO(), tf_logs=True), (0, noise)).splitlines()) == 4


def test_a_hidden_tensorflow_lines_source_location_trace_is_hidden_with_it():
    # tf-nightly 2.23's failed cuInit on a machine without a driver, as a launched worker printed it
    noise = (
        b"E0000 00:00:1795866183.577334   20715 cuda_platform.cc:57] failed call to cuInit: INTERNAL: CUDA error\n"
        b"=== Source Location Trace: === \n"
        b"external/xla/xla/stream_executor/cuda/cuda_status.cc:50\n"
        b"\n"
        b"tfdevices: no GPU visible: each worker trains on its CPU.\n"
        b"\n"
        b"external/mine.cc:1\n"
    )
    quiet = Console(io.StringIO())
    assert show(quiet, (0, noise)).splitlines() == [
        "[0] tfdevices: no GPU visible: each worker trains on its CPU.",
        "[0] ",
        "[0] external/mine.cc:1",  # the program's own lines, after a shown one, stay
    ]
    assert quiet.hidden_tf_logs == 1
    assert len(show(Console(io.StringIO(), tf_logs=True), (0, noise)).splitlines()) == 7


def test_ranks_filter_lines_but_not_the_launcher():
    console = Console(io.StringIO(), ranks=(0,))
    console.say("worker 1 failed")
    out = show(console, (0, b"zero\n"), (1, b"one\n"))
    assert out.splitlines() == ["[launcher] worker 1 failed", "[0] zero"]


class _Gone(io.StringIO):
    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def test_a_reader_going_away_closes_the_console_quietly():
    console = Console(_Gone())
    console.say("hello")
    console.show(0, Record("more"))
    assert console.closed


def test_say_goes_to_the_running_launchs_console_else_to_the_applications_handlers(caplog) -> None:
    # the one path the jobs' own lines take: the latest launch's console while it runs, else the application's
    # handlers (here pytest's; stderr where there are none: tests/test_logging.py, in processes of their own)
    outer, inner = io.StringIO(), io.StringIO()
    with caplog.at_level(logging.INFO, logger="tfdevices"):
        with on_console(Console(outer)):
            say("one")
            with on_console(Console(inner)):  # a launch inside a launch (a test's): its own console
                say("two")
            say("three")
        say("four")
    assert outer.getvalue().splitlines() == ["[launcher] one", "[launcher] three"]
    assert inner.getvalue().splitlines() == ["[launcher] two"]
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == [
        ("tfdevices.jobs", "INFO", text) for text in ("one", "two", "three", "four")
    ]  # a caller outside tfdevices.jobs: its logger is tfdevices.jobs itself
    assert not any(isinstance(h, ConsoleHandler) for h in LOGGER.handlers)  # each launch's handler left with it


def test_say_logs_under_its_callers_module(caplog) -> None:
    # a module of tfdevices.jobs that says a line: the record is its module's, where the call is
    namespace = {"__name__": "tfdevices.jobs.rendezvous", "say": say}
    exec(compile("def tell():\n    say('joined')\n", "rendezvous.py", "exec"), namespace)
    with caplog.at_level(logging.INFO, logger="tfdevices"):
        namespace["tell"]()
    (record,) = caplog.records
    assert (record.name, record.getMessage(), record.filename, record.lineno) == (
        "tfdevices.jobs.rendezvous",
        "joined",
        "rendezvous.py",
        2,
    )


def test_a_failing_console_is_said_by_logging_not_raised_into_the_job(monkeypatch) -> None:
    console = Console(io.StringIO())
    monkeypatch.setattr(console, "say", lambda text: 1 / 0)
    errors: list[logging.LogRecord] = []
    handler = ConsoleHandler(console)
    monkeypatch.setattr(handler, "handleError", errors.append)
    handler.handle(logging.LogRecord("tfdevices.jobs", logging.INFO, "x.py", 1, "hello", None, None))
    assert [r.getMessage() for r in errors] == ["hello"]
