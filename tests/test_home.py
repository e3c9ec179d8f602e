"""The suite keeps out of the user's home and out of the checkout (conftest.py gives every store a
private place)."""

from conftest import CHECKOUT_BEFORE, HOME_BEFORE, WATCHED, checkout_extras, folder_state


def test_the_suite_left_the_users_prefect_cache_and_mlflow_folders_as_they_were():
    """Run last (conftest orders it so): every file of ~/.prefect, ~/.cache/adwm, ~/mlruns and
    the checkout's ./mlruns is as it was before the first test, and none was added; and the
    checkout holds no file or folder git does not track that it did not hold before (an
    MLflow ./mlruns, a ./.adwm home, a stray output), the tools' caches aside."""
    changed = {path: sorted(set(folder_state(path).items()) ^ set(HOME_BEFORE[path].items()))
               for path in WATCHED}
    assert {path: files for path, files in changed.items() if files} == {}
    after = checkout_extras()
    if CHECKOUT_BEFORE is not None and after is not None:  # git could say both times (else nothing to compare)
        assert sorted(after - CHECKOUT_BEFORE) == []
