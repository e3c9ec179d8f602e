"""Validated, atomic Parquet IO on any fsspec filesystem (local paths, ``s3://``, ``memory://``)."""

from __future__ import annotations

import posixpath
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager

import fsspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .schemas import Contract


class SchemaError(ValueError):
    """A table or file does not match its data contract."""


def _string_like(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _compatible(got: pa.DataType, expected: pa.DataType) -> bool:
    if got == expected or (_string_like(got) and _string_like(expected)):
        return True
    is_list = (pa.types.is_list, pa.types.is_large_list)
    if any(f(got) for f in is_list) and any(f(expected) for f in is_list):
        return _compatible(got.value_type, expected.value_type)
    return pa.types.is_null(got)  # an all-null column of a nullable field is checked below


def validate(table: pa.Table, contract: Contract, source: str = "table") -> pa.Table:
    """Check ``table`` against ``contract``; return it with exactly the contract's columns and types."""
    for field in contract.schema:
        if field.name not in table.column_names and field.name in contract.optional:
            table = table.append_column(field.name, pa.nulls(table.num_rows, field.type))
        if field.name not in table.column_names:
            raise SchemaError(
                f"{source}: missing column '{field.name}' ({field.type}) required by the {contract.name} contract"
            )
        column = table.column(field.name)
        if not _compatible(column.type, field.type):
            raise SchemaError(
                f"{source}: column '{field.name}' has type {column.type}, "
                f"but the {contract.name} contract says {field.type}"
            )
        if not field.nullable and column.null_count:
            raise SchemaError(f"{source}: column '{field.name}' has {column.null_count} null value(s); it is required")
        if field.name in contract.allowed:
            values = {v for v in column.unique().to_pylist() if v is not None}
            bad = sorted(values - contract.allowed[field.name])
            if bad:
                raise SchemaError(
                    f"{source}: column '{field.name}' has value(s) {bad}; "
                    f"allowed: {sorted(contract.allowed[field.name])}"
                )
    return table.select(contract.columns).cast(contract.schema)


def behaviour_rows(trajectories: pa.Table) -> pa.Table:
    """The steps logged by behaviour policies (``source`` = behavior)."""
    return trajectories.filter(pc.equal(trajectories["source"], "behavior"))


def table_from_rows(rows: Iterable[Mapping], contract: Contract) -> pa.Table:
    """Build a contract table from row dicts (missing keys become nulls, then fail validation if required)."""
    try:
        table = pa.Table.from_pylist(list(rows), schema=contract.schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
        raise SchemaError(f"{contract.name} rows do not fit the contract: {err}") from err
    return validate(table, contract, f"{contract.name} rows")


def check_output(path: str, *, overwrite: bool, hint: str = "pass overwrite=True to replace it") -> None:
    """Refuse an existing ``path`` unless ``overwrite``: stages call it before any work starts."""
    fs, fs_path = fsspec.core.url_to_fs(path)
    if fs.exists(fs_path) and not overwrite:
        raise FileExistsError(f"{path} already exists; {hint}")


@contextmanager
def atomic_open(path: str, mode: str = "wb") -> Iterator:
    """A file handle on a temporary sibling of ``path``, renamed to ``path`` only when the
    ``with`` block ends without error: an interrupted write leaves nothing under ``path``."""
    fs, fs_path = fsspec.core.url_to_fs(path)
    parent, base = posixpath.split(fs_path)
    if parent:
        fs.makedirs(parent, exist_ok=True)
    tmp = posixpath.join(parent, f".{base}.tmp-{uuid.uuid4().hex}")
    try:
        with fs.open(tmp, mode) as f:
            yield f
        fs.mv(tmp, fs_path)
    except BaseException:
        if fs.exists(tmp):
            fs.rm(tmp)
        raise


def write_table(table: pa.Table, path: str, contract: Contract, *, overwrite: bool = False) -> pa.Table:
    """Validate and write ``table`` to ``path`` atomically (temporary name, then rename);
    returns the validated table.

    An interrupted write leaves no file under ``path``; an existing file is
    kept unless ``overwrite`` is set.
    """
    table = validate(table, contract, path)
    check_output(path, overwrite=overwrite)
    with atomic_open(path) as f:
        pq.write_table(table, f)
    return table


def read_table(path: str, contract: Contract) -> pa.Table:
    """Read and validate a contract file; errors name the file and the column."""
    fs, fs_path = fsspec.core.url_to_fs(path)
    if not fs.exists(fs_path):
        raise FileNotFoundError(f"{path}: no {contract.name} file here (has the stage that writes it run?)")
    try:
        with fs.open(fs_path, "rb") as f:
            table = pq.read_table(f)
    except (pa.ArrowInvalid, OSError) as err:
        raise SchemaError(f"{path}: not a readable Parquet file ({err})") from err
    return validate(table, contract, path)
