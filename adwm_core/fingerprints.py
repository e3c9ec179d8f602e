"""Fingerprints for stage keys: of the code that computes a stage, and of the files a setting
names — each says *what* was used, never *where* it lay.

- :func:`code_fingerprint`: SHA-256 over the syntax trees (docstrings left out, so comments
  and documentation never cost a recompute) of a module of ``adwm_core`` and every module of
  ``adwm_core`` it imports, transitively — read statically from the source files, so it costs
  no import. Imports under ``if TYPE_CHECKING:`` are not followed (they compute nothing), and
  neither are modules a registry loads by name at run time (``envs/registry.py``): a stage
  that runs its cell's environment adds that environment's module itself.
- :func:`content_fingerprint`: a file or folder by its name and content — each file's relative
  path, size and SHA-256 of its first and last MiB (the whole file when smaller), hidden files
  left out — memoised per process on the files' sizes and modification times.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import os
import threading
from collections.abc import Iterable

PACKAGE = "adwm_core"
_ROOT = os.path.dirname(os.path.abspath(__file__))
_SAMPLE = 1 << 20  # bytes hashed at each end of a large file
# Stage keys are computed on the task runner's threads, and CPython 3.11's AST construction
# keeps its recursion depth in state shared between threads: two parses at once can fail with
# "SystemError: AST constructor recursion depth mismatch" (python/cpython#106905).
_PARSING = threading.Lock()


def module_file(module: str) -> str | None:
    """The source file of ``adwm_core`` module ``module`` (a package's ``__init__.py``), or None."""
    if module != PACKAGE and not module.startswith(PACKAGE + "."):
        return None
    base = os.path.join(_ROOT, *module.split(".")[1:])
    for path in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(path):
            return path
    return None


def _is_package(module: str) -> bool:
    return (module_file(module) or "").endswith("__init__.py")


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imported(module: str, tree: ast.Module) -> set[str]:
    """The ``adwm_core`` modules ``module`` imports (each with the packages above it)."""
    package = module if _is_package(module) else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(nodes: Iterable[ast.AST]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and _type_checking_only(node):
                visit(node.orelse)
                continue
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                found.add(source)
                found.update(f"{source}.{alias.name}" for alias in node.names)  # `from pkg import submodule`
            visit(ast.iter_child_nodes(node))

    visit(tree.body)
    modules = {name for name in found if module_file(name) is not None}
    return modules | {".".join(name.split(".")[:i]) for name in modules for i in range(1, name.count(".") + 1)}


def _without_docstrings(tree: ast.Module) -> ast.Module:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return tree


@functools.lru_cache(maxsize=None)
def _parsed(module: str) -> tuple[str, frozenset[str]]:
    """(digest of the module's code, the ``adwm_core`` modules it imports)."""
    with open(module_file(module), encoding="utf-8") as f, _PARSING:
        tree = ast.parse(f.read())
    imports = frozenset(_imported(module, tree))
    digest = hashlib.sha256(ast.dump(_without_docstrings(tree)).encode()).hexdigest()
    return digest, imports


def code_closure(*modules: str) -> list[str]:
    """``modules`` and every ``adwm_core`` module they import, transitively, sorted."""
    unknown = [m for m in modules if module_file(m) is None]
    if unknown:
        raise ValueError(f"no module {unknown} in {PACKAGE}")
    seen: set[str] = set()
    todo = [*modules, PACKAGE]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(_parsed(module)[1])
    return sorted(seen)


def code_fingerprint(*modules: str) -> str:
    """SHA-256 of the code of ``modules`` and of everything of ``adwm_core`` they import."""
    digest = hashlib.sha256()
    for module in code_closure(*modules):
        digest.update(f"{module}:{_parsed(module)[0]}\n".encode())
    return digest.hexdigest()


def content_fingerprint(path: str) -> str:
    """SHA-256 of the file or folder at ``path`` by name and content (see the module docstring)."""
    path = os.path.realpath(os.path.expanduser(path))
    if os.path.isfile(path):
        files = [(os.path.basename(path), path)]
    else:
        files = []
        for folder, subfolders, names in os.walk(path):
            subfolders[:] = sorted(s for s in subfolders if not s.startswith("."))
            files += [(os.path.relpath(os.path.join(folder, n), path), os.path.join(folder, n))
                      for n in names if not n.startswith(".")]
        files.sort()
    signature = tuple((name, *_stat(full)) for name, full in files)
    return _content_digest(signature, tuple(full for _, full in files))


def _stat(path: str) -> tuple[int, int]:
    status = os.stat(path)
    return status.st_size, status.st_mtime_ns


@functools.lru_cache(maxsize=256)
def _content_digest(signature: tuple, paths: tuple[str, ...]) -> str:
    digest = hashlib.sha256()
    for (name, size, _), path in zip(signature, paths):
        digest.update(f"{name}\0{size}\0".encode())
        with open(path, "rb") as f:
            if size <= 2 * _SAMPLE:
                digest.update(f.read())
            else:
                digest.update(f.read(_SAMPLE))
                f.seek(size - _SAMPLE)
                digest.update(f.read(_SAMPLE))
    return digest.hexdigest()
