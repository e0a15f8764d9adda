"""Argument checks of the public API and of every other way values come in (CLI options, table lists).

A public function called with a wrong type or value raises `BadInputError`
naming the argument, never Python's or Arrow's own error from deep inside
(an `AttributeError` on a string passed as the table, a string iterated as a
list of regions). The checks read the functions' own type hints, so they
cannot drift from the signatures: `@checked` on a function, `check_fields` in
a dataclass's `__post_init__`. A range is part of the hint
(`Annotated[int, Range(1)]`), and `whole` and `finite` are the one check of
a number the CLI's options and the Dagster table list use too.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import difflib
import functools
import inspect
import math
import sys
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from memwal_core.errors import BadInputError, shown

INT64_MAX = 2**63 - 1
F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


def region_id(name: str, value: object) -> str:
    """`value` if it is a region id: a UUID in its canonical lower-case form."""
    import uuid

    if not isinstance(value, str):
        raise BadInputError(f"{name} must be a region id (a UUID), not {shown(value)}")
    try:
        canonical = str(uuid.UUID(value)) == value
    except ValueError:
        canonical = False
    if not canonical:
        raise BadInputError(f"{name} {value!r} is not a region id (a lower-case UUID)")
    return value


def _bounds(minimum: float, maximum: float) -> str:
    """`at least 1`, or `from 0 to 1`: a range in words (no upper bound shown when it is no real limit)."""
    low, high = (int(b) if math.isfinite(b) and b == int(b) else b for b in (minimum, maximum))
    return f"at least {low}" if high in (INT64_MAX, math.inf) else f"from {low} to {high}"


def whole(name: str, value: object, minimum: int = 1, maximum: int = INT64_MAX) -> int:
    """`value` if it is a whole number from `minimum` to `maximum` (not a bool, not a float)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadInputError(f"{name} must be a whole number, not {shown(value)}")
    if not minimum <= value <= maximum:
        raise BadInputError(f"{name} must be {_bounds(minimum, maximum)}, not {value}")
    return value


def finite(name: str, value: object, minimum: float = 0.0, maximum: float = math.inf) -> float:
    """`value` if it is a finite number from `minimum` to `maximum` (NaN compares false with every bound)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadInputError(f"{name} must be a number, not {shown(value)}")
    if not math.isfinite(value) or not minimum <= value <= maximum:
        raise BadInputError(f"{name} must be a finite number {_bounds(minimum, maximum)}, not {value}")
    return value


@dataclass(frozen=True)
class Range:
    """A range a number argument must be in; its hint's type says whole or any finite number."""

    minimum: float = 1
    maximum: float = INT64_MAX

    def check(self, name: str, value: object, whole_number: bool) -> None:
        if whole_number:
            whole(name, value, int(self.minimum), int(self.maximum))
        else:
            finite(name, value, self.minimum, self.maximum)


_WORDS: dict[Any, str] = {int: "a whole number", float: "a number", bool: "True or False", str: "text"}


def _describe(hint: Any) -> str:
    """A type hint in words: `str`, `list of str`, `MemWalTable or None`."""
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        return _describe(typing.get_args(hint)[0])
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(arg) for arg in typing.get_args(hint))
    if origin is typing.Literal:
        return " or ".join(repr(arg) for arg in typing.get_args(hint))
    if hint is type(None):
        return "None"
    if hint in _WORDS:
        return _WORDS[hint]
    if origin is not None and origin is not collections.abc.Callable:
        args = [a for a in typing.get_args(hint) if a is not Ellipsis]
        name = "mapping" if issubclass(origin, Mapping) else "list"
        return f"{name} of {' to '.join(_describe(a) for a in args)}" if args else name
    if origin is collections.abc.Callable or hint is collections.abc.Callable:
        return "callable"
    return getattr(hint, "__name__", str(hint))


def _fits(name: str, value: object, hint: Any) -> bool:
    """Whether `value` fits `hint`; a range in the hint that the value breaks is refused here, by name."""
    origin = typing.get_origin(hint)
    if hint is Any or isinstance(hint, TypeVar | str):
        return True
    if origin is typing.Annotated:
        base, *extras = typing.get_args(hint)
        if not _fits(name, value, base):
            return False
        for extra in extras:
            if isinstance(extra, Range):
                extra.check(name, value, whole_number=base is int)
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_fits(name, value, arg) for arg in typing.get_args(hint))
    if origin is typing.Literal:
        return value in typing.get_args(hint)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if origin is collections.abc.Callable or hint is collections.abc.Callable:
        return callable(value)
    if origin is not None:
        return _fits_collection(name, value, origin, typing.get_args(hint))
    if isinstance(hint, type):
        try:
            return isinstance(value, hint)
        except TypeError:  # a Protocol that cannot be checked at run time
            return True
    return True


def _fits_collection(name: str, value: object, origin: type, args: tuple[Any, ...]) -> bool:
    """A list, tuple, set, iterable or mapping: never a string; items checked when iterating is harmless."""
    if isinstance(value, str | bytes) or not isinstance(value, origin):
        return False
    if isinstance(value, Mapping) and len(args) == 2:
        return all(_fits(name, k, args[0]) and _fits(name, v, args[1]) for k, v in value.items())
    if isinstance(value, list | tuple | set | frozenset) and len(args) >= 1:
        return all(_fits(name, item, args[0]) for item in value)
    return True  # a generator: checking it would consume it


def check_value(name: str, value: object, hint: Any) -> None:
    """Refuse `value` unless it fits `hint`, naming `name`."""
    if not _fits(name, value, hint):
        raise BadInputError(f"{name} must be {_describe(hint)}, not {shown(value)}")


def _resolved(annotation: Any, namespace: dict[str, Any]) -> Any:
    """An annotation (text under `from __future__ import annotations`) as a hint; Any if it cannot be."""
    if not isinstance(annotation, str):
        return annotation
    try:
        return eval(annotation, namespace)  # our own modules' annotations, never user input
    except (NameError, AttributeError, TypeError, SyntaxError):
        return Any  # a name imported for type checking only


def checked(function: F) -> F:
    """Refuse a call whose arguments do not fit `function`'s signature or hints, naming the argument."""
    signature = inspect.signature(function)
    name = function.__qualname__.replace(".__init__", "")

    @functools.cache
    def hints() -> dict[str, Any]:
        namespace = vars(sys.modules[function.__module__])
        return {
            p.name: _resolved(p.annotation, namespace)
            for p in signature.parameters.values()
            if p.annotation is not inspect.Parameter.empty
            and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        }

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise BadInputError(f"{name}(): {exc}") from None
        for argument, hint in hints().items():
            if argument in bound.arguments and argument != "self":
                check_value(f"{name}() argument {argument}", bound.arguments[argument], hint)
        return function(*args, **kwargs)

    return typing.cast(F, call)


def check_fields(instance: object) -> None:
    """Refuse a dataclass whose fields do not fit their hints (call it first in `__post_init__`)."""
    cls = type(instance)
    namespace = vars(sys.modules[cls.__module__])
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        hint = _resolved(field.type, namespace)
        check_value(f"{cls.__name__} {field.name}", getattr(instance, field.name), hint)


def build(cls: Callable[..., T], values: Mapping[str, Any]) -> T:
    """`cls(**values)`, with an unknown name refused as bad input that suggests the closest known one."""
    known = list(inspect.signature(cls).parameters)
    for key in values:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise BadInputError(f"{getattr(cls, '__name__', cls)} has no option {key!r}{hint}")
    return cls(**values)


# The ranges arguments share: a count of at least one, a number of at least zero, a duration.
Count = typing.Annotated[int, Range(1)]
Amount = typing.Annotated[int, Range(0)]
Seconds = typing.Annotated[float, Range(0, math.inf)]
