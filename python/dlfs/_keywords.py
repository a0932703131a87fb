"""Keyword checks for dlfs's constructors: a misspelt keyword is named, with
the keyword it probably meant, when the object is made (not at its first
iteration, nor in pybind11's dump of every signature), and an argument
pybind11 cannot convert (batch_size=-1 for an unsigned count, a str for an
int) is named with what it takes.

check(where, given, allowed) refuses names not in `allowed`;
parameters(func) reads a pybind11 function's keywords from its docstring
(positional(func): those it takes by position);
checked_init(cls, where) wraps a pybind11 class's __init__ with both;
call(where, func, ...) calls a pybind11 function so.
"""
import difflib
import functools
import numbers
import operator

__all__ = ["call", "check", "checked_init", "parameters", "positional", "suggest"]


def suggest(name, allowed):
    """ " (did you mean 'x'?)" for the closest of `allowed`, or ""."""
    close = difflib.get_close_matches(name, list(allowed), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def check(where, given, allowed):
    """TypeError naming the first keyword of `given` not in `allowed`, with a
    suggestion, as Python's own message starts."""
    allowed = list(allowed)
    for name in given:
        if name not in allowed:
            hint = suggest(name, allowed) or \
                f"; its keywords are {', '.join(sorted(allowed))}"
            raise TypeError(f"{where}() got an unexpected keyword argument '{name}'" + hint)


def _split(text):
    """Top-level comma-separated parts of a signature's parameter list."""
    parts, depth, quote, start = [], 0, None, 0
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    if text[start:].strip():
        parts.append(text[start:].strip())
    return parts


def _signatures(func):
    """The parameter lists of the signatures pybind11 wrote into `func`'s
    docstring (one, or one per overload)."""
    name = getattr(func, "__name__", "")
    out = []
    for line in (func.__doc__ or "").splitlines():
        line = line.strip()
        if line[:1].isdigit() and ". " in line:  # "1. __init__(...)" of an overload
            line = line.split(". ", 1)[1]
        if not line.startswith(name + "(") or "(*args, **kwargs)" in line:
            continue
        body = line[len(name) + 1:]
        depth, end = 1, None
        for i, ch in enumerate(body):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0:
                end = i
                break
        if end is not None:
            out.append(_split(body[:end]))
    return out


_PARSED = {}  # id(func) -> its parameters (functions of the module: they stay)


def _parameters(func):
    if id(func) in _PARSED:
        return _PARSED[id(func)]
    _PARSED[id(func)] = params = _parse(func)
    return params


def _parse(func):
    params = {}
    for parts in _signatures(func):
        for part in parts:
            if part in ("*", "/") or part.startswith("*"):
                if part.startswith("**"):
                    return None  # takes any keyword
                continue
            name, _, rest = part.partition(":")
            annotation = rest.split("=", 1)[0].strip()
            params.setdefault(name.strip(), annotation)
    return params


def positional(func):
    """The parameters of pybind11 function `func` that may be given by
    position: those before its "*" (of its first signature)."""
    out = []
    for part in (_signatures(func) or [[]])[0]:
        if part.startswith("*"):
            break
        out.append(part.partition(":")[0].strip())
    return out


def parameters(func):
    """{keyword: annotation} of a pybind11 function (self left out), or None
    when it takes any keyword (or its docstring has no signature)."""
    params = _parameters(func)
    if not params:
        return None
    return {k: v for k, v in params.items() if k != "self"}


# Counts that must be positive, where pybind11 only says "int".
_AT_LEAST_ONE = {"batch_size", "world_size"}


def _problem(value, annotation):
    """Why `value` does not fit a parameter annotated `annotation`, as
    (exception type, text), or None when it may."""
    if annotation.startswith("Optional[") and annotation.endswith("]"):
        return None if value is None else _problem(value, annotation[9:-1])
    if annotation == "int":
        try:
            n = operator.index(value)
        except TypeError:
            return TypeError, f"takes an int, not {type(value).__name__}"
        if n < 0:
            return ValueError, "must be >= 0"
        return None
    if annotation == "float":
        if isinstance(value, numbers.Real) or hasattr(value, "__float__"):
            return None
        return TypeError, f"takes a number, not {type(value).__name__}"
    if annotation == "bool":
        return None if isinstance(value, bool) else (
            TypeError, f"takes a bool, not {type(value).__name__}")
    if annotation == "str":
        return None if isinstance(value, str) else (
            TypeError, f"takes a str, not {type(value).__name__}")
    return None


def _explain(where, func, args, kwargs):
    """The argument of a call pybind11 refused, named: an exception, or None."""
    params = parameters(func)
    if params is None:
        return None
    named = dict(zip(list(params), args))
    named.update(kwargs)
    found = []
    for name, value in named.items():
        annotation = params.get(name)
        if annotation is None:
            try:
                check(where, [name], params)
            except TypeError as e:
                return e
        problem = _problem(value, annotation)
        if problem is not None and name in _AT_LEAST_ONE and problem[0] is ValueError:
            problem = (ValueError, "must be >= 1")
        if problem is not None:
            found.append((problem[0] is ValueError, name, value, problem))
    if not found:
        return None
    # A type that does not fit before a value out of range.
    found.sort(key=lambda f: f[0])
    _, name, value, (kind, text) = found[0]
    return kind(f"{where}(): {name}={value!r}: {text}")


def call(where, func, *args, **kwargs):
    """func(*args, **kwargs), where an argument pybind11 cannot convert
    raises naming it (see the module) instead of pybind11's dump."""
    return _explained(where, func, func, args, kwargs)


def _explained(where, func, bound, args, kwargs):
    """bound(*args, **kwargs) (func, or func with self), raising pybind11's
    "incompatible arguments" TypeError as _explain names it."""
    try:
        return bound(*args, **kwargs)
    except TypeError as e:
        if "incompatible" not in str(e):
            raise
        better = _explain(where, func, args, kwargs)
        if better is None:
            raise
        raise better from None


def checked_init(cls, where):
    """Wraps pybind11 class `cls`'s __init__: unknown keywords and
    arguments it cannot convert raise naming them (see the module)."""
    init = cls.__init__
    if getattr(init, "_dlfs_checked", False):
        return

    def __init__(self, *args, **kwargs):
        params = parameters(init)
        if params is not None:
            check(where, kwargs, params)
        _explained(where, init, functools.partial(init, self), args, kwargs)

    __init__.__doc__ = init.__doc__
    __init__._dlfs_checked = True
    __init__._dlfs_wrapped = init
    cls.__init__ = __init__


def python_keywords(func, named_only=False):
    """The keywords a Python function takes by name; None where it takes
    **kwargs too, unless named_only."""
    import inspect

    out = []
    for p in inspect.signature(func).parameters.values():
        if p.kind is p.VAR_KEYWORD and not named_only:
            return None
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self":
            out.append(p.name)
    return out


def checked(where):
    """Decorator for a Python __init__ (without **kwargs): a misspelt keyword
    is named with a suggestion, as dlfs.pack does."""
    def wrap(init):
        allowed = python_keywords(init)

        @functools.wraps(init)
        def __init__(self, *args, **kwargs):
            check(where, kwargs, allowed)
            return init(self, *args, **kwargs)
        return __init__
    return wrap
