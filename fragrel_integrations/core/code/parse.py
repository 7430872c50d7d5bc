"""Parsing one source file with its tree-sitter grammar into a :class:`~.syntax.FileSyntax`."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ..._optional import require
from .languages import SPECS, ImportRecord, get_language, get_parser, get_query, package_name
from .loader import SourceFile
from .syntax import CallSite, Definition, FileSyntax

__all__ = ["parse_source"]

_SIMPLE_RECEIVER = re.compile(r"^[A-Za-z_$][\w$]*(\.[A-Za-z_$][\w$]*)*$")


def _kind_ids(language: str, names: frozenset[str]) -> frozenset[int]:
    lang = get_language(language)
    return frozenset(
        i for i in range(lang.node_kind_count) if lang.node_kind_is_named(i) and lang.node_kind_for_id(i) in names
    )


def _receiver_text(node: Any) -> str:
    text = node.text.decode("utf-8", "replace")
    return text if node.type in ("this", "super") or _SIMPLE_RECEIVER.match(text) else "?"


def _go_receiver_type(node: Any) -> str | None:
    receiver = node.child_by_field_name("receiver")
    if receiver is None:
        return None
    for param in receiver.named_children:
        t = param.child_by_field_name("type")
        while t is not None and t.type in ("pointer_type", "generic_type", "parenthesized_type"):
            t = t.child_by_field_name("type") or (t.named_children[0] if t.named_children else None)
        if t is not None:
            return t.text.decode("utf-8", "replace")
    return None


def parse_source(source: SourceFile) -> FileSyntax:
    """Parse one file with its tree-sitter grammar: named nodes, definitions, call sites, imports.

    A file with syntax errors still parses (tree-sitter recovers; ``has_error`` is set and ERROR nodes are kept
    as ordinary nodes); the definitions and calls in its well-formed parts are found as usual.
    """
    spec = SPECS[source.language]
    tree = get_parser(source.language).parse(source.text.encode("utf-8", "surrogatepass"))
    parent, start, end, size, kind = [], [], [], [], []  # per named node, in pre-order (its local id)
    local: dict[int, int] = {}
    cursor = tree.walk()
    anc = [-1]
    while True:
        node = cursor.node
        me = anc[-1]
        if node.is_named and not node.is_missing:
            me = len(parent)
            local[node.id] = me
            parent.append(anc[-1])
            s, e = node.start_point, node.end_point
            start.append(s[0] + 1)
            end.append(e[0] if e[1] == 0 and e[0] > s[0] else e[0] + 1)
            size.append(node.end_byte - node.start_byte)
            kind.append(node.kind_id)
        if cursor.goto_first_child():
            anc.append(me)
            continue
        while not cursor.goto_next_sibling():
            if not cursor.goto_parent():
                break
            anc.pop()
        else:
            continue
        break
    parent_arr = np.asarray(parent, np.int32)
    kind_arr = np.asarray(kind, np.int32)
    class_ids = _kind_ids(source.language, spec.class_kinds)
    function_ids = _kind_ids(source.language, spec.function_kinds)

    defs_raw: list[tuple[int, str, str, Any]] = []
    calls_raw: list[tuple[int, str, str | None, bool]] = []
    imports: list[ImportRecord] = []
    package = None
    query = require("tree_sitter", "code").QueryCursor(get_query(source.language))
    for _, caps in query.matches(tree.root_node):
        if "import" in caps:
            imports.extend(spec.read_imports(caps["import"][0]))
            continue
        if "package" in caps:
            package = package_name(caps["package"][0])
            continue
        what = next(w for w in ("function", "class", "call", "new") if w in caps)  # one per query pattern
        node = caps[what][0]
        if node.id not in local:
            continue
        name = caps[f"{what}.name"][0].text.decode("utf-8", "replace")
        if what in ("function", "class"):
            defs_raw.append((local[node.id], name, what, node))
        else:
            recv = caps.get(f"{what}.receiver")
            calls_raw.append((local[node.id], name, _receiver_text(recv[0]) if recv else None, what == "new"))

    class_name = {d[0]: d[1] for d in defs_raw if d[2] == "class"}
    go_scope = {d[0]: _go_receiver_type(d[3]) for d in defs_raw if d[3].type == "method_declaration"}

    definitions = []
    for lid, name, what, node in sorted(defs_raw, key=lambda d: d[0]):
        cls_anc = fn_anc = -1  # the nearest class-kind and function-kind ancestors
        p = int(parent_arr[lid])
        while p >= 0 and (cls_anc < 0 or fn_anc < 0):
            k = int(kind_arr[p])
            if cls_anc < 0 and k in class_ids:
                cls_anc = p
            if fn_anc < 0 and k in function_ids:
                fn_anc = p
            p = int(parent_arr[p])
        if lid in go_scope:
            scope, top = go_scope[lid], False
        elif cls_anc >= 0 and (fn_anc < 0 or fn_anc < cls_anc):  # pre-order: the larger id is the nearer one
            scope, top = class_name.get(cls_anc), False
        else:
            scope, top = None, cls_anc < 0 and fn_anc < 0
        par = node.parent
        default = par is not None and par.type == "export_statement" and any(c.type == "default" for c in par.children)
        definitions.append(Definition(lid, name, what, scope, top, default))

    owners = {**go_scope, **class_name}  # a call's enclosing class: its nearest class or method ancestor's
    first: dict[tuple[int, str], tuple[int, str, str | None, bool]] = {}
    for raw in calls_raw:  # one call site per (node, name): the first match
        first.setdefault(raw[:2], raw)
    calls = []
    for lid, name, recv, is_new in first.values():
        p = int(parent_arr[lid])
        while p >= 0 and p not in owners:
            p = int(parent_arr[p])
        calls.append(CallSite(lid, name, recv, is_new, owners.get(p)))
    return FileSyntax(
        path=source.path,
        language=source.language,
        sha1=source.sha1,
        n_lines=source.n_lines,
        has_error=bool(tree.root_node.has_error),
        parent=parent_arr,
        start_line=np.asarray(start, np.int32),
        end_line=np.asarray(end, np.int32),
        size=np.asarray(size, np.int32),
        kind=kind_arr,
        definitions=definitions,
        calls=calls,
        imports=imports,
        package=package,
    )
