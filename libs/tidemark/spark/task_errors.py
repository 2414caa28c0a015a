"""tidemark's errors raised in Spark tasks, recovered on the driver: Spark hands the driver its
own exception with the task's Python traceback as text, whose last line names the error."""

from __future__ import annotations

import re
from typing import TypeVar

from tidemark.errors import TidemarkError

E = TypeVar("E", bound=TidemarkError)


def task_error(error: BaseException, kind: type[E]) -> E | None:
    """The ``kind`` error (or one of its subclasses) that a task raised, from a failed Spark
    job's error text; None when the job failed for another reason."""
    if isinstance(error, kind):
        return error
    text = str(error)
    for cls in (*_subclasses(kind), kind):  # the most specific first
        marker = f"{cls.__module__}.{cls.__name__}: "
        if marker in text:
            return _rebuilt(cls, text.split(marker, 1)[1].splitlines()[0])
    return None


def _rebuilt(cls: type[E], message: str) -> E:
    """A ``cls`` error saying ``message``: made by its constructor where that takes the message
    alone; else (a class that composes its message from parts, as MissingExtraError does) made
    without it, the message being the one the task's constructor composed. Such an error lacks
    the attributes its parts would have set; its type and its message are what callers read."""
    try:
        return cls(message)
    except TypeError:
        return cls.__new__(cls, message)  # BaseException.__new__ sets args: str() is the message


def _subclasses(kind: type[E]) -> list[type[E]]:
    found: list[type[E]] = []
    for sub in kind.__subclasses__():
        found += [*_subclasses(sub), sub]
    return found


_TRACEBACK = "Traceback (most recent call last):"
#: how py4j's error about a failed JVM call begins; its next line is the JVM's exception
_PY4J_CALL = "An error occurred while calling "
#: a traceback's exception line, ``[module.]Name[: message]``: the first line after the traceback's
#: header that is not indented (its frames and their code are); whatever the class is called
#: (pyarrow's ArrowInvalid ends in neither Error nor Exception)
_EXCEPTION_LINE = re.compile(r"[A-Za-z_][\w.]*(?::\s.*)?")


def failure_line(error: BaseException) -> str:
    """One line saying why a Spark job failed: the exception line of the task's Python traceback
    where the error's text carries one (Spark's own first line says only that a Python worker
    raised), else the JVM exception's line for a failed JVM call (a job cancelled, say), else the
    text's first line."""
    text = str(error).strip()
    if _TRACEBACK in text:
        for line in text.rsplit(_TRACEBACK, 1)[1].splitlines():
            if line.strip() and not line[0].isspace():
                if _EXCEPTION_LINE.fullmatch(line.rstrip()):
                    return line.rstrip()
                break  # not a traceback's exception line: the text is not what this expects
    lines = text.splitlines()
    if len(lines) > 1 and lines[0].startswith(_PY4J_CALL):  # the Java exception's line, not the call's
        return lines[1].lstrip(": ").strip()
    return lines[0] if lines else type(error).__name__
