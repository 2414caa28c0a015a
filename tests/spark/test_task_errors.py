"""A Spark task's error as the driver recovers it from the text Spark gives it (PySpark ships a
task's traceback as text): tidemark's own error, whatever its constructor takes, and the one line
that says why a job failed, whatever the exception class is called. No Spark needed: the texts
have the shapes Spark 4 gives."""

from __future__ import annotations

from tidemark.errors import MissingExtraError, TidemarkError, UnreadableRecordError
from tidemark.spark.task_errors import failure_line, task_error


def _failed_job(exception_line: str) -> Exception:
    """py4j's error for a collect whose task raised, its Python traceback ending in ``exception_line``."""
    return Exception(
        "An error occurred while calling o87.collectToPython.\n"
        ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 3.0 failed 1 times, "
        "most recent failure: Lost task 0.0 in stage 3.0 (TID 3) (host executor driver): "
        "org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
        '  File "/opt/tidemark/libs/tidemark/spark/compaction_job.py", line 55, in _reader\n'
        "    return SnapshotReader(task.open_table(task.location, task.s3))\n"
        "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
        f"{exception_line}\n"
        "\n"
        "\tat org.apache.spark.api.python.PythonRunner.handlePythonException(PythonRunner.scala:624)\n"
        "\tat org.apache.spark.api.python.PythonRunner$$anon$3.read(PythonRunner.scala:945)\n"
    )


def test_a_tasks_error_built_from_parts_comes_back_as_itself_with_its_message() -> None:
    """An executor without boto3 (the s3 extra) raised MissingExtraError, whose constructor takes
    what, module and extra: the driver raised a TypeError of its own and the reason was lost."""
    raised = MissingExtraError("opening s3://bucket/t", "boto3", "s3")
    got = task_error(_failed_job(f"tidemark.errors.MissingExtraError: {raised}"), TidemarkError)
    assert isinstance(got, MissingExtraError)
    assert str(got) == (
        "opening s3://bucket/t needs the Python package boto3, which is not installed: pip install 'tidemark[s3]'"
    )
    kafka = UnreadableRecordError("record 7 of events/0 fails its CRC check", "events", 0, 7)
    got = task_error(_failed_job(f"tidemark.errors.UnreadableRecordError: {kafka}"), TidemarkError)
    assert isinstance(got, UnreadableRecordError)
    assert str(got) == "record 7 of events/0 fails its CRC check"


def test_the_failure_line_is_the_tasks_exception_whatever_its_class_is_called() -> None:
    """pyarrow's ArrowInvalid ends in neither Error nor Exception: the write said only '... failed
    and was rolled back: An exception was thrown from the Python worker:'."""
    # the text Spark 4.3 gave for such a task, as it is
    arrow = Exception(
        "An exception was thrown from the Python worker:\nTraceback (most recent call last):\n"
        '  File "/opt/tidemark/libs/tidemark/spark/write_job.py", line 665, in _write_partition\n'
        '    plan.hooks.task_point("before_write", ctx.attempt)\n'
        '  File "/opt/hooks.py", line 11, in task_point\n'
        '    raise pa.lib.ArrowInvalid("offset overflow while concatenating arrays")\n'
        "pyarrow.lib.ArrowInvalid: offset overflow while concatenating arrays"
    )
    assert failure_line(arrow) == "pyarrow.lib.ArrowInvalid: offset overflow while concatenating arrays"
    assert failure_line(_failed_job("Unpicklable: holds a lock")) == "Unpicklable: holds a lock"
    assert failure_line(_failed_job("pyarrow.lib.ArrowInvalid")) == "pyarrow.lib.ArrowInvalid"  # no message
    assert failure_line(_failed_job("ValueError: bad value")) == "ValueError: bad value"
