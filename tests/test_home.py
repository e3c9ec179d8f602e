"""The suite keeps out of the user's home and out of the checkout (conftest.py gives every store a
private place, and fails the run where anything was left behind: ``left_behind``), and hands its
longest files out first (``LONGEST_FIRST``)."""

import os
import uuid

import pytest
from conftest import CHECKOUT, CHECKOUT_BEFORE, LONGEST_FIRST, left_behind


def test_the_end_of_run_check_names_a_file_left_in_the_checkout_and_forgets_it_once_removed():
    """What the run's last check reads: a file git does not track, added to the checkout while
    the suite runs, is named; removed, it is not."""
    if CHECKOUT_BEFORE is None:
        pytest.skip(f"git cannot list what {CHECKOUT} does not track (not a git checkout), so the check reads no checkout")
    stray = os.path.join(CHECKOUT, f"adwm-test-stray-{uuid.uuid4().hex}.txt")
    try:
        with open(stray, "w") as out:
            out.write("left by a test")
        assert [line for line in left_behind() if os.path.basename(stray) in line] != []
    finally:
        os.remove(stray)
    assert [line for line in left_behind() if os.path.basename(stray) in line] == []


def test_the_files_handed_out_first_exist_and_the_run_orders_them_so(request):
    """A renamed or removed test file in LONGEST_FIRST would silently lose its place in the order
    the two workers take files in; the session's items follow that order."""
    tests = os.path.dirname(os.path.abspath(__file__))
    assert [name for name in LONGEST_FIRST if not os.path.exists(os.path.join(tests, name))] == []
    files = list(dict.fromkeys(item.path.name for item in request.session.items))
    ranked = [name for name in files if name in LONGEST_FIRST]
    assert ranked == sorted(ranked, key=LONGEST_FIRST.index) and files[:len(ranked)] == ranked
