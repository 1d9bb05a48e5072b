"""Size limits for every string the server stores or fans out, and the checks that enforce them.

Upstream conveyord bounds none of these (server-behavior.md §10.1); this server does, so one client
cannot make every row, listing and Dispatch carry megabytes of names. Lengths are UTF-8 bytes.
Producer and operator input beyond a limit is ``invalid_argument`` naming the field; free text a
worker reports (``Result.error_msg``, ``Progress.message``) is truncated instead, because a long
traceback is not a mistake worth failing a task for.

The table is documented in docs/server-engine.md ("Limits").
"""

from __future__ import annotations

from collections.abc import Mapping

from conveyor_sdk.errors import InvalidArgument

__all__ = [
    "MAX_HELLO_BATCH_TYPES",
    "MAX_HELLO_QUEUES",
    "MAX_KEY",
    "MAX_METADATA_ENTRIES",
    "MAX_METADATA_KEY",
    "MAX_METADATA_TOTAL",
    "MAX_METADATA_VALUE",
    "MAX_NAME",
    "MAX_TEXT",
    "check_map",
    "check_size",
    "truncate",
    "utf8_len",
]

MAX_NAME = 255  # queue, task type, task id, group, concurrency_key, content_type, cron id
MAX_KEY = 1024  # unique_key
MAX_METADATA_ENTRIES = 64  # metadata / Hello labels: entries
MAX_METADATA_KEY = 255  # ... one key
MAX_METADATA_VALUE = 8192  # ... one value (the W3C baggage header limit)
MAX_METADATA_TOTAL = 64 * 1024  # ... all keys and values together
MAX_TEXT = 16 * 1024  # Result.error_msg / Progress.message are truncated to this
MAX_HELLO_QUEUES = 10_000  # queues one Hello may declare
MAX_HELLO_BATCH_TYPES = 1_000  # batch_types one Hello may declare
_TRUNCATED = " [truncated]"


def utf8_len(text: str) -> int:
    """UTF-8 length of ``text``, without encoding when the answer is obvious."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))


def check_size(field: str, text: str, limit: int) -> None:
    """InvalidArgument ``<field> is N bytes, the maximum is <limit>`` when ``text`` is too long."""
    if len(text) * 4 <= limit:  # a code point is at most 4 bytes: surely within the limit
        return
    size = utf8_len(text)
    if size > limit:
        raise InvalidArgument(f"{field} is {size} bytes, the maximum is {limit}")


def check_map(field: str, entries: Mapping[str, str]) -> None:
    """Bound a string map (task metadata, Hello labels): entries, key and value sizes, total size."""
    if not entries:
        return
    if len(entries) > MAX_METADATA_ENTRIES:
        raise InvalidArgument(f"{field} has {len(entries)} entries, the maximum is {MAX_METADATA_ENTRIES}")
    total = 0
    for key, value in entries.items():
        key_size, value_size = utf8_len(key), utf8_len(value)
        if key_size > MAX_METADATA_KEY:
            raise InvalidArgument(f"{field} key is {key_size} bytes, the maximum is {MAX_METADATA_KEY}")
        if value_size > MAX_METADATA_VALUE:
            raise InvalidArgument(
                f"{field} value for key {key!r} is {value_size} bytes, the maximum is {MAX_METADATA_VALUE}"
            )
        total += key_size + value_size
    if total > MAX_METADATA_TOTAL:
        raise InvalidArgument(f"{field} totals {total} bytes, the maximum is {MAX_METADATA_TOTAL}")


def truncate(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes (on a character boundary), marked when cut."""
    if len(text) * 4 <= limit or utf8_len(text) <= limit:
        return text
    room = limit - len(_TRUNCATED)
    head = text.encode("utf-8", "surrogatepass")[:room].decode("utf-8", "ignore")
    return head + _TRUNCATED
