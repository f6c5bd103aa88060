"""The one base class of every error rankgate shows a user: :class:`RankgateError`.

Standard library only, and nothing else of rankgate: every module may import it, rank
processes included.
"""

from __future__ import annotations


class RankgateError(Exception):
    """An error rankgate raises for its caller or its user to see.

    ``except RankgateError`` catches every one of them. The rule, held by
    tests/test_errors.py:

    - **User-facing errors derive from it**: bad input (a marker, an option, a profile, a
      file), a refused request, a command, job or pool that failed, a test failed on its
      ranks, a broken invariant of the harness reported to the user. Each keeps the builtin
      base its callers catch as well (``class ProfileError(RankgateError, ValueError)``),
      so ``except ValueError`` still sees a bad value.
    - **Internal control flow stays outside**: an exception raised and caught inside
      rankgate to carry a decision between its own parts, never shown as itself. Those
      derived from BaseException to stop a run or a rank (they must pass ``except
      Exception``), a private class (``_Name``) caught in the module that raises it, and
      the few others tests/test_errors.py lists in ``INTERNAL`` with where each is caught.

    The message names the problem and the fix.
    """
