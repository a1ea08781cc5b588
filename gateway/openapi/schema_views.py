"""Schema views: mirror types of msgspec Structs that msgspec can generate
JSON Schema for, used to generate the OpenAPI document's component schemas.

msgspec cannot generate schemas for two things the gateway's Structs use,
so the document is generated from *schema views*: mirror Structs built by
:class:`SchemaViews` with the same names, fields, bounds, defaults and
docstrings, in which a ``msgspec.Raw`` field (any JSON value; its default
``null``) becomes ``Any`` with default ``None``, and an untagged union of
Structs (e.g. a response's ``output`` items) becomes a union tagged by the
members' constant ``type`` field, which every member always encodes. The
views are used for the document only, never for decoding.
"""

from __future__ import annotations

import types
import typing
from typing import Annotated, Any, Iterable, Literal, Union

import msgspec
from msgspec import NODEFAULT, Raw


def _is_struct(tp: Any) -> bool:
    """Whether ``tp`` is a msgspec Struct class."""
    return isinstance(tp, type) and issubclass(tp, msgspec.Struct)


def _is_union(tp: Any) -> bool:
    """Whether ``tp`` is a ``Union[...]`` / ``X | Y`` type."""
    return typing.get_origin(tp) in (Union, types.UnionType)


def _structs(members: Iterable[Any]) -> list[type]:
    """The Struct classes among union ``members`` (``Annotated`` wrappers
    looked through)."""
    found = []
    for member in members:
        while typing.get_origin(member) is Annotated:
            member = typing.get_args(member)[0]
        if _is_struct(member):
            found.append(member)
    return found


def _untagged_structs(members: Iterable[Any]) -> list[type]:
    """The Struct classes among union ``members`` that are object-like and
    carry no tag."""
    return [
        cls
        for cls in _structs(members)
        if cls.__struct_config__.tag is None and not cls.__struct_config__.array_like  # type: ignore[attr-defined]
    ]


class SchemaViews:
    """Mirror types of Structs that msgspec can generate JSON Schema for.

    ``view(tp, encoded)`` returns ``tp`` with every Struct replaced by its
    view, built once per class and use:

    - ``Raw`` becomes ``Any`` (a ``Raw`` default: the value it encodes);
    - a Struct that is a member of an untagged union of two or more Structs
      anywhere under ``roots`` (found by the constructor's walk) gets
      ``tag_field="type"``, its tag being its ``type`` field's string
      default;
    - ``encoded`` (a type the server only sends): every field is required,
      as msgspec always encodes it, unless the Struct has
      ``omit_defaults``;
    - decoded (a type the server only reads): a tagged Struct that is not
      one of several Structs of a union keeps its tag as an optional field
      (``<Name>Standalone``), as msgspec requires the tag only to choose
      among Structs.

    Raises (from ``view``):
        TypeError: a Struct in an untagged union has no ``type`` field with a
        string default, so no tag can be derived.
    """

    TAG_FIELD = "type"

    def __init__(self, roots: Iterable[Any]) -> None:
        self._tagged: set[type] = set()
        self._views: dict[tuple[type, str], Any] = {}
        seen: set[type] = set()
        for root in roots:
            self._find_untagged_unions(root, seen)

    def _find_untagged_unions(self, tp: Any, seen: set[type]) -> None:
        """Record in ``self._tagged`` the members of untagged Struct unions
        reachable from ``tp``."""
        if _is_struct(tp):
            if tp in seen:
                return
            seen.add(tp)
            for info in msgspec.structs.fields(tp):
                self._find_untagged_unions(info.type, seen)
            return
        args = typing.get_args(tp)
        if _is_union(tp):
            members = _untagged_structs(args)
            if len(members) >= 2:
                self._tagged.update(members)
        if typing.get_origin(tp) is Annotated:
            args = args[:1]
        for arg in args:
            self._find_untagged_unions(arg, seen)

    def view(self, tp: Any, encoded: bool, in_union: bool = False) -> Any:
        """``tp`` with Structs replaced by their views and ``Raw`` by ``Any``
        (``in_union``: ``tp`` is one of several Structs of a union, where
        msgspec needs the tag to tell them apart)."""
        if tp is Raw:
            return Any
        if _is_struct(tp):
            return self._struct_view(tp, encoded, in_union)
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        if origin is None or not args:
            return tp
        if origin is Annotated:
            return Annotated[(self.view(args[0], encoded, in_union), *tp.__metadata__)]  # type: ignore[misc]
        if origin is Literal:
            return tp
        union = _is_union(tp)
        several = union and len(_structs(args)) >= 2
        viewed = tuple(self.view(arg, encoded, several) for arg in args)
        if union:
            return Union[viewed]  # type: ignore[return-value]
        return origin[viewed if len(viewed) > 1 else viewed[0]]

    def _struct_view(self, cls: type, encoded: bool, in_union: bool) -> Any:
        """The (cached) view of Struct ``cls`` for this use."""
        config = cls.__struct_config__  # type: ignore[attr-defined]
        tag_field, tag = config.tag_field, config.tag
        standalone = not encoded and tag is not None and not in_union
        use = "encoded" if encoded else "standalone" if standalone else "decoded"
        cached = self._views.get((cls, use))
        if cached is not None:
            return cached
        fields = list(msgspec.structs.fields(cls))  # type: ignore[arg-type]
        name = cls.__name__
        if cls in self._tagged:
            tag_field, tag = self.TAG_FIELD, self._constant_type(cls, fields)
            fields = [f for f in fields if f.name != self.TAG_FIELD]
        # A placeholder first, so that self-referencing Structs terminate.
        self._views[(cls, use)] = Any
        specs = [self._field_spec(f, encoded, encoded and not config.omit_defaults) for f in fields]
        if standalone:
            specs.insert(0, (tag_field, Literal[tag], tag))
            name, tag_field, tag = name + "Standalone", None, None
        view = msgspec.defstruct(
            name,
            specs,
            module=cls.__module__,
            kw_only=True,
            omit_defaults=config.omit_defaults,
            forbid_unknown_fields=config.forbid_unknown_fields,
            tag_field=tag_field,
            tag=tag,
            rename={f.name: f.encode_name for f in fields if f.name != f.encode_name} or None,
        )
        view.__doc__ = cls.__doc__
        if standalone:
            view.__doc__ = (cls.__doc__ or "") + "\n\nOutside a union the type tag may be left out."
        self._views[(cls, use)] = view
        return view

    def _constant_type(self, cls: type, fields: list[msgspec.structs.FieldInfo]) -> str:
        """The string default of ``cls``'s ``type`` field (its tag)."""
        for info in fields:
            if info.name == self.TAG_FIELD and isinstance(info.default, str):
                return info.default
        raise TypeError(
            f"{cls.__qualname__} is a member of an untagged Struct union but has no "
            f"'{self.TAG_FIELD}' field with a string default to document it by"
        )

    def _field_spec(self, info: msgspec.structs.FieldInfo, encoded: bool, always_present: bool) -> tuple[Any, ...]:
        """A ``defstruct`` field spec mirroring ``info``: its type viewed
        (``encoded`` as its Struct), a ``Raw`` default decoded to the value
        it stands for, and no default at all when the field is
        ``always_present`` (never for an ``UNSET`` default: msgspec leaves
        such a field out)."""
        tp = self.view(info.type, encoded)
        if always_present and info.default is not msgspec.UNSET:
            return (info.name, tp)
        if info.default is not NODEFAULT:
            default = info.default
            if isinstance(default, Raw):
                default = msgspec.json.decode(bytes(default))
            return (info.name, tp, default)
        if info.default_factory is not NODEFAULT:
            return (info.name, tp, msgspec.field(default_factory=info.default_factory))
        return (info.name, tp)
