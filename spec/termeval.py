"""Z3 terms evaluated in Python: the same term, without a Z3 call per evaluation.

The model's concrete evaluation (kvproof.spec.model.concrete / holds_at)
substitutes values for a compiled term's de Bruijn variables and simplifies,
about half a millisecond of Z3 API calls a time; the reachability labels ask
it for thousands of measured layouts. ``compile_term`` turns the term into a
Python function of the variables' values (ints and bools), one statement per
node of the term's DAG, with Z3's semantics:

* ``mod`` is Euclidean (``0 <= a mod b < |b|``), ``div`` the matching
  quotient; by zero both are *undefined* (Z3 leaves ``(mod a 0)`` unevaluated);
* undefined propagates through arithmetic and comparisons and is absorbed
  where Z3's simplifier absorbs it: ``and`` with a false argument, ``or``
  with a true one, an ``if`` whose condition is known, ``distinct`` with two
  equal known arguments.

A result that is undefined raises :class:`Undefined`, and the caller asks Z3
(so an answer here is always the answer Z3 gives). A term with an operator
not listed in ``_OPS`` does not compile (:class:`Unsupported`): the caller
keeps Z3 for it. tests/unit/test_termeval.py compares both on every formula
of the model.
"""

from __future__ import annotations

from typing import Any, Callable

import z3
from z3 import z3core as C


class Undefined(Exception):
    """The value depends on a division by zero."""


class Unsupported(Exception):
    """The term has an operator this module does not evaluate."""


class _U:
    """The undefined value: arithmetic and comparisons with it are undefined."""

    def _u(self, *_: Any) -> "_U":
        return self

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __neg__ = _u
    __mod__ = __rmod__ = __floordiv__ = __rfloordiv__ = _u
    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _u  # type: ignore[assignment]
    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        raise Undefined("undefined value used as a condition")

    def __repr__(self) -> str:
        return "undefined"


U = _U()


def _mod(a, b):
    if a is U or b is U or b == 0:
        return U
    return a % abs(b)


def _div(a, b):
    if a is U or b is U or b == 0:
        return U
    return (a - a % abs(b)) // b


def _distinct(*xs):
    known = [x for x in xs if x is not U]
    if len(set(known)) < len(known):
        return False  # two known values are equal, whatever the undefined ones are
    return U if len(known) < len(xs) else True


def _all(a: tuple[str, ...], first: str, rest: str) -> str:
    """``and`` (first=False) / ``or`` (first=True): the absorbing value wins, else undefined if any is."""
    hit = " or ".join(f"{x} is {first}" for x in a)
    clean = " and ".join(f"{x} is {rest}" for x in a)
    return f"({first} if ({hit}) else {rest} if ({clean}) else U)"


# Z3 operator kind -> Python expression over the argument names (a tuple of strings)
_OPS: dict[int, Callable[[tuple[str, ...]], str]] = {
    z3.Z3_OP_TRUE: lambda a: "True",
    z3.Z3_OP_FALSE: lambda a: "False",
    z3.Z3_OP_AND: lambda a: _all(a, "False", "True"),
    z3.Z3_OP_OR: lambda a: _all(a, "True", "False"),
    z3.Z3_OP_NOT: lambda a: f"(U if {a[0]} is U else not {a[0]})",
    z3.Z3_OP_IMPLIES: lambda a: f"(True if ({a[0]} is False or {a[1]} is True) else False if ({a[0]} is True and {a[1]} is False) else U)",
    z3.Z3_OP_ITE: lambda a: f"({a[1]} if {a[0]} is True else {a[2]} if {a[0]} is False else U)",
    z3.Z3_OP_EQ: lambda a: f"({a[0]} == {a[1]})",
    z3.Z3_OP_DISTINCT: lambda a: f"_distinct({', '.join(a)})",
    z3.Z3_OP_LE: lambda a: f"({a[0]} <= {a[1]})",
    z3.Z3_OP_LT: lambda a: f"({a[0]} < {a[1]})",
    z3.Z3_OP_GE: lambda a: f"({a[0]} >= {a[1]})",
    z3.Z3_OP_GT: lambda a: f"({a[0]} > {a[1]})",
    z3.Z3_OP_ADD: lambda a: f"({' + '.join(a)})",
    z3.Z3_OP_SUB: lambda a: f"({' - '.join(a)})",
    z3.Z3_OP_UMINUS: lambda a: f"(-{a[0]})",
    z3.Z3_OP_MUL: lambda a: f"({' * '.join(a)})",
    z3.Z3_OP_MOD: lambda a: f"_mod({a[0]}, {a[1]})",
    z3.Z3_OP_IDIV: lambda a: f"_div({a[0]}, {a[1]})",
    z3.Z3_OP_DT_CONSTRUCTOR: lambda a: f"({', '.join(a)},)",  # model._VEC: the Int fields as a tuple
}
_ENV = {"U": U, "_mod": _mod, "_div": _div, "_distinct": _distinct}


def _read(term, table: dict) -> int:
    """Enter ``term``'s DAG into ``table`` (AST id -> leaf text, or (operator kind, child ids)),
    through Z3's C API: one read per node, shared by every term of one encoding."""
    ctx = term.ctx_ref()
    todo = [term.as_ast()]
    while todo:
        a = todo.pop()
        i = C.Z3_get_ast_id(ctx, a)
        if i in table:
            continue
        kind = C.Z3_get_ast_kind(ctx, a)
        if kind == z3.Z3_VAR_AST:
            table[i] = f"v[{C.Z3_get_index_value(ctx, a)}]"
        elif kind == z3.Z3_NUMERAL_AST:
            if C.Z3_get_sort_kind(ctx, C.Z3_get_sort(ctx, a)) != z3.Z3_INT_SORT:
                raise Unsupported("a numeral that is not an Int")
            table[i] = str(int(C.Z3_get_numeral_string(ctx, a)))
        elif kind == z3.Z3_APP_AST:
            op = C.Z3_get_decl_kind(ctx, C.Z3_get_app_decl(ctx, a))
            if op not in _OPS:
                raise Unsupported(f"operator kind {op}")
            kids = [C.Z3_get_app_arg(ctx, a, k) for k in range(C.Z3_get_app_num_args(ctx, a))]
            table[i] = (op, tuple(C.Z3_get_ast_id(ctx, k) for k in kids))
            todo.extend(kids)
        else:
            raise Unsupported(f"AST kind {kind}")
    return C.Z3_get_ast_id(ctx, term.as_ast())


def _source(root: int, table: dict) -> str:
    """``def f(v):`` with one assignment per node under ``root``, children first."""
    names: dict[int, str] = {}
    lines: list[str] = []
    stack = [(root, False)]
    while stack:
        i, ready = stack.pop()
        if i in names:
            continue
        node = table[i]
        if isinstance(node, str):
            names[i] = node
            continue
        op, kids = node
        if not ready:
            stack.append((i, True))
            stack.extend((k, False) for k in reversed(kids) if k not in names)
            continue
        names[i] = f"t{len(lines)}"
        lines.append(f"    {names[i]} = {_OPS[op](tuple(names[k] for k in kids))}")
    return "def f(v):\n" + "\n".join(lines) + f"\n    return {names[root]}\n"


def compile_term(term, table: dict | None = None) -> Callable[[list], Any]:
    """``term`` (its free variables de Bruijn ``Var(i)``) as a function of the list of their values;
    the function raises :class:`Undefined` where Z3 would leave the term unevaluated. ``table``
    (kept by the caller for terms that share subterms) saves reading a node twice."""
    table = {} if table is None else table
    env = dict(_ENV)
    exec(compile(_source(_read(term, table), table), "<kvproof.spec.termeval>", "exec"), env)  # noqa: S102
    body = env["f"]

    def run(vals: list) -> Any:
        out = body(vals)
        if out is U or (type(out) is tuple and any(x is U for x in out)):
            raise Undefined("the term's value depends on a division by zero")
        return out
    return run


def try_compile(term, table: dict | None = None) -> Callable[[list], Any] | None:
    """:func:`compile_term`, or None for a term with an operator this module does not evaluate."""
    try:
        return compile_term(term, table)
    except Unsupported:
        return None
