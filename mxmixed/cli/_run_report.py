"""The report of ``mxmixed run --report FILE``: where it goes, its ``running`` start, its end
and its picture, all written by the one atomic writer (:mod:`mxmixed._files.atomic`).

The end of the report is written after the script, with the standard library as it was
before it (``cli._run_script.StdlibKept``): a script that replaced ``json.dumps`` or
``os.replace`` for itself does not stop the report.
"""
import datetime
import io
import json
import os
import secrets

from .._files.atomic import atomic_write, special_file
from ._run_script import error_line, safe_str, say

__all__ = ["report_problem", "report_of_rank", "start_report", "finish_report",
           "write_short_report"]


def _write_json(path, payload):
    """Write ``payload`` (a dict) as JSON atomically, streamed into the file: its ``steps`` (a
    sequence of flat records, a ``StepLog``) one record a line, made as it is written, so that
    a long run's report never sits whole in memory, as text or as records."""
    def fill(tmp):
        with open(tmp, "w", encoding="utf-8") as handle:
            _dump(payload, handle)

    atomic_write(os.path.abspath(path), fill)


def _dump(payload, handle):
    encode = json.JSONEncoder(indent=2, default=str).encode
    handle.write("{")
    for n, (key, value) in enumerate(payload.items()):
        handle.write("%s\n  %s: " % ("," if n else "", json.dumps(str(key))))
        if key != "steps" or isinstance(value, (str, dict)):
            handle.write(encode(value).replace("\n", "\n  "))
            continue
        handle.write("[")
        count = 0
        for count, record in enumerate(value, 1):
            handle.write("%s\n    %s" % ("," if count > 1 else "",
                                         json.dumps(record, default=str)))
        handle.write("\n  ]" if count else "]")
    handle.write("\n}\n")


def report_write_error(report, err):
    """One line on stderr for a report that could not be written."""
    reason = err.strerror if isinstance(err, OSError) and err.strerror else safe_str(err)
    say("mxmixed run: error: --report %s: cannot write it: %s" % (report, reason))


def report_problem(report):
    """Why the report cannot be written at ``report`` (checked before the script runs), or None."""
    folder = os.path.dirname(report)
    if os.path.isdir(report):
        return "is a folder; give a file name, such as %s" % os.path.join(report, "report.json")
    if not os.path.isdir(folder):
        return "the folder %s does not exist" % folder
    if not os.access(folder, os.W_OK | os.X_OK):
        return "the folder %s is not writable" % folder
    kind = special_file(report)
    if kind is not None:  # renaming over it would replace the link or device by a plain file
        return "is %s, not a regular file; mxmixed never writes over one" % kind
    return None


def report_of_rank(report, environ=None):
    """Where this process writes ``report``: under ``horovodrun`` (``HOROVOD_RANK`` of a job of
    ``HOROVOD_SIZE`` > 1) rank k > 0 writes ``NAME.rank<k>.EXT`` beside rank 0's ``NAME.EXT``,
    so that no rank overwrites another's."""
    env = os.environ if environ is None else environ
    try:
        rank, size = int(env.get("HOROVOD_RANK", "0")), int(env.get("HOROVOD_SIZE", "1"))
    except ValueError:
        return report
    if size < 2 or rank < 1:
        return report
    stem, ext = os.path.splitext(report)
    return "%s.rank%d%s" % (stem, rank, ext)


def start_report(report, script, argv):
    """Write the report that says ``running`` and return it (OSError when it cannot be)."""
    header = {"status": "running", "run_id": secrets.token_hex(8), "pid": os.getpid(),
              "started_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(),
              "script": os.path.abspath(script), "argv": list(argv)}
    _write_json(report, header)
    return header


def finish_report(report, final, state, recorder):
    """Write the final report; when it cannot be written (a full disk), one line on stderr and
    a shorter report of the status, exit code and error in its place, if that fits (the exit
    status stands)."""
    from ..diagnostics.steps import steps_note

    try:
        full = dict(final, emulation=state, summary=recorder.summary(), steps=recorder.steps)
        full = dict({"note": steps_note(recorder)}, **full)
        _write_json(report, full)
    except Exception as err:  # noqa: BLE001 - a full disk, or a record the script broke
        why = err
    else:
        _draw_report(report, full)
        return
    report_write_error(report, why)
    try:
        _write_json(report, dict(final, note="the full report could not be written (%s); "
                                              "this is its status, exit code and error"
                                              % (error_line(why),)))
    except Exception:  # noqa: BLE001 - said once, in the error line above
        pass


def write_short_report(report, payload):
    """Write ``payload``, a report without steps; a failure is one line on stderr."""
    try:
        _write_json(report, payload)
    except Exception as err:  # noqa: BLE001 - a full disk: said in one line
        report_write_error(report, err)


def _draw_report(report, data):
    """Draw the report's picture beside it (``R.png``; see ``run_picture_path``) from the
    report's numbers; any failure is one line on stderr."""
    from ..diagnostics.plots import plot_run, run_picture_path

    picture = run_picture_path(report)
    try:
        buffer = io.BytesIO()
        plot_run(data).savefig(buffer, format="png", dpi=100)
        atomic_write(picture, buffer.getvalue())
    except Exception as err:  # noqa: BLE001 - a picture never changes the script's exit status
        reason = err.strerror if isinstance(err, OSError) and err.strerror else err
        say("mxmixed run: error: cannot draw the report's picture %s: %s"
            % (picture, error_line(reason) if not isinstance(reason, str) else reason))
