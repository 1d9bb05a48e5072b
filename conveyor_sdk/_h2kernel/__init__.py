"""The HTTP/2 kernel: the one package that touches h2, hpack or hyperframe internals, or asyncio's.

Everything else in the tree (the worker session :mod:`conveyor_sdk._transport`, the producer
client :mod:`conveyor_sdk._client.h2conn`, the reference server's ``_http`` package and
``ScriptedPeer``) builds its connections here and uses only h2's public API besides
(``tests/test_h2_kernel_boundary.py`` fails on any private name of those libraries outside this
package).

Two paths, chosen once per process (:mod:`.probe`):

* **fast**: frames of ordinary requests and answers are read and written without h2's generic
  frame code, headers through caching HPACK codecs, job tasks started eagerly. It reads and writes
  h2 internals, so it is taken only when the import-time checks (:mod:`.checks`) find every one
  of them there and behaving as with the pinned versions (pyproject: ``h2~=4.4.1``,
  ``hpack~=4.2.0``, ``hyperframe~=6.1.0``).
* **public**: h2's public API only; slower, and correct. Taken when ``CONVEYOR_H2_PUBLIC=1``,
  when a check fails (logged once, naming what failed and the installed versions), or after
  fast-path code failed at run time (that connection fails with an ``Internal`` error naming the
  versions; later connections take the public path).

Modules: :mod:`.client` / :mod:`.client_fast` / :mod:`.client_answer` (client connection, codecs,
fast send and read, answers' stream moves and acks),
:mod:`.server` / :mod:`.server_conn` (server connection, refusing rule, fast request read, sends
and acks), :mod:`.guard` (the server's frame guard on either path), :mod:`.hpackfast` (the fast
HPACK decoder), :mod:`.walker` (frame boundaries for the public path), :mod:`.streams`,
:mod:`.eager` (coroutines whose first step runs at once), :mod:`.peer` (ScriptedPeer's connection).
"""

from conveyor_sdk._h2kernel import checks as _checks
from conveyor_sdk._h2kernel import probe

_checks.run()

__all__ = ["probe"]
