"""The decision log: every routed request, its outcome and its feedback, as versioned JSON records.

Writing never blocks a request: records go into a bounded queue that one writer thread drains into
rotating JSONL files (``DIR/decisions-<UTC yyyymmddTHHMMSS>-<pid>-<n>.jsonl``, one per process at
a time, so workers never share a file) and, optionally, a Redis stream (``XADD ... MAXLEN ~``).  Lines
are written whole or not at all; no line is longer than ``max_bytes`` (a bigger record keeps the head
of its prompt / response text, marked ``prompt_truncated`` / ``response_truncated``).  Every record
that does not reach the file (a full queue, a failed write such as a full disk, a record too large
even without its text) is counted (``proteus_decision_log_dropped_total``) and logged.  With Redis
configured, the writer also keeps each decision's index entry (``index_entry``: what feedback needs,
no prompt) and the call's latest outcome summary in one Redis hash per call, ``<redis_key_prefix><call_id>``
(fields ``owner``, ``decision``, ``outcome``; the feedback desk adds ``feedback``), for
``feedback_max_age_s``, so a worker that did not route a request can still accept (or refuse) its
feedback.  The first key to index a call id owns it: a decision of another key under the same id
(a client-chosen ``x-litellm-call-id``) does not replace it (counted, warned).  A
failed file write does not keep a record from Redis.  Redis trouble never reaches the files: after a
failed Redis write the writer skips Redis for ``redis.retry_after_s`` and counts what it skipped.
The files are ``file_mode`` (0600, or 0640) and a folder the writer makes 0700 (0750), whatever the
umask (``make_log_dir``, ``private_opener``; docs/decision-log.md, "Who can read the log").

Records (schema 2; the full field list is in docs/decision-log.md): ``decision``, ``outcome`` and
``feedback``, each with ``schema``, ``type``, ``call_id`` and ``ts``.  Schema 2 adds ``deployment_id``
to outcomes (the deployment whose attempt the outcome is); readers take schema 1 and 2 records
(``READ_SCHEMAS``), skip a file's last line when it is cut off (a process killed mid-write leaves at
most its last line half-written) and refuse any other line they cannot read, naming ``file:line``.
"""

from __future__ import annotations

import atexit
import errno
import hashlib
import json
import logging
import math
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple

from .compliance_metrics import record_call_id_conflict, record_log_drop, record_log_truncated
from .config import DecisionLogSettings, RedisSettings
from .observability import RateLimitedWarnings
from .request import short_repr

logger = logging.getLogger("litellm_proteus.decision_log")
SCHEMA = 2  # what is written
READ_SCHEMAS = (1, 2)  # what is read: schema 1 is schema 2 without an outcome's deployment_id
FILE_PREFIX = "decisions-"
FILE_SUFFIX = ".jsonl"
RECORD_TYPES = ("decision", "outcome", "feedback")
_STOP = object()
NO_OWNER: Any = object()  # an outcome submitted without the key of its decision


@dataclass(frozen=True)
class _Owned:
    """A queued outcome with the key hash of its decision (``DecisionLogWriter.submit``)."""

    record: dict[str, Any]
    owner: Any


class _IndexWrite(NamedTuple):
    """One ``INDEX_SCRIPT`` call the writer owes Redis: the record's ``field`` of its call's index hash."""

    field: str  # decision | outcome | feedback
    key: str  # the call's index hash (``index_key``)
    call_id: str
    owner: str = ""  # ``owner_token``; "" = not known
    payload: str = ""
    prompt: str = ""  # a decision's prompt hash
    ts: str = ""  # a decision's or a feedback record's time

    @classmethod
    def of(cls, record: Mapping[str, Any], owner: Any, prefix: str) -> "_IndexWrite | None":
        """What the index keeps of ``record`` (None: nothing; ``owner``: an outcome's key hash)."""
        kind, call_id = record["type"], record["call_id"]
        key = index_key(prefix, call_id)
        if kind == "decision":
            return cls(kind, key, call_id, owner_token(record.get("key_hash")), compact(index_entry(record)),
                       str(record.get("prompt_sha256") or ""), repr(float(record["ts"])))
        if kind == "outcome":
            return cls(kind, key, call_id, "" if owner is NO_OWNER else owner_token(owner), compact(outcome_summary(record)))
        if kind == "feedback":  # the duplicate check again: a score taken while Redis was down reaches it here
            return cls(kind, key, call_id, ts=repr(float(record["ts"])))
        return None


class _Line(NamedTuple):
    """A record on its way to the file and Redis: its JSON line and, for an outcome, its owner."""

    record: dict[str, Any]
    line: str
    owner: Any = NO_OWNER


# -- records -------------------------------------------------------------------------------------
def prompt_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class LoggedCandidate:
    deployment_id: str
    slot: int
    model: str  # the trained slot's name
    cost_usd: float
    p: float  # calibrated predicted correctness, with p_correction added
    p_correction: float = 0.0  # the deployment correction (deployment_correction.py) included in p


def decision_record(
    *,
    call_id: str,
    key_hash: str | None,
    tier: str,
    tau_source: str,
    state_key: str,
    tau: float,
    tau_requested: float | None,
    tau_effective: float,
    delta: float,
    mu: float,
    model_group: str,
    candidates: Sequence[LoggedCandidate],
    chosen: int,
    propensity: float,
    prompt: str,
    artifact: str,
    log_prompt: bool,
    ts: float | None = None,
    tau_served: float | None = None,
) -> dict[str, Any]:
    """A decision record (docs/decision-log.md).  ``tau_served``: ``tau`` clamped into the artifact's
    range, the tau the state answers for; recorded only where it differs from ``tau``."""
    record: dict[str, Any] = {
        "schema": SCHEMA,
        "type": "decision",
        "call_id": call_id,
        "ts": time.time() if ts is None else ts,
        "key_hash": key_hash,
        "tier": tier,
        "tau_source": tau_source,
        "state_key": state_key,
        "tau": tau,
        "tau_requested": tau_requested,
        **({"tau_served": tau_served} if tau_served is not None and tau_served != tau else {}),
        "tau_effective": tau_effective,
        "delta": delta,
        "mu": mu,
        "model_group": model_group,
        "candidates": [c.__dict__ for c in candidates],
        "chosen": chosen,
        "propensity": propensity,
        "prompt_sha256": prompt_sha256(prompt),
        "artifact": artifact,
    }
    if log_prompt:
        record["prompt"] = prompt
    return record


def outcome_record(
    *,
    call_id: str,
    deployment_id: str | None,
    success: bool,
    response_cost: float | None,
    latency_ms: float | None,
    error: str | None,
    response: str | None = None,
    ts: float | None = None,
    client_disconnected: bool = False,
) -> dict[str, Any]:
    """``client_disconnected``: the client left a stream mid-way and the proxy billed the part sent
    (LiteLLM's disconnect handler runs the success callback on it): ``response`` is that part.
    ``response_cost`` and ``latency_ms`` are kept only as finite numbers (``finite_number``), else null."""
    record: dict[str, Any] = {
        "schema": SCHEMA,
        "type": "outcome",
        "call_id": call_id,
        "ts": time.time() if ts is None else ts,
        "deployment_id": deployment_id,
        "success": success,
        "response_cost": finite_number(response_cost),
        "latency_ms": finite_number(latency_ms),
        "error": error,
    }
    if response is not None:
        record["response"] = response
    if client_disconnected:
        record["client_disconnected"] = True
    return record


def finite_number(value: Any) -> float | None:
    """``value`` as a float when it is a finite int or float, else None: a cost or latency that is NaN,
    an infinity, a bool (an int to Python) or no number at all is unknown (null), not a number to sum."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int past float's range
        return None
    return number if math.isfinite(number) else None


def feedback_record(call_id: str, score: float, source: str, ts: float | None = None) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "type": "feedback",
        "call_id": call_id,
        "ts": time.time() if ts is None else ts,
        "score": score,
        "source": source,
    }


def chosen_p(decision: Mapping[str, Any]) -> float:
    """The calibrated p of the chosen candidate of a decision record."""
    return float(decision["candidates"][decision["chosen"]]["p"])


def chosen_deployment_id(decision: Mapping[str, Any]) -> str | None:
    """The deployment id of a decision record's chosen candidate (None when the record has none)."""
    try:
        value = decision["candidates"][int(decision["chosen"])].get("deployment_id")
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        return None
    return None if value is None else str(value)


def outcome_of(decision: Mapping[str, Any], outcome: Mapping[str, Any]) -> bool:
    """Whether ``outcome`` (a record of the decision's call) is the outcome of ``decision``'s pick.

    An outcome that names its deployment (schema 2) is the pick's when the decision chose that
    deployment and the outcome is not older than the decision: a retried call has a failure outcome
    per failed attempt, and a fallback group's answer is no outcome of any pick.  One that names none
    (schema 1, or an unknown deployment) is taken for the call's decision, as the schema 1 rule reads it."""
    deployment = outcome.get("deployment_id")
    if deployment is None:
        return True
    return str(deployment) == chosen_deployment_id(decision) and float(outcome["ts"]) >= float(decision["ts"])


def uncorrected_p(candidate: Mapping[str, Any]) -> float:
    """A logged candidate's calibrated p before the deployment correction (what the correction's
    residuals are taken against)."""
    return float(candidate["p"]) - float(candidate.get("p_correction", 0.0))


# -- writing -------------------------------------------------------------------------------------
def log_file_name(pid: int, n: int, now: float | None = None, prefix: str = FILE_PREFIX) -> str:
    stamp = datetime.fromtimestamp(time.time() if now is None else now, timezone.utc).strftime("%Y%m%dT%H%M%S")
    return f"{prefix}{stamp}-{pid}-{n}{FILE_SUFFIX}"


def append_records(directory: str | Path, records: Sequence[Mapping[str, Any]]) -> None:
    """``records`` appended to a file of this process's own in the log folder ``directory``, outside any
    writer: offline feedback, and an outcome whose decision's writer a settings change closed.  OSError
    when the folder cannot be written."""
    now = time.time()
    path = Path(directory) / log_file_name(os.getpid(), 0, now)
    with open(path, "a", encoding="utf-8", opener=private_opener(dir_file_mode(directory))) as handle:
        handle.write("".join(compact(record) + "\n" for record in records))


TEXT_FIELDS = ("prompt", "response")  # the bulky fields a record over max_bytes gives up first


def fit_line(record: dict[str, Any], max_bytes: int) -> tuple[str | None, dict[str, Any]]:
    """``(line, record)``: the record as one JSON line of at most ``max_bytes`` bytes.  A record too
    large keeps the head of its ``prompt`` / ``response`` text that fits (the shorter field first, so
    it stays whole when it can); each field that was cut is marked ``<field>_truncated: true`` and
    only those (``prompt_sha256`` stays the hash of the whole prompt); ``(None, record)`` when even
    empty text fields do not fit.  Lines are ASCII (``json.dumps`` escapes the rest), so characters are
    bytes.  TypeError / ValueError for a record JSON cannot hold (NaN and infinities included: ``compact``)."""
    line = compact(record) + "\n"
    if len(line) <= max_bytes:
        return line, record
    fields = sorted((f for f in TEXT_FIELDS if isinstance(record.get(f), str) and record[f]),
                    key=lambda f: _escaped_len(record[f]))
    if not fields:
        return None, record
    bare = {**record, **{f: "" for f in fields}, **{f"{f}_truncated": True for f in fields}}
    room = max_bytes - len(compact(bare) + "\n")
    if room < 0:
        return None, record
    fitted = dict(bare)
    for i, field in enumerate(fields):
        share = room // (len(fields) - i)
        fitted[field] = _head(record[field], share)
        room -= _escaped_len(fitted[field])
        if fitted[field] == record[field]:  # it fit whole: not marked (the line only gets shorter)
            del fitted[f"{field}_truncated"]
    line = compact(fitted) + "\n"
    return line, fitted


def _escaped_len(text: str) -> int:
    return len(json.dumps(text)) - 2


def _head(text: str, max_chars: int) -> str:
    """The longest prefix of ``text`` whose JSON string escape is at most ``max_chars`` long."""
    low, high = 0, min(len(text), max_chars)
    while low < high:
        mid = (low + high + 1) // 2
        if _escaped_len(text[:mid]) <= max_chars:
            low = mid
        else:
            high = mid - 1
    return text[:low]


# -- file and directory modes ------------------------------------------------------------------------
# Log lines hold key hashes, prompts and responses (log_prompts / log_responses): whatever the umask,
# PROTEUS writes its files owner-only (decision_log.file_mode "0600", the default) or with group read
# ("0640"), and makes the log directory it creates to match (0700 / 0750).  A directory that exists
# keeps its mode (the operator's choice), with a warning when others can get in (once per process).
FILE_MODES = {"0600": 0o600, "0640": 0o640}  # decision_log.file_mode -> the files' mode
FILE_MODE = FILE_MODES["0600"]
_open_dirs_warned: set[str] = set()


def dir_mode(file_mode: int) -> int:
    """The log directory's mode for files of ``file_mode``: owner rwx, group r-x where files are group-readable."""
    return 0o700 | (0o050 if file_mode & 0o040 else 0)


def dir_file_mode(directory: str | Path) -> int:
    """The mode for a file written into an existing log directory by a process that has no settings
    (``proteus feedback --log DIR``): group read (0640) where the directory lets its group in (0750, as
    PROTEUS makes it for ``file_mode: "0640"``), else owner only (0600)."""
    return FILE_MODES["0640"] if os.stat(directory).st_mode & 0o050 == 0o050 else FILE_MODE


def private_opener(file_mode: int = FILE_MODE) -> Callable[[str, int], int]:
    """An ``opener`` for ``open()``: a file it creates has ``file_mode`` whatever the umask (created with
    it, so it is never more open, then ``fchmod``-ed, so the umask takes nothing from it)."""
    def opener(path: str, flags: int) -> int:
        fd = os.open(path, flags | os.O_CLOEXEC, file_mode)
        try:
            os.fchmod(fd, file_mode)
        except OSError:
            os.close(fd)
            raise
        return fd

    return opener


def make_log_dir(directory: str | Path, file_mode: int = FILE_MODE) -> None:
    """Make ``directory`` with ``dir_mode(file_mode)`` whatever the umask (missing parents as ``mkdir -p``
    makes them); a directory that exists keeps its mode, with a warning (once per process) when users
    the mode leaves out can get in, or another user owns it."""
    directory, mode = Path(directory), dir_mode(file_mode)
    if not directory.is_dir():
        directory.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(directory, mode)
        except FileExistsError:  # made meanwhile (another worker), or not a directory
            if not directory.is_dir():
                raise
        else:
            os.chmod(directory, mode)  # the umask may have taken bits of it
            return
    _warn_if_open(directory, file_mode)


def _warn_if_open(directory: Path, file_mode: int) -> None:
    key = str(directory.resolve())
    if key in _open_dirs_warned:
        return
    info, mode = directory.stat(), dir_mode(file_mode)
    foreign = hasattr(os, "geteuid") and info.st_uid != os.geteuid()
    if info.st_mode & 0o077 & ~mode or foreign:
        _open_dirs_warned.add(key)
        logger.warning(
            "PROTEUS: the log directory %s %s (mode %04o, owner uid %d); PROTEUS writes its files there with "
            "mode %04o, and leaves the directory as it is: `chmod %04o %s`%s closes it",
            directory, "belongs to another user" if foreign else "lets other users in", info.st_mode & 0o7777,
            info.st_uid, file_mode, mode, directory, " (and chown)" if foreign else "",
        )


class RotatingJsonl:
    """This process's JSONL files in ``directory``: a new file past ``max_bytes``; at most
    ``max_files`` of them (the oldest deleted).  Other processes' files are never touched.  ``prefix``
    names the stream: ``decisions-`` for the decision log, ``shadow-`` for shadow rows.

    Lines are written whole or not at all: one unbuffered write per line, and a write that fails
    (``OSError``: a full disk) cuts the file back to where the line started (the file's real end,
    read with ``fstat`` before each line, so a file emptied under the writer, as logrotate's
    ``copytruncate`` does, is cut back to its new end), or, when that fails too, leaves the file and
    starts a new one with the next line.  A line over ``max_bytes`` is refused.

    A file deleted while open (its folder removed) is noticed when the writer leaves it (a rotation)
    and at the end of each ``write_lines``: the lines that call put into it are written again into a
    new file (the folder made again), once; lines of earlier calls are lost with the file.

    Files are written with ``file_mode`` and a folder this makes gets ``dir_mode(file_mode)``,
    whatever the umask (``make_log_dir``)."""

    def __init__(self, directory: str | Path, max_bytes: int, max_files: int, prefix: str = FILE_PREFIX,
                 file_mode: int = FILE_MODE):
        self.directory = Path(directory)
        self.prefix = prefix
        self.file_mode = file_mode
        make_log_dir(self.directory, file_mode)
        self.max_bytes, self.max_files = max_bytes, max_files
        self.files: list[Path] = []
        self._opened = 0  # numbers this process's files: unique even within one second
        self._handle: Any = None
        self._size = 0

    def _open_next(self) -> None:
        self.close()
        make_log_dir(self.directory, self.file_mode)  # removed while the process ran: made again
        path = self.directory / log_file_name(os.getpid(), self._opened, prefix=self.prefix)
        self._opened += 1
        self._handle = open(path, "ab", buffering=0, opener=private_opener(self.file_mode))
        self._size = os.fstat(self._handle.fileno()).st_size
        self.files.append(path)
        while len(self.files) > self.max_files:
            try:
                self.files.pop(0).unlink(missing_ok=True)
            except OSError:
                pass

    def write(self, line: str) -> bool:
        """Append one whole line; False (nothing written) for a line over ``max_bytes``; OSError
        when the file write fails (nothing of the line stays in the file)."""
        if len(line.encode("utf-8")) > self.max_bytes:
            return False
        failed, error = self.write_lines([line])
        if failed:
            raise error if error is not None else OSError(errno.EIO, "the line was not written")
        return True

    def write_lines(self, lines: Sequence[str]) -> tuple[list[int], OSError | None]:
        """Append the lines, each whole or not at all: ``(the indices of the lines not written, the
        last error)``.  A line over ``max_bytes``, a failed write (a full disk) and a line in a file
        deleted while written and deleted again when written anew each count as one."""
        failed: list[int] = []
        error: OSError | None = None
        segment: list[tuple[int, bytes]] = []  # this call's lines in the current file
        for i, line in enumerate(lines):
            data = line.encode("utf-8")
            if len(data) > self.max_bytes:
                failed.append(i)
                error = OSError(errno.EFBIG, f"a line of {len(data)} bytes is over max_bytes ({self.max_bytes})")
                continue
            try:
                self._sync_size()
                if self._rotates(len(data)):
                    segment, lost, lost_error = self._keep(segment)  # before leaving the file: was it deleted?
                    failed, error = failed + lost, lost_error or error
                    if self._rotates(len(data)):
                        self._open_next()
                        segment = []
                self._put(data)
                segment.append((i, data))
            except OSError as exc:  # a full disk must not stop the writer: later lines may fit
                failed, error = failed + [i], exc
        _, lost, lost_error = self._keep(segment)
        return sorted(failed + lost), lost_error or error

    def _sync_size(self) -> None:
        """The current file's real size: it may have been truncated (or appended to) under the writer."""
        if self._handle is not None:
            try:
                self._size = os.fstat(self._handle.fileno()).st_size
            except OSError:
                pass

    def _rotates(self, n: int) -> bool:
        return self._handle is None or bool(self._size and self._size + n > self.max_bytes)

    def _put(self, data: bytes) -> None:
        """One line at the file's end (``_size``, synced), or OSError with the file cut back."""
        start, view = self._size, memoryview(data)
        try:
            while view:
                written = self._handle.write(view)
                if not written:
                    raise OSError(errno.EIO, "the file took no bytes")
                view = view[written:]
        except OSError:
            self._cut_back(start)
            raise
        self._size = start + len(data)

    def _keep(self, segment: list[tuple[int, bytes]]) -> tuple[list[tuple[int, bytes]], list[int], OSError | None]:
        """When the current file was deleted: ``segment`` (the lines this call put into it, with
        their indices) written again into a new file, once.  ``(the lines now in the current file,
        the indices of the lines lost, error)``."""
        if not self.removed():
            return segment, [], None
        self.reopen()
        if not segment:
            return [], [], None
        kept: list[tuple[int, bytes]] = []
        failed: list[int] = []
        error: OSError | None = None
        try:
            self._open_next()
        except OSError as exc:
            return [], [i for i, _ in segment], exc
        for i, data in segment:  # they fit one file: they were in one
            try:
                self._sync_size()
                self._put(data)
                kept.append((i, data))
            except OSError as exc:
                failed, error = failed + [i], exc
        if self.removed():  # deleted again: given up
            self.reopen()
            return [], [i for i, _ in segment], OSError(errno.ENOENT, f"{self.directory}: the file was deleted while written, twice")
        return kept, failed, error

    def _cut_back(self, size: int) -> None:
        try:
            self._handle.truncate(size)
        except (OSError, ValueError):
            self.close()  # a torn line may stay in this file: the next line starts a new one

    def removed(self) -> bool:
        """Whether the current file was deleted (or its folder removed) while open: what is written
        to it is lost."""
        if self._handle is None:
            return False
        try:
            return os.fstat(self._handle.fileno()).st_nlink == 0
        except OSError:
            return True

    def reopen(self) -> None:
        """Leave the current file; the next line starts a new one (its folder made again if needed)."""
        if self._handle is not None and self.files:
            self.files.pop()  # deleted already
        self.close()

    def flush(self) -> None:
        """Lines are written unbuffered: nothing waits in this process."""

    def close(self) -> None:
        if self._handle is not None:
            try:
                self._handle.close()
            except OSError:
                pass
            self._handle = None


class DecisionLogWriter:
    """Bounded queue + one writer thread (``submit`` never blocks).  ``redis_client`` is a sync
    ``redis.Redis`` (or None); the decision index and the stream are written through it.

    ``dropped`` counts the records that did not reach the log's file: a full queue, a failed file
    write (a full disk), a record over ``max_bytes`` even without its text; ``truncated`` the records
    written with their ``prompt`` / ``response`` cut to fit ``max_bytes``.  A failed file write does not
    keep a record from Redis.  A record JSON cannot hold is dropped alone (counted).

    ``on_unlogged``: called on the writer thread with each decision record that reaches neither the
    file nor Redis (over ``max_bytes`` even without its text, or not serialisable), so the feedback
    desk that remembered it forgets it (``FeedbackDesk.forget``)."""

    def __init__(self, settings: DecisionLogSettings, redis_client: Any = None, retry_after_s: float = 1.0,
                 owns_redis: bool = False):
        self.settings = settings
        self._owns_redis = owns_redis  # the client closes with the writer
        self.files = RotatingJsonl(settings.dir, settings.max_bytes, settings.max_files,
                                   file_mode=FILE_MODES[settings.file_mode]) if settings.dir else None
        self.redis = redis_client
        self.retry_after_s = retry_after_s
        self.dropped = 0
        self.truncated = 0
        self.redis_skipped = 0
        self._counts_lock = threading.Lock()
        self._redis_down_until = 0.0
        # index entries (key, line) not yet in Redis: re-sent with the next write (SET is idempotent), so
        # a timeout or an outage costs feedback on other workers only until Redis takes a write again
        self._index_backlog: deque[_IndexWrite] = deque()
        self.on_unlogged: Callable[[dict[str, Any]], None] | None = None
        self.index_conflicts = 0  # decisions not indexed: their call id is another key's
        self._warnings = RateLimitedWarnings(logger, 30.0)
        self._closed = False
        self._closing = threading.Lock()  # a submit that saw the writer open is queued before its stop
        self._queue: queue.Queue = queue.Queue(maxsize=settings.queue_size)
        self._thread = threading.Thread(target=self._run, name="proteus-decision-log", daemon=True)
        self._thread.start()
        atexit.register(self.close)  # a worker stopping normally writes what is queued

    def submit(self, record: dict[str, Any], owner: Any = NO_OWNER) -> bool:
        """Queue a record; False (and counted) when the queue is full or the writer is closed.
        ``owner``: for an outcome, the key hash of the decision it is the outcome of (its index
        entry is kept only while that key owns the call id)."""
        item: Any = record if owner is NO_OWNER else _Owned(record, owner)
        try:
            with self._closing:
                if self._closed:
                    self._drop(1)
                    return False
                self._queue.put_nowait(item)
            return True
        except queue.Full:
            self._drop(1)
            self._warnings.warn("full", "PROTEUS decision log: queue full (%d), records dropped", self.settings.queue_size)
            return False

    def _drop(self, n: int) -> None:
        if n <= 0:
            return
        with self._counts_lock:
            self.dropped += n
        record_log_drop(n)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything queued so far is written (for tests and shutdown)."""
        if self._closed:  # what was queued is written before the thread ends
            self._thread.join(timeout)
            return not self._thread.is_alive()
        done = threading.Event()
        try:
            self._queue.put(done, timeout=timeout)
        except queue.Full:
            return False
        return done.wait(timeout)

    def close(self, timeout: float = 10.0, wait: bool = True) -> None:
        """Write what is queued, then end the thread and close the file (and the Redis client it owns);
        later records are dropped (counted).  ``wait`` False: return at once (the thread ends on its own)."""
        with self._closing:
            self._closed = True
        if not self._thread.is_alive():
            return
        if not wait:
            try:
                self._queue.put_nowait(_STOP)
            except queue.Full:  # the thread is behind: the stop waits for room off the caller's thread
                threading.Thread(target=self._queue.put, args=(_STOP,), name="proteus-decision-log-close", daemon=True).start()
            return
        try:
            self._queue.put(_STOP, timeout=timeout)
        except queue.Full:
            return
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            while len(batch) < 512:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            records = [r for r in batch if isinstance(r, (dict, _Owned))]
            try:
                self._write(records)
            except Exception as exc:  # nothing may kill the thread: later records may be written
                if self.files is not None:
                    self._drop(len(records))
                self._warnings.warn("crash", "PROTEUS decision log: cannot write %d records: %s", len(records), exc)
            for item in batch:
                if isinstance(item, threading.Event):
                    item.set()
            if any(item is _STOP for item in batch):  # nothing follows it: submit and close share a lock
                self._stopped()
                return

    def _stopped(self) -> None:
        """On the writer thread, once the stop is reached: nothing is left to write."""
        if self.files is not None:
            self.files.close()
        if self.redis is not None and self._index_backlog:  # a last try for the index; what stays is counted
            self._write_redis([])
            self.redis_skipped += len(self._index_backlog)
            self._index_backlog.clear()
        if self._owns_redis and self.redis is not None:
            try:
                self.redis.close()
            except Exception:
                pass
        atexit.unregister(self.close)  # a closed writer needs nothing at exit (and is no longer held by atexit)

    def _write(self, items: list[dict[str, Any] | _Owned]) -> None:
        if not items:
            return
        written: list[_Line] = []  # what goes to the file and Redis
        too_large, unserialisable = 0, 0
        for item in items:
            record, owner = (item.record, item.owner) if isinstance(item, _Owned) else (item, NO_OWNER)
            try:
                line, fitted = (fit_line(record, self.files.max_bytes) if self.files is not None
                                else (compact(record) + "\n", record))
            except (TypeError, ValueError, RecursionError) as exc:  # one bad record: only it is lost
                unserialisable += 1
                self._unlogged(record)
                self._warnings.warn("unserialisable", "PROTEUS decision log: a %s record cannot be written as JSON "
                                    "(dropped, counted): %s", record.get("type"), exc)
                continue
            if self.files is not None:
                if line is not None and fitted is not record:
                    with self._counts_lock:
                        self.truncated += 1
                    record_log_truncated()
                    self._warnings.warn("truncated", "PROTEUS decision log: a %s record over max_bytes (%d) "
                                        "is written with its text cut (counted)", record.get("type"), self.files.max_bytes)
                elif line is None:
                    too_large += 1
                    self._unlogged(record)  # not in the file, not in Redis: no feedback for it anywhere
            if line is not None:
                written.append(_Line(record, line, owner))
        self._drop(too_large + unserialisable)
        if too_large:
            self._warnings.warn("too_large", "PROTEUS decision log: %d records over max_bytes (%d) even without "
                                "their text: dropped (counted)", too_large, self.files.max_bytes)
        if self.files is not None:
            self._write_files(written)
        if self.redis is not None:  # a record the file could not take still reaches Redis
            self._write_redis(written)

    def _unlogged(self, record: Any) -> None:
        if self.on_unlogged is not None and isinstance(record, dict) and record.get("type") == "decision":
            try:
                self.on_unlogged(record)
            except Exception as exc:
                self._warnings.warn("unlogged", "PROTEUS decision log: on_unlogged failed: %s", exc)

    def _write_files(self, written: list[_Line]) -> None:
        # a file deleted under the writer: its lines again, in a new one
        failed, error = self.files.write_lines([w.line for w in written])
        if failed:
            self._drop(len(failed))
            self._warnings.warn("write", "PROTEUS decision log: %d of %d records not written to %s (dropped, "
                                "counted): %s", len(failed), len(written), self.files.directory, error)
            if self.redis is None or not self.settings.redis_index:  # in no file and no index: no feedback for it
                for i in failed:
                    self._unlogged(written[i].record)

    def _write_redis(self, written: list[_Line]) -> None:
        settings = self.settings
        stream = [w.line.rstrip("\n") for w in written] if settings.redis_stream else []
        if settings.redis_index:
            writes = (_IndexWrite.of(record, owner, settings.redis_key_prefix) for record, _, owner in written)
            self._index_backlog.extend(w for w in writes if w is not None)
        overflow = len(self._index_backlog) - settings.queue_size  # bounded like the queue: the oldest go
        for _ in range(max(0, overflow)):
            self._index_backlog.popleft()
        self.redis_skipped += max(0, overflow)
        if not stream and not self._index_backlog:
            return
        if time.monotonic() < self._redis_down_until:
            self.redis_skipped += len(stream)
            return
        index = list(self._index_backlog)
        try:  # the TTL too: an error here is Redis's trouble, never a file drop
            ttl = index_ttl_s(settings)
            pipe = self.redis.pipeline(transaction=False)
            for line in stream:
                pipe.xadd(settings.redis_stream, {"record": line}, maxlen=settings.redis_stream_maxlen, approximate=True)
            for w in index:
                pipe.eval(INDEX_SCRIPT, 1, w.key, w.field, w.owner, w.payload, ttl, w.prompt, w.ts)
            results = pipe.execute()[len(stream):]
        except Exception as exc:  # redis.RedisError, OSError: the files still have every record
            self.redis_skipped += len(stream)  # a stream entry is not re-sent: it may have been added
            self._redis_down_until = time.monotonic() + self.retry_after_s
            self._warnings.warn("redis", "PROTEUS decision log: Redis write failed (files unaffected; the index is "
                                "re-sent with the next write): %s", exc)
            return
        for (field, _, call_id, *_), kept in zip(index, results):
            self._index_backlog.popleft()
            if field == "decision" and not kept:
                self.index_conflicts += 1
                record_call_id_conflict()
                self._warnings.warn("conflict", "PROTEUS decision log: call id %s is indexed for another key: this "
                                    "decision is not indexed, and takes no feedback from its key (counted)",
                                    short_repr(call_id))


# The Redis index: one hash per call id, ``<prefix><call_id>``, fields ``owner`` (the JSON of the key
# hash that indexed it first), ``decision`` (its index entry), ``prompt`` (its prompt hash), ``outcome``
# (the latest outcome summary) and ``feedback`` (the duplicate check: when the score was taken; "1" in
# an index of an earlier release, a time unknown).  A decision of the owner made after the call's score
# is another request under a reused call id (``call_requests``): its call's feedback check starts
# afresh; so does one for another prompt while the score's time is unknown.  A decision for another
# prompt drops the call's outcome (the outcome of another request).  A decision made before the score
# may be indexed after it (the writer lags): it keeps the score.  No call id reaches another call's key
# or fields.
INDEX_OWNER, INDEX_DECISION, INDEX_OUTCOME, INDEX_FEEDBACK = "owner", "decision", "outcome", "feedback"

# KEYS[1]: the call's hash; ARGV: field (decision | outcome | feedback), owner token ("" = unknown),
# payload, ttl, prompt hash and ts (a decision's, or a feedback record's).  A decision sets the owner
# when there is none; neither is written over another owner's (returns 0).  A feedback record claims
# the duplicate check as ``CLAIM_SCRIPT`` does, unless the indexed decision is newer than it (a score a
# worker took while Redis was down, told by its writer once Redis answers, after the call id routed
# another request): so every worker refuses a second score once Redis is back.
# A value of another type there (an index of an earlier release) is replaced.
INDEX_SCRIPT = """
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'hash' and kind ~= 'none' then redis.call('DEL', KEYS[1]) end
if ARGV[1] == 'feedback' then
  local ok, indexed = pcall(cjson.decode, redis.call('HGET', KEYS[1], 'decision') or '')
  local newer = ok and type(indexed) == 'table' and tonumber(indexed['ts']) and tonumber(indexed['ts']) > tonumber(ARGV[6])
  if not newer then redis.call('HSETNX', KEYS[1], 'feedback', ARGV[6]) end
  if redis.call('TTL', KEYS[1]) < 0 then redis.call('EXPIRE', KEYS[1], ARGV[4]) end
  return 1
end
local owner = redis.call('HGET', KEYS[1], 'owner')
if owner and ARGV[2] ~= '' and owner ~= ARGV[2] then return 0 end
if ARGV[1] == 'decision' then
  local prompt = redis.call('HGET', KEYS[1], 'prompt')
  local another = prompt and prompt ~= ARGV[5]
  local scored = tonumber(redis.call('HGET', KEYS[1], 'feedback') or '')
  if another then redis.call('HDEL', KEYS[1], 'outcome') end
  if scored and ((scored > 1 and tonumber(ARGV[6]) > scored) or (scored <= 1 and another)) then
    redis.call('HDEL', KEYS[1], 'feedback', 'outcome')
  end
  redis.call('HSET', KEYS[1], 'owner', ARGV[2], 'decision', ARGV[3], 'prompt', ARGV[5])
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
end
redis.call('EXPIRE', KEYS[1], ARGV[4])
return 1
"""

# The duplicate check of a score being taken: HSETNX ``feedback`` to when it is taken (ARGV[2]); a hash
# with no expiry yet gets ``ttl`` (ARGV[1]).
CLAIM_SCRIPT = """
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'hash' and kind ~= 'none' then redis.call('DEL', KEYS[1]) end
local fresh = redis.call('HSETNX', KEYS[1], 'feedback', ARGV[2])
if redis.call('TTL', KEYS[1]) < 0 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end
return fresh
"""


def index_ttl_s(settings: DecisionLogSettings) -> int:
    """The index hash's EXPIRE: ``feedback_max_age_s`` in whole seconds (the config bounds it to one Redis takes)."""
    return max(1, int(settings.feedback_max_age_s))


def owner_token(key_hash: Any) -> str:
    """How the index names the key that owns a call id (``null`` for a decision without a key)."""
    return json.dumps(key_hash)


def compact(record: Mapping[str, Any]) -> str:
    """One JSON line; ValueError for NaN or an infinity, which JSON cannot hold (json.dumps would write
    ``NaN``, a line no strict reader takes)."""
    return json.dumps(record, separators=(",", ":"), allow_nan=False)


def outcome_summary(outcome: Mapping[str, Any]) -> dict[str, Any]:
    """What the feedback checks keep of an outcome (in memory and in the Redis index): no response text."""
    return {k: outcome.get(k) for k in ("schema", "type", "call_id", "ts", "deployment_id", "success", "error")}


INDEX_FIELDS = ("schema", "type", "call_id", "ts", "key_hash", "tier", "tau_source", "state_key", "tau", "tau_served",
                "tau_effective", "model_group", "artifact", "prompt_sha256")


def index_entry(decision: Mapping[str, Any]) -> dict[str, Any]:
    """What the feedback desk (in memory) and the Redis index keep of a decision: what the feedback
    checks, ``on_feedback`` and the feedback answer read (state key, tau, key hash, time, the chosen
    candidate as the only one), never the prompt or the other candidates."""
    entry = {k: decision[k] for k in INDEX_FIELDS if k in decision}
    entry["candidates"] = [dict(decision["candidates"][int(decision["chosen"])])]
    entry["chosen"] = 0
    return entry


def index_key(prefix: str, call_id: str) -> str:
    """The Redis hash of a call's index entries: ``<prefix><call_id>``."""
    return prefix + call_id


WRITE_TIMEOUT_S = 2.0  # the writer thread's Redis calls: off the request path, so a busy host is no outage


def redis_client(settings: RedisSettings, timeout_s: float | None = None, client_name: str | None = None) -> Any:
    """A client of ``settings``; ``timeout_s`` (default: the request path's ``timeout_ms``) per call;
    ``client_name``: how its connections show in Redis's CLIENT LIST."""
    import redis

    timeout = settings.timeout_ms / 1000.0 if timeout_s is None else timeout_s
    return redis.Redis.from_url(
        settings.connection_url(), socket_timeout=timeout, socket_connect_timeout=timeout, decode_responses=True,
        client_name=client_name,
    )


# -- reading -------------------------------------------------------------------------------------
def log_files(directory: str | Path) -> list[Path]:
    """The log's files in time order (their names start with the UTC time they were opened)."""
    directory = Path(directory)
    if directory.is_file():
        raise OSError(f"{directory} is a file; pass the decision log directory that holds it ({directory.parent})")
    if not directory.is_dir():
        raise OSError(f"decision log directory {directory} does not exist")
    return sorted(directory.glob(f"{FILE_PREFIX}*{FILE_SUFFIX}"), key=_file_order)


def _file_order(path: Path) -> tuple:
    """(UTC stamp, pid, n) with pid and n as numbers: ``-10`` comes after ``-9``."""
    parts = path.name[len(FILE_PREFIX) : -len(FILE_SUFFIX)].split("-")
    if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
        return (parts[0], int(parts[1]), int(parts[2]))
    return (parts[0], -1, -1)


def iter_records(directory: str | Path) -> Iterator[dict[str, Any]]:
    """Every record of every file, file by file.  A file's last line that has no newline and does not
    parse (a writer killed mid-line) is skipped with a warning naming ``file:line``; any other line
    that is not a JSON object of a schema in ``READ_SCHEMAS`` and a type in ``RECORD_TYPES`` is a
    ValueError naming ``file:line`` (the trainer's reader refuses the same lines); so is a record
    whose ``call_id`` is not a non-empty string or whose ``ts`` is not a finite number, naming the field."""
    for path in log_files(directory):
        with open(path, "rb") as handle:
            for lineno, raw in enumerate(handle, 1):
                if not raw.strip():
                    continue
                where = f"{path}:{lineno}"
                try:
                    record = json.loads(raw.decode("utf-8-sig" if lineno == 1 else "utf-8"))
                except ValueError as exc:  # UnicodeDecodeError included
                    if not raw.endswith(b"\n"):  # only the last line can lack its newline
                        logger.warning("PROTEUS decision log: %s: skipped the last line: it has no newline at its end "
                                       "and does not parse, as a writer stopped mid-line leaves it", where)
                        break
                    raise ValueError(f"{where}: not a JSON record ({exc}); only a file's last line, cut off by a "
                                     "writer stopped mid-line, is skipped") from None
                if not isinstance(record, dict):
                    raise ValueError(f"{where}: each line must be a JSON object (one record); got a "
                                     f"{type(record).__name__}")
                if record.get("schema") not in READ_SCHEMAS:
                    raise ValueError(f"{where}: field 'schema' is {short_repr(record.get('schema'))}; supported: "
                                     f"{', '.join(map(str, READ_SCHEMAS))}")
                if record.get("type") not in RECORD_TYPES:
                    raise ValueError(f"{where}: field 'type' is {short_repr(record.get('type'))}; allowed: "
                                     f"{list(RECORD_TYPES)}")
                # every reader groups records by call id and orders them by ts
                if not isinstance(record.get("call_id"), str) or not record["call_id"]:
                    raise ValueError(f"{where}: field 'call_id' is {_shown(record, 'call_id')}; it must be a "
                                     "non-empty string (the request's litellm_call_id)")
                if finite_number(record.get("ts")) is None:
                    raise ValueError(f"{where}: field 'ts' is {_shown(record, 'ts')}; it must be a finite number "
                                     "(unix seconds)")
                yield record


def _shown(record: Mapping[str, Any], field: str) -> str:
    return short_repr(record[field]) if field in record else "missing"


def supersedes(record: Mapping[str, Any], previous: Mapping[str, Any] | None) -> bool:
    """Whether ``record`` replaces ``previous`` as its call's record of the same type (decision,
    outcome or feedback): the latest by ``ts`` wins; of two with the same ``ts``, the one read later
    (files in time order, lines in file order).  ``call_requests`` orders a call's records by this
    rule, for ``join_log`` and the trainer's decision-log loader alike.  A call id is its first key's,
    as in the feedback index: a decision of another key under it (a client-chosen
    ``x-litellm-call-id`` used twice) replaces none of that key's, and its feedback is refused."""
    if previous is None:
        return True
    if record.get("type") == "decision":
        owner, other = previous.get("key_hash"), record.get("key_hash")
        if owner and other and owner != other:
            return float(record["ts"]) < float(previous["ts"])  # the earlier key owns the id
    return float(record["ts"]) >= float(previous["ts"])


@dataclass
class LoggedDecision:
    decision: dict[str, Any]
    outcome: dict[str, Any] | None = None
    feedback: float | None = None  # the latest feedback score

    @property
    def call_id(self) -> str:
        return self.decision["call_id"]

    @property
    def failed(self) -> bool:
        """The pick did not answer (a fallback group did, or nothing did)."""
        return self.outcome is not None and self.outcome.get("success") is False

    @property
    def label(self) -> float | None:
        """The feedback score as a label of the pick: None when the pick failed (the score is not the pick's)."""
        return None if self.failed else self.feedback


def latest_outcome(decision: Mapping[str, Any], outcomes: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The latest (``supersedes``) of a call's ``outcomes`` (in the order read) that is the outcome
    of ``decision``'s pick (``outcome_of``); None when none is."""
    latest = None
    for outcome in outcomes:
        if outcome_of(decision, outcome) and supersedes(outcome, latest):
            latest = outcome
    return latest


def pick_outcomes(picks: Sequence[Mapping[str, Any]], outcomes: Mapping[str, Sequence[Mapping[str, Any]]]
                  ) -> list[tuple[Mapping[str, Any], Mapping[str, Any] | None]]:
    """Each decision with its own pick's outcome: of its call's outcomes that are its pick's
    (``outcome_of``), the first one no earlier pick took (a group of one deployment retried it: one
    failure, then one success)."""
    by_time = {call_id: sorted(records, key=lambda o: float(o["ts"])) for call_id, records in outcomes.items()}
    taken: set[int] = set()
    paired = []
    for decision in sorted(picks, key=lambda d: float(d["ts"])):
        mine = None
        for outcome in by_time.get(decision["call_id"], []):
            if id(outcome) not in taken and outcome_of(decision, outcome):
                mine = outcome
                taken.add(id(outcome))
                break
        paired.append((decision, mine))
    return paired


@dataclass
class CallRequest:
    """One request under a call id: its decisions in time order (a retry decides again), and the
    outcomes and feedback records logged while it was its call's latest request (``call_requests``)."""

    decisions: list[Mapping[str, Any]]
    number: int = 1  # its place among its call id's requests (1: the first); 0: another key's (``owned`` False)
    outcomes: list[Mapping[str, Any]] = field(default_factory=list)
    feedback: list[Mapping[str, Any]] = field(default_factory=list)

    @property
    def owned(self) -> bool:
        """False for decisions of another key under a call id its first key owns: no row, no feedback."""
        return self.number > 0

    @property
    def decision(self) -> Mapping[str, Any]:
        """The request's latest decision (``supersedes``)."""
        return self.decisions[-1]

    @property
    def call_id(self) -> str:
        return str(self.decision["call_id"])

    @property
    def sample_id(self) -> str:
        """The call id, with ``#<n>`` for the n-th request that reused it (n >= 2): unique per request."""
        return self.call_id if self.number <= 1 else f"{self.call_id}#{self.number}"

    @property
    def latest_feedback(self) -> Mapping[str, Any] | None:
        return self.feedback[-1] if self.feedback else None


@dataclass
class CallRequests:
    requests: list[CallRequest]  # owned requests and other keys' decisions, by call id, in time order
    reused: int = 0  # call ids that distinct requests of their key reused
    foreign: int = 0  # decisions of another key under a call id its first key owns

    def warning(self) -> str | None:
        parts = []
        if self.reused:
            parts.append(f"{self.reused} call id(s) were reused by distinct requests (another prompt, or a decision "
                         "after the call's feedback): each request is a row of its own, with the outcomes and "
                         "feedback logged while it was its call's latest request")
        if self.foreign:
            parts.append(f"{self.foreign} decision(s) of another key under a call id its first key owns are left out "
                         "(their feedback is refused)")
        return "; ".join(parts) or None


def _prompt_identity(decision: Mapping[str, Any]) -> Any:
    return decision.get("prompt_sha256", decision.get("prompt"))


def call_requests(records: Iterable[Mapping[str, Any]]) -> CallRequests:
    """The log's records as requests: the rule every reader joins by (``join_records`` here, the
    trainer's ``train/data/decision_log.py``, ``proteus feedback --log``).

    A call id's records are taken in time order (``ts``, ties in the order read: ``supersedes``).
    Its first key owns it (as in the feedback index): a decision of another key starts or continues a
    request that takes no feedback.  A decision of the owner continues the call's latest request (a
    retry decides again) unless it routes another prompt (``prompt_sha256``) or that request already
    has feedback (a retry never follows it): then it starts a request of its own, as a client reusing
    ``x-litellm-call-id`` does.  An outcome belongs to the latest request at or before it whose
    decisions chose its deployment (``outcome_of``), else to the latest; feedback to the owner's
    latest request at or before it.  Records before any decision of their call id are left out."""
    by_call: dict[str, list[tuple[float, int, Mapping[str, Any]]]] = {}
    for seq, record in enumerate(records):
        by_call.setdefault(str(record["call_id"]), []).append((float(record["ts"]), seq, record))
    out = CallRequests([])
    for items in by_call.values():
        items.sort(key=lambda item: item[:2])
        owner, requests, current, numbered = None, [], None, 0
        for _, _, record in items:
            kind = record["type"]
            if kind == "decision":
                key = record.get("key_hash")
                owner = owner or key
                if key and owner != key:
                    out.foreign += 1
                    last = requests[-1] if requests else None
                    if (last is not None and not last.owned and last.decision.get("key_hash") == key
                            and _prompt_identity(last.decision) == _prompt_identity(record)):
                        last.decisions.append(record)
                    else:
                        requests.append(CallRequest([record], number=0))
                    continue
                if current is not None and not current.feedback and \
                        _prompt_identity(current.decision) == _prompt_identity(record):
                    current.decisions.append(record)
                    continue
                numbered += 1
                current = CallRequest([record], number=numbered)
                requests.append(current)
            elif kind == "outcome":
                mine = next((r for r in reversed(requests) if any(outcome_of(d, record) for d in r.decisions)), None)
                mine = mine or (requests[-1] if requests else None)
                if mine is not None:
                    mine.outcomes.append(record)
            elif current is not None:
                current.feedback.append(record)
        out.reused += numbered > 1
        out.requests.extend(requests)
    return out


def join_log(directory: str | Path, every_pick: bool = False) -> list[LoggedDecision]:
    """``join_records`` of the log's files."""
    return join_records(iter_records(directory), every_pick)


def join_records(records: Iterable[Mapping[str, Any]], every_pick: bool = False) -> list[LoggedDecision]:
    """Each request's latest decision (a retry decides again) with the latest outcome of its pick
    (``latest_outcome``: a pick that failed keeps its failure when a fallback group answered after
    it) and its latest feedback, in decision time order; requests as ``call_requests`` reads them (a
    call id distinct requests reused is a row per request, with a warning that counts them).
    Outcomes and feedback without a decision are left out.  ``every_pick``: every decision instead,
    each with its own pick's outcome (a retried call's failed attempts included) and without
    feedback, which labels a call's answer only."""
    grouped = call_requests(records)
    warning = grouped.warning()
    if warning and not every_pick:  # once per report: compliance joins the same records both ways
        logger.warning("PROTEUS decision log: %s", warning)
    joined = []
    for request in grouped.requests:
        if every_pick:
            joined += [LoggedDecision(d, o) for d, o in pick_outcomes(request.decisions, {request.call_id: request.outcomes})]
        elif request.owned:
            feedback = request.latest_feedback
            joined.append(LoggedDecision(request.decision, latest_outcome(request.decision, request.outcomes),
                                         None if feedback is None else feedback["score"]))
    return sorted(joined, key=lambda row: float(row.decision["ts"]))
