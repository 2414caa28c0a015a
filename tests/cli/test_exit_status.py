"""The ``tidemark`` command's exit status is the command's, every time: a read that succeeded
once in a few dozen runs exited 134 (SIGABRT) after printing its rows, when Arrow's thread pools
were torn down at interpreter exit (apache/arrow#34314). A pipeline takes that for a failure."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import tidemark
from tests.support.table_builder import TableBuilder
from tidemark.storage import LocalStorage

RUNS = 40


def test_a_read_exits_zero_every_time(tmp_path: Path) -> None:
    builder = TableBuilder(LocalStorage(tmp_path))
    builder.insert(["a", "b", "c"], 1)
    builder.upsert(["a", "d"], 2)
    command = [sys.executable, "-m", "tidemark.cli.main", "table", "read", str(tmp_path), "--format", "jsonl"]

    def once(_: int) -> tuple[int, str, int]:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        return done.returncode, done.stderr.strip(), len(done.stdout.splitlines())

    # one after another: the abort depends on timing, and runs side by side hid it
    results = [once(i) for i in range(RUNS)]
    failed = [(code, err) for code, err, _ in results if code != 0]
    assert not failed, f"{len(failed)} of {RUNS} runs failed: {failed[:3]}"
    assert {lines for _, _, lines in results} == {4}


def test_errors_and_usage_keep_their_exit_status(tmp_path: Path) -> None:
    def status(*args: str) -> tuple[int, str]:
        done = subprocess.run([sys.executable, "-m", "tidemark.cli.main", *args], capture_output=True, text=True)
        return done.returncode, done.stderr

    code, err = status("table", "read", str(tmp_path / "nothing"))
    assert code == 1
    assert err.startswith("tidemark: error: not a Hudi table")
    code, err = status("table", "read")
    assert code == 2
    assert "the following arguments are required: path" in err
    assert status("--version")[0] == 0


def test_a_stdout_that_is_not_utf8_gets_valid_json_and_escapes_not_a_traceback(tmp_path: Path) -> None:
    """README: any error is one `tidemark: error:` line; a value or path the stdout's encoding
    lacked (LC_ALL=C without UTF-8 coercion, PYTHONIOENCODING=ascii) was a UnicodeEncodeError
    traceback. JSON lines stay JSON (\\u escapes), text prints Python's backslash escapes."""
    table = tmp_path / "tab_北京"
    TableBuilder(LocalStorage(table)).insert(["São Paulo 北京"], 1)
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}

    def run(*args: str) -> subprocess.CompletedProcess[bytes]:
        command = [sys.executable, "-m", "tidemark.cli.main", *args]
        return subprocess.run(command, capture_output=True, env=env, timeout=120, check=False)

    read = run("table", "read", str(table), "--format", "jsonl")
    assert read.returncode == 0, read.stderr.decode()
    assert [json.loads(line)["id"] for line in read.stdout.decode("ascii").splitlines()] == ["São Paulo 北京"]
    show = run("table", "show", str(table))
    assert show.returncode == 0, show.stderr.decode()
    assert show.stdout.decode("ascii").splitlines()[0].endswith(f"at {tmp_path}/tab_\\u5317\\u4eac")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("table", "read", "T", "--end", "20250101000000000"), "--end ends an incremental query: give --begin too"),
        (("table", "read", "T", "--as-of", "1", "--begin", "000"), "--as-of is a snapshot's"),
        (("events", "schema", "no.such.type"), "unknown event type 'no.such.type'"),
        (("events", "schema", "--version", "1"), "--version needs a TYPE"),
        (("write", "T", "--input", "in.jsonl", "--operation", "merge_update"), "merge_update needs --set"),
        (("write", "T", "--input", "in.jsonl", "--operation", "upsert", "--set", "v=v * 2"), "--set is merge_update's"),
    ],
)
def test_flags_that_do_not_go_together_are_a_usage_error(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    """README: exit 2 for a usage error. The checks argparse cannot make (flags that exclude or
    need one another, a TYPE it has no list of) exit 2 too, with the command's usage line."""
    argv = [str(tmp_path / "t") if a == "T" else a for a in args]
    done = subprocess.run([sys.executable, "-m", "tidemark.cli.main", *argv], capture_output=True, text=True)
    command = " ".join(a for a in args[:2] if not a.startswith("-") and a != "T")
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"usage: tidemark {command} ")
    assert f"tidemark {command}: error: {message}" in done.stderr


@pytest.mark.parametrize(
    ("args", "command", "extras"),
    [
        (("table", "read", "T", "--frmat", "jsonl"), "table read", "--frmat jsonl"),
        (("clean", "T", "--dryrun"), "clean", "--dryrun"),
        (("timeline", "T", "extra"), "timeline", "extra"),
        (("savepoint", "list", "T", "--jsn"), "savepoint list", "--jsn"),
    ],
)
def test_an_unknown_flag_or_extra_argument_is_reported_by_its_command(
    tmp_path: Path, args: tuple[str, ...], command: str, extras: str
) -> None:
    """README: a usage error prints the command's usage line, then `tidemark COMMAND: error:`; an
    unknown flag printed `tidemark`'s own usage and `tidemark: error:`, not the flags it meant."""
    argv = [str(tmp_path) if a == "T" else a for a in args]
    done = subprocess.run([sys.executable, "-m", "tidemark.cli.main", *argv], capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"usage: tidemark {command} ")
    assert done.stderr.splitlines()[-1] == f"tidemark {command}: error: unrecognized arguments: {extras}"


def test_spark_that_cannot_start_is_one_error_line_and_the_table_is_not_made(tmp_path: Path) -> None:
    import resource

    source = tmp_path / "in.jsonl"
    source.write_text('{"id": "a", "ts": 1}\n')
    table = tmp_path / "t"
    command = [sys.executable, "-m", "tidemark.cli.main", "write", str(table), "--input", str(source)]
    command += ["--operation", "insert", "--record-key", "id", "--precombine", "ts"]

    def few_open_files() -> None:  # a JVM cannot start on 64
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

    done = subprocess.run(command, capture_output=True, text=True, timeout=300, preexec_fn=few_open_files)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("tidemark: error: Spark (local[2]) could not start: ")
    assert "Traceback" not in done.stderr
    assert not table.exists()


def test_ctrl_c_during_a_write_is_one_line_exit_130_and_leaves_no_write_pending(tmp_path: Path) -> None:
    import time

    from tidemark.timeline import load_timeline

    storage = LocalStorage(tmp_path / "t")
    TableBuilder(storage).insert(["a", "b"], 1)
    source = tmp_path / "in.jsonl"
    source.write_text("".join(f'{{"id": "k{i}", "ts": 2, "v": 2, "p": "1"}}\n' for i in range(50)))
    before = {i.timestamp for i in load_timeline(storage)}
    command = [sys.executable, "-m", "tidemark.cli.main", "write", str(tmp_path / "t"), "--input", str(source)]
    write = _as_from_a_terminal([*command, "--operation", "upsert"])
    deadline = time.monotonic() + 240
    opened: list[str] = []
    while write.poll() is None and not opened:
        opened = [i.timestamp for i in load_timeline(storage) if i.timestamp not in before]
        assert time.monotonic() < deadline, "the write never opened its instant"
        time.sleep(0.05)
    if not _ctrl_c(write):  # the write ended on its own first: it tells nothing
        return
    out, err = write.communicate(timeout=240)
    assert write.returncode == 130, out + err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("tidemark: interrupted. A write that had started was rolled back")
    assert not load_timeline(storage).pending().instants  # rolled back (or committed just before)
    # nothing of it left behind, by tasks Spark had not yet stopped either (they ignore SIGINT)
    if not load_timeline(storage).is_completed(opened[0]):
        files = [p.name for p in (tmp_path / "t").rglob("*") if ".hoodie" not in p.parts]
        left = [name for name in files if ".tidemark-tmp" in name or f"_{opened[0]}." in name]
        assert not left, left


def _ctrl_c(process: subprocess.Popen[str], signum: int = signal.SIGINT) -> bool:
    """Ctrl-C to ``process``'s group, as a terminal sends it (or ``signum`` SIGTERM to the process
    alone, as Kubernetes or ``kill`` sends it), unless the process has ended on its own: False
    then. Checked with the group stopped, so the process cannot end between the check and the
    signal: a write that ended just before it (its result printed, the group alive while Spark's
    JVM lingers) exited 0 and looked like one whose Ctrl-C was lost."""
    import os
    import signal

    if process.returncode is not None:  # reaped already by a poll()
        return False
    os.killpg(process.pid, signal.SIGSTOP)
    try:
        # stopped, or ended before the stop: either is reported, and not reaped (Popen's is)
        ended = os.waitid(os.P_PID, process.pid, os.WEXITED | os.WSTOPPED | os.WNOWAIT)
        if ended is not None and ended.si_code != os.CLD_STOPPED:
            return False
        # pending until the group runs again
        if signum == signal.SIGINT:
            os.killpg(process.pid, signal.SIGINT)
        else:
            os.kill(process.pid, signum)
        return True
    finally:
        os.killpg(process.pid, signal.SIGCONT)


def _ctrl_c_once_the_job_writes(
    command: list[str], table: Path, delay: float, signum: int = signal.SIGINT
) -> tuple[int | None, str, str]:
    """Run ``command`` as a terminal does (its own process group, SIGINT at its default), press
    Ctrl-C (or send ``signum``, as :func:`_ctrl_c`) ``delay`` seconds after its Spark job wrote its
    first file, and return its exit status (None when it ended before the signal), stdout and stderr."""
    import glob
    import os
    import signal
    import time

    write = _as_from_a_terminal(command)
    try:
        deadline = time.monotonic() + 240
        # the write's first log file (or marker): its tasks are running
        while write.poll() is None and not glob.glob(f"{table}/*/.*log*") + glob.glob(f"{table}/.hoodie/.temp/*/*/*"):
            assert time.monotonic() < deadline, "the write's job never started"
            time.sleep(0.02)
        time.sleep(delay)
        interrupted = _ctrl_c(write, signum)
        out, err = write.communicate(timeout=240)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(write.pid, signal.SIGKILL)
    # done before the Ctrl-C: the run tells nothing
    return (write.returncode if interrupted else None), out, err


def test_ctrl_c_during_the_write_job_stops_it_uncommitted(tmp_path: Path) -> None:
    """PySpark's own SIGINT handler calls the JVM over the connection the driver is blocked on:
    the interrupt now and then came to nothing, and the write committed (exit 0) after the user's
    Ctrl-C. The moment matters: it is tried at a few points of the job."""
    from tidemark.table import read_snapshot
    from tidemark.timeline import DELTA_COMMIT, load_timeline

    storage = LocalStorage(tmp_path / "t")
    keys = [f"k{i}" for i in range(2000)]
    TableBuilder(storage).insert(keys, 1)
    values = {1}
    interrupted = 0
    for n, delay in enumerate((0.0, 0.5), start=2):
        source = tmp_path / f"in{n}.jsonl"
        source.write_text("".join(f'{{"id": "{k}", "ts": {n}, "v": {-n}, "p": "1"}}\n' for k in keys))
        command = [sys.executable, "-m", "tidemark.cli.main", "write", str(tmp_path / "t"), "--input", str(source)]
        commits = load_timeline(storage).of_actions(DELTA_COMMIT).instants
        code, out, err = _ctrl_c_once_the_job_writes([*command, "--operation", "upsert"], tmp_path / "t", delay)
        if code is None:  # the write ended before the Ctrl-C: it is committed, as without one
            values = {-n}
            continue
        assert "Traceback" not in err
        timeline = load_timeline(storage)
        assert not timeline.pending().instants  # neither way is the write left pending
        if code == 0:  # the Ctrl-C came once the commit had begun: it finished, and says so
            assert "Ctrl-C came while the write" in err, out + err
            assert len(timeline.of_actions(DELTA_COMMIT).instants) == len(commits) + 1
            values = {-n}
        else:
            assert code == 130, out + err
            last = err.strip().splitlines()[-1]
            assert last.startswith("tidemark: interrupted. A write that had started was rolled back"), err
            assert timeline.of_actions(DELTA_COMMIT).instants == commits  # not committed
            interrupted += 1
        assert set(read_snapshot(storage).column("v").to_pylist()) == values
    assert interrupted  # at the start of the job at least, the Ctrl-C stops the write


def test_an_error_py4j_raised_while_it_handled_a_ctrl_c_ends_as_the_interrupt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C that lands while Python waits on the JVM reaches the write as py4j's error
    (``Gateway must be connected to send cancel cmd.``), raised while py4j handled the interrupt:
    CI saw the write say it failed (exit 1) instead of that it was interrupted (130)."""
    from py4j.protocol import Py4JError

    from tidemark.cli import table as table_cli
    from tidemark.cli.main import CommandInterrupted, main
    from tidemark.spark.write_job import WriteFailedError

    def interrupted_in_py4j(_: object, out: object) -> int:
        try:
            try:
                raise KeyboardInterrupt
            except KeyboardInterrupt:  # as py4j's send_command handles one
                raise Py4JError("Gateway must be connected to send cancel cmd.")  # noqa: B904
        except Py4JError as e:
            raise WriteFailedError("the write 1 failed and was rolled back: " + str(e)) from e

    monkeypatch.setattr(table_cli, "run_timeline", interrupted_in_py4j)
    monkeypatch.setattr(table_cli, "run_compact", interrupted_in_py4j)
    with pytest.raises(CommandInterrupted) as stopped:
        main(["timeline", str(tmp_path)])
    # a command that only reads has nothing to say of the table
    assert stopped.value.message == "tidemark: interrupted."
    with pytest.raises(CommandInterrupted) as stopped:
        main(["compact", str(tmp_path)])
    assert stopped.value.message.startswith("tidemark: interrupted. A write that had started was rolled back")


def test_py4js_logs_of_a_stopped_wait_on_the_jvm_are_dropped_and_its_other_errors_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A SIGTERM, then a second signal, during a Spark write printed py4j's ``ERROR`` log with two
    tracebacks (``Terminated``, then ``BrokenPipeError``) above the command's one line: the filter
    sat on the root logger, which never sees the records py4j's own loggers hand up."""
    from tidemark.cli.main import PY4J_LOGGERS, quiet_py4j_interrupt_noise
    from tidemark.errors import Terminated

    quiet_py4j_interrupt_noise()
    caplog.set_level(logging.ERROR)
    for name in PY4J_LOGGERS:
        logger = logging.getLogger(name)
        try:
            try:
                raise Terminated
            except Terminated:  # as py4j's shutdown_socket fails while the interrupt unwinds
                raise BrokenPipeError(32, "Broken pipe")  # noqa: B904
        except BrokenPipeError:
            logger.exception("Exception occurred while shutting down connection")
        try:
            raise ConnectionResetError(104, "Connection reset by peer")
        except ConnectionResetError:  # the JVM gone for another reason: still said
            logger.exception("An error occurred while trying to connect to the Java server")
    assert [(r.name, r.getMessage()) for r in caplog.records] == [
        (name, "An error occurred while trying to connect to the Java server") for name in PY4J_LOGGERS
    ]


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
            except (OSError, ValueError, IndexError):
                continue
    return found


def test_ctrl_c_while_spark_starts_leaves_no_jvm_holding_the_output(tmp_path: Path) -> None:
    import os
    import signal
    import time

    builder = TableBuilder(LocalStorage(tmp_path / "t"))
    builder.insert(["a", "b"], 1)
    builder.update(["a"], 2)  # a log file: the compaction starts Spark
    command = [sys.executable, "-m", "tidemark.cli.main", "compact", str(tmp_path / "t")]
    compact = _as_from_a_terminal(command)
    try:
        deadline = time.monotonic() + 120
        while compact.poll() is None and not _children(compact.pid):  # Spark's JVM is starting
            assert time.monotonic() < deadline, "Spark never started"
            time.sleep(0.02)
        os.killpg(compact.pid, signal.SIGINT)
        # a JVM left running holds the pipes open: reading them to the end never returned
        _, err = compact.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(compact.pid, signal.SIGKILL)
    assert compact.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("tidemark: interrupted.")


def test_ctrl_c_while_the_command_loads_is_one_line_and_exit_130() -> None:
    """The interrupt landed while the entry point imported the commands' modules (pyarrow, boto3:
    a fraction of a second), and ended as a Python traceback. A finder that raises it at that
    import stands in for the Ctrl-C, which no test can time so closely."""
    stand_in = (
        "import sys\n"
        "class Interrupt:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'tidemark.cli.main':\n"
        "            raise KeyboardInterrupt\n"
        "sys.meta_path.insert(0, Interrupt())\n"
        "from tidemark.cli import run\n"
        "sys.argv = ['tidemark', 'timeline', '.']\n"
        "run()\n"
    )
    done = subprocess.run([sys.executable, "-c", stand_in], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (130, "tidemark: interrupted.\n")


def test_sigterm_during_a_write_is_one_line_exit_143_and_leaves_nothing_in_the_way(tmp_path: Path) -> None:
    """Kubernetes stops a pod with SIGTERM. The command handled only Ctrl-C: a SIGTERM killed it at
    once, with nothing said, its write left inflight with a live heartbeat (no rollback for two
    minutes) and, had it held the table lock, the lease held for a minute. It ends as on a Ctrl-C."""
    import time

    from tidemark.table.lock import LOCK_PATH, Lease
    from tidemark.timeline import DELTA_COMMIT, load_timeline

    storage = LocalStorage(tmp_path / "t")
    keys = [f"k{i}" for i in range(2000)]
    TableBuilder(storage).insert(keys, 1)
    (first,) = load_timeline(storage).of_actions(DELTA_COMMIT).instants
    source = tmp_path / "in.jsonl"
    source.write_text("".join(f'{{"id": "{k}", "ts": 2, "v": 2, "p": "1"}}\n' for k in keys))
    command = [sys.executable, "-m", "tidemark.cli.main", "write", str(tmp_path / "t"), "--input", str(source)]
    code, out, err = _ctrl_c_once_the_job_writes(
        [*command, "--operation", "upsert"], tmp_path / "t", 0.0, signal.SIGTERM
    )
    if code is None:  # the write ended before the SIGTERM: it tells nothing
        return
    assert "Traceback" not in err
    if code == 0:  # the SIGTERM came once the commit had begun: it finished, and says so
        assert "SIGTERM came while the write" in err, out + err
    else:
        assert code == 143, out + err
        last = err.strip().splitlines()[-1]
        assert last.startswith("tidemark: terminated (SIGTERM). A write that had started was rolled back"), err
    assert not load_timeline(storage).pending().instants  # rolled back, not left inflight
    heartbeats = tmp_path / "t" / ".hoodie" / ".heartbeat"
    assert not (heartbeats.exists() and list(heartbeats.iterdir()))
    if (tmp_path / "t" / LOCK_PATH).exists():  # taken by the rollback: given up
        assert Lease.from_bytes(storage.read(LOCK_PATH), LOCK_PATH).released
    started = time.monotonic()
    after = tidemark("savepoint", "create", str(tmp_path / "t"), first.timestamp, timeout=120)
    assert after.returncode == 0, after.stderr
    assert "waiting for the table lock" not in after.stderr
    assert time.monotonic() - started < 30  # not the lease's minute


def test_sigterm_stops_the_command_running_as_pid_1(tmp_path: Path) -> None:
    """The operator's compaction Job runs ``tidemark`` as its container's PID 1, with no init: the
    kernel drops a signal PID 1 has no handler for, so the Job's SIGTERM did nothing and the command
    ran on until its SIGKILL. Shown with a command waiting for a table lock held elsewhere."""
    import shutil
    import time

    from tidemark.table.concurrency import ConcurrencyConfig
    from tidemark.table.lock import TableLock
    from tidemark.timeline import DELTA_COMMIT, load_timeline

    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("no unshare(1) to run the command as PID 1 of a PID namespace")
    # --kill-child: the command does not outlive a failed test
    namespace = [unshare, "--pid", "--fork", "--mount-proc", "--kill-child"]
    probe = subprocess.run([*namespace, "true"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"unshare --pid is not permitted here (root needed): {probe.stderr.strip()}")
    storage = LocalStorage(tmp_path / "t")
    TableBuilder(storage).insert(["a", "b"], 1)
    (first,) = load_timeline(storage).of_actions(DELTA_COMMIT).instants
    command = [sys.executable, "-m", "tidemark.cli.main", "savepoint", "create", str(tmp_path / "t"), first.timestamp]
    log = tmp_path / "stderr"
    with TableLock(storage, ConcurrencyConfig()), log.open("w") as stderr:
        waiting = subprocess.Popen([*namespace, *command], stderr=stderr)
        try:
            deadline = time.monotonic() + 60
            while "waiting for the table lock" not in log.read_text():  # said after 2 s of waiting
                assert waiting.poll() is None, f"the command ended without waiting for the lock: {log.read_text()}"
                assert time.monotonic() < deadline, "the command never said it waited for the lock"
                time.sleep(0.1)
            (pid_1,) = _children(waiting.pid)  # tidemark, PID 1 in its namespace
            assert Path(f"/proc/{pid_1}/status").read_text().split("NSpid:")[1].split("\n")[0].split()[-1] == "1"
            os.kill(pid_1, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                waiting.wait(timeout=20)  # the lock is held for a minute yet: it would wait on
        finally:
            with contextlib.suppress(ProcessLookupError):
                waiting.kill()
            waiting.wait()
    err = log.read_text()
    assert waiting.returncode == 143, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("tidemark: terminated (SIGTERM). A write that had started")


def test_a_command_writes_to_the_stdout_of_when_it_runs(tmp_path: Path) -> None:
    """The commands took ``sys.stdout`` as it was when their module was imported: a caller that
    redirected it afterwards (a notebook's capture, a second test's) got nothing, or wrote to a
    closed file."""
    import io

    from tidemark.cli.main import main

    TableBuilder(LocalStorage(tmp_path)).insert(["a", "b"], 1)
    for _ in range(2):  # each call to its own stream
        shown = io.StringIO()
        with contextlib.redirect_stdout(shown):
            assert main(["table", "read", str(tmp_path), "--format", "jsonl"]) == 0
        assert len(shown.getvalue().splitlines()) == 2


def _as_from_a_terminal(command: list[str]) -> subprocess.Popen[str]:
    """``command`` started as a terminal starts it: its own process group (a Ctrl-C reaches all
    of it), SIGINT at its default."""
    import signal

    return subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
