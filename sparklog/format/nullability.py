"""The declared nullability of a typed topic's schema, enforced on records.

A typed topic's schema says which columns (and which struct children, list elements and
map values) are ``not null``. Arrow does not enforce that on the data it holds, so
sparklog does: the producer refuses a record that leaves such a field null, and the
broker refuses a frame whose body has a null there (:func:`check_not_null` on its record
batch). A frame whose own Arrow schema declares such a field nullable is fine as long as
it holds no null in it. Spark reads the declared nullability (``nullable=False``).

Cost: only the columns the schema constrains are looked at; a constrained column
without nulls costs one ``null_count`` per level (nested levels are looked at only
below a constraint).
"""

from __future__ import annotations

import pyarrow as pa

from ..errors import SchemaMismatchError


def _constrained(field: pa.Field) -> bool:
    """True when ``field`` or a field nested in it is declared not null."""
    return not field.nullable or any(_constrained(c) for c in _children(field.type))


def _children(t: pa.DataType) -> list:
    if pa.types.is_struct(t):
        return [t.field(i) for i in range(t.num_fields)]
    if pa.types.is_map(t):
        return [t.item_field]
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return [t.value_field]
    return []


def constrained_fields(schema: pa.Schema | None) -> list[pa.Field]:
    """The top-level fields of ``schema`` that are, or contain, a not-null field."""
    if schema is None:
        return []
    return [f for f in schema if _constrained(f)]


def _first_null(arr) -> int:
    import pyarrow.compute as pc

    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    return pc.indices_nonzero(pc.is_null(arr))[0].as_py()


def _violation(arr, field: pa.Field, path: str):
    """(path, row) of the first null that ``field`` forbids in ``arr``, or None."""
    if not field.nullable and arr.null_count:
        return path, _first_null(arr)
    t = field.type
    if isinstance(arr, pa.ChunkedArray):
        if not any(_constrained(c) for c in _children(t)):
            return None
        arr = arr.combine_chunks()
    if pa.types.is_struct(t) and isinstance(arr, pa.StructArray):
        rows = None
        if arr.null_count:  # children under a null struct are not values
            import pyarrow.compute as pc

            rows = pc.indices_nonzero(pc.is_valid(arr))
        for child in _children(t):
            if not _constrained(child):
                continue
            try:
                sub = arr.field(child.name)
            except KeyError:
                continue  # a shape the cast to the topic schema refuses anyway
            if rows is not None:
                sub = sub.take(rows)
            found = _violation(sub, child, f"{path}.{child.name}")
            if found is not None:
                row = found[1] if rows is None else rows[found[1]].as_py()
                return found[0], row
        return None
    child = _children(t)
    if child and _constrained(child[0]) and hasattr(arr, "flatten"):
        import pyarrow.compute as pc

        if pa.types.is_map(t):  # as the list of its values
            offsets = arr.offsets
            first, last = offsets[0].as_py(), offsets[-1].as_py()
            arr = pa.ListArray.from_arrays(pc.subtract(offsets, first),
                                           arr.items.slice(first, last - first),
                                           mask=pc.is_null(arr))
        values = arr.flatten()
        found = _violation(values, child[0], f"{path}[]")
        if found is not None:
            parents = pc.list_parent_indices(arr)
            row = parents[found[1]].as_py() if len(parents) == len(values) else -1
            return found[0], row
    return None


def first_violation(data, fields: list[pa.Field]):
    """``(field path, row)`` of the first null a not-null field of ``fields`` (from
    :func:`constrained_fields`) forbids in ``data`` (a RecordBatch or Table whose columns
    are looked up by name), or None. Columns ``data`` lacks are skipped."""
    names = data.schema.names
    for field in fields:
        if field.name not in names:
            continue
        found = _violation(data.column(names.index(field.name)), field, field.name)
        if found is not None:
            return found
    return None


def check_not_null(data, fields: list[pa.Field], where: str, row_offset: int = 0) -> None:
    """Raise SchemaMismatchError naming the field and the record when ``data`` has a null
    where ``fields`` (:func:`constrained_fields`) declare ``not null``. ``where`` says
    whose data it is; ``row_offset`` is added to the record index in the message."""
    found = first_violation(data, fields)
    if found is not None:
        path, row = found
        raise SchemaMismatchError(
            f"{where}: field {path!r} is declared not null but record {row + row_offset} "
            f"has a null there")


def row_violation(row: dict, fields: list[pa.Field]) -> str | None:
    """The path of the first field of ``fields`` (:func:`constrained_fields`) that the
    Python row ``row`` (a dict of column values, as ``Producer.send`` takes) leaves null
    although it is declared not null, or None."""
    for field in fields:
        path = _value_violation(row.get(field.name), field, field.name)
        if path is not None:
            return path
    return None


def _value_violation(value, field: pa.Field, path: str) -> str | None:
    if value is None:
        return None if field.nullable else path
    t = field.type
    if pa.types.is_struct(t) and isinstance(value, dict):
        for child in _children(t):
            if _constrained(child):
                found = _value_violation(value.get(child.name), child, f"{path}.{child.name}")
                if found is not None:
                    return found
    elif pa.types.is_map(t):
        child = t.item_field
        if _constrained(child):
            items = value.values() if isinstance(value, dict) else \
                (v for _, v in value) if isinstance(value, (list, tuple)) else ()
            for item in items:
                found = _value_violation(item, child, f"{path}[]")
                if found is not None:
                    return found
    elif _children(t) and isinstance(value, (list, tuple)):
        child = _children(t)[0]
        if _constrained(child):
            for item in value:
                found = _value_violation(item, child, f"{path}[]")
                if found is not None:
                    return found
    return None


__all__ = ["check_not_null", "constrained_fields", "first_violation", "row_violation"]
