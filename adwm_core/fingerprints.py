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
import json
import os
import threading
from collections.abc import Iterable

PACKAGE = "adwm_core"
_ROOT = os.path.dirname(os.path.abspath(__file__))
_DIGESTS = os.path.join(_ROOT, "__pycache__", "code-digests")  # see _parsed
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


def _import_candidates(module: str, tree: ast.Module) -> set[str]:
    """Every name ``module`` imports, or imports from, as an absolute dotted name (a candidate
    module: :func:`_package_modules` keeps those of ``adwm_core``)."""
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
    return found


def _package_modules(candidates: Iterable[str]) -> frozenset[str]:
    """The ``adwm_core`` modules among ``candidates``, each with the packages above it."""
    modules = {name for name in candidates if module_file(name) is not None}
    return frozenset(modules | {".".join(name.split(".")[:i]) for name in modules for i in range(1, name.count(".") + 1)})


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
    """(digest of the module's code, the ``adwm_core`` modules it imports). Both are kept per
    module in ``__pycache__/code-digests/`` beside the package, under the SHA-256 of the source
    they were read from, so a process parses only the files that changed since (as Python keeps
    its bytecode); where that folder cannot be written, every process parses."""
    with open(module_file(module), "rb") as f:
        source = f.read()
    source_hash = hashlib.sha256(source).hexdigest()
    kept = _kept_digest(module, source_hash)
    if kept is None:
        with _PARSING:
            tree = ast.parse(source)
        kept = (hashlib.sha256(ast.dump(_without_docstrings(tree)).encode()).hexdigest(),
                sorted(_import_candidates(module, tree)))
        _keep_digest(module, source_hash, kept)
    return kept[0], _package_modules(kept[1])


def _digest_file(module: str) -> str:
    return os.path.join(_DIGESTS, f"{module}.json")


def _kept_digest(module: str, source_hash: str) -> tuple[str, list[str]] | None:
    try:
        with open(_digest_file(module), encoding="utf-8") as f:
            kept = json.load(f)
        return (kept["digest"], kept["imports"]) if kept["source"] == source_hash else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _keep_digest(module: str, source_hash: str, kept: tuple[str, list[str]]) -> None:
    from .data.io import atomic_open  # pyarrow and fsspec load only when a digest is written

    try:
        with atomic_open(_digest_file(module), "w") as f:
            json.dump({"source": source_hash, "digest": kept[0], "imports": kept[1]}, f)
    except OSError:
        pass  # a read-only install: parse every time


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
