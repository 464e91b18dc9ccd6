#!/usr/bin/python3
"""NumPy as the second reference of the array library's differential test.

Reads programs written by tests/array/differential_test.cpp (one statement a line), runs each
with NumPy and writes what the program reads, in order: after every `read` statement, then
every variable at the end. Usage: numpy_reference.py PROGRAMS OUTPUT.

NumPy's semantics, with NEP 50's weak Python scalars (NumPy 2's rule), except where the
library documents another rule (docs/GUIDE.md section 11), applied here explicitly:
  - float16 with integers stays float16 (computed in float32, rounded once);
  - round() takes ties away from zero (rint to even, as NumPy's round);
  - a float converted to an integer rounds toward zero and saturates, NaN gives 0;
  - float16 sums, means and cumsums accumulate in float32 and round once.
"""
import sys

import numpy as np

if hasattr(np, "_set_promotion_state"):
    np._set_promotion_state("weak")  # NumPy 1.24+: NEP 50; NumPy 2 has it always

DTYPES = {n: np.dtype(n) for n in ["bool", "int8", "int16", "int32", "int64", "uint8",
                                   "uint16", "uint32", "uint64", "float16", "float32",
                                   "float64"]}


def parse_value(text, dtype):
    if dtype.kind == "f":
        return float.fromhex(text) if "0x" in text else float(text)
    return int(text)


def operand(text, env):
    if text.startswith("v"):
        return env[int(text[1:])]
    kind, value = text.split(":", 1)
    if kind == "b":
        return value == "1"
    if kind == "i":
        return int(value)
    return float.fromhex(value)


def is_int_like(x):
    return isinstance(x, np.ndarray) and x.dtype.kind in "biu"


def keeps_float16(args):
    """The library keeps float16 with integer arrays (NumPy would widen)."""
    arrays = [a for a in args if isinstance(a, np.ndarray)]
    return (any(a.dtype == np.float16 for a in arrays) and any(is_int_like(a) for a in arrays)
            and all(a.dtype == np.float16 or is_int_like(a) for a in arrays))


def in_float32(fn, args):
    """fn over the arguments in float32, a float result rounded once to float16."""
    wide = [a.astype(np.float32) if isinstance(a, np.ndarray) else a for a in args]
    r = np.asarray(fn(*wide))
    return r.astype(np.float16) if r.dtype.kind == "f" else r


BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide,
    "mod": np.remainder, "eq": np.equal, "ne": np.not_equal, "lt": np.less,
    "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "and": np.logical_and,
    "or": np.logical_or, "maximum": np.maximum, "minimum": np.minimum,
}


def binary(op, x, y):
    fn = BINARY[op]
    if keeps_float16([x, y]):
        return in_float32(fn, [x, y])
    return np.asarray(fn(x, y))


def round_away(x):
    t = np.trunc(x)
    return np.where(np.abs(x - t) >= 0.5, t + np.sign(x), t).astype(x.dtype)


UNARY = {
    "neg": np.negative, "not": np.logical_not, "abs": np.abs, "sign": np.sign, "exp": np.exp,
    "sqrt_abs": lambda x: np.sqrt(np.abs(x)), "sin": np.sin, "cos": np.cos, "tanh": np.tanh,
    "arctan": np.arctan, "floor": np.floor, "ceil": np.ceil, "rint": np.rint,
    "isnan": np.isnan, "isfinite": np.isfinite,
}


def unary(op, x):
    if op == "round":  # of an integer: its float (floor is the identity there)
        return round_away(x if x.dtype.kind == "f" else np.floor(x))
    return np.asarray(UNARY[op](x))


def convert(x, dtype):
    """x as the library converts it to dtype (floats into integers toward zero, saturating)."""
    x = np.asarray(x)
    if x.dtype.kind == "f" and dtype.kind in "iu":
        info = np.iinfo(dtype)
        t = np.trunc(np.nan_to_num(x.astype(np.float64), nan=0.0, posinf=np.inf, neginf=-np.inf))
        lo, hi = float(info.min), float(info.max)
        out = np.where(t <= lo, info.min, 0).astype(dtype)
        inside = (t > lo) & (t < hi)
        out[inside] = t[inside].astype(dtype)
        out[t >= hi] = info.max
        return out
    return x.astype(dtype)


def accumulate16(fn, x, **kw):
    """float16 accumulates in float32 and rounds once (the library's rule)."""
    if x.dtype == np.float16:
        return np.asarray(fn(x.astype(np.float32), **kw)).astype(np.float16)
    return np.asarray(fn(x, **kw))


def reduce(op, x, axis, keepdims):
    kw = {} if axis < 0 else {"axis": axis, "keepdims": keepdims}
    if op in ("sum", "mean"):
        return accumulate16(getattr(np, op), x, **kw)
    if op == "count_nonzero":
        if axis < 0:
            return np.asarray(np.count_nonzero(x), dtype=np.int64)
        r = np.count_nonzero(x, axis=axis).astype(np.int64)
        return np.expand_dims(r, axis) if keepdims else r
    return np.asarray(getattr(np, {"min": "min", "max": "max", "prod": "prod", "any": "any",
                                   "all": "all"}[op])(x, **kw))


def arg(is_max, x, axis, keepdims):
    fn = np.argmax if is_max else np.argmin
    if axis < 0:
        return np.asarray(fn(x), dtype=np.int64)
    return np.asarray(fn(x, axis=axis, keepdims=keepdims)).astype(np.int64)


def cut(text):
    if text == "all":
        return slice(None)
    if text.startswith("at:"):
        return int(text[3:])
    lo, hi, step = (int(v) for v in text[6:].split(":"))
    return slice(lo, hi, step)


def shape_of(words):
    rank = int(words[0])
    return tuple(int(w) for w in words[1:1 + rank]), words[1 + rank:]


def value_text(v, dtype):
    if dtype.kind == "f":
        return float(v).hex()
    return str(int(v))


def snapshot(x):
    x = np.asarray(x)
    values = " ".join(value_text(v, x.dtype) for v in x.reshape(-1).tolist())
    dims = " ".join(str(d) for d in x.shape)
    return f"snap {x.dtype.name} {x.ndim} {dims} {values}".replace("  ", " ").rstrip()


def poison(dtype):
    if dtype.kind == "f":
        return np.nan
    if dtype.kind == "b":
        return True
    return np.array(0x5A5A5A5A5A5A5A5A, dtype=np.uint64).astype(dtype)


def step(words, env, out):
    op = words[0]
    if op == "read":
        out.append(snapshot(env[int(words[1])].copy()))
        return
    if op in ("assign", "fill", "compound"):
        t = env[int(words[1])]
        if op == "compound":
            value = binary(words[2], t, operand(words[3], env))
        else:
            value = operand(words[2], env)
        t[...] = convert(value, t.dtype)
        return
    v = int(words[1])
    rest = words[2:]
    if op == "input":
        dtype = DTYPES[rest[0]]
        shape, values = shape_of(rest[1:])
        env[v] = np.array([parse_value(w, dtype) for w in values], dtype=dtype).reshape(shape)
    elif op == "poison":
        dtype = DTYPES[rest[0]]
        shape, _ = shape_of(rest[1:])
        env[v] = np.full(shape, poison(dtype), dtype=dtype)
    elif op == "binary":
        env[v] = binary(rest[0], operand(rest[1], env), operand(rest[2], env))
    elif op == "unary":
        env[v] = unary(rest[0], env[int(rest[1][1:])])
    elif op == "where":
        c, x, y = (operand(w, env) for w in rest)
        if not isinstance(y, np.ndarray):  # np.where takes no weak scalars before NumPy 2
            y = np.asarray(y, dtype=np.result_type(x, y))
        fn = np.where
        env[v] = in_float32(lambda a, b: fn(c, a, b), [x, y]) if keeps_float16([x, y]) \
            else np.asarray(fn(c, x, y))
    elif op == "clip":
        x, lo, hi = (operand(w, env) for w in rest)
        env[v] = np.asarray(np.clip(x, lo, hi))
    elif op == "astype":
        env[v] = convert(operand(rest[0], env), DTYPES[rest[1]])
    elif op == "slice":
        x = operand(rest[0], env)
        env[v] = x[tuple(cut(w) for w in rest[2:]) + (Ellipsis,)]  # a 0-d view, not a scalar
    elif op == "transpose":
        env[v] = np.transpose(operand(rest[0], env), [int(w) for w in rest[1:]])
    elif op in ("reshape", "reshape_view"):
        shape, _ = shape_of(rest[1:])
        r = operand(rest[0], env).reshape(shape)
        env[v] = r.copy() if op == "reshape" else r
    elif op == "copy":
        env[v] = operand(rest[0], env).copy()
    elif op == "reduce":
        env[v] = reduce(rest[0], operand(rest[1], env), int(rest[2]), rest[3] == "1")
    elif op == "arg":
        env[v] = arg(rest[0] == "1", operand(rest[1], env), int(rest[2]), rest[3] == "1")
    elif op == "cumsum":
        x, axis = operand(rest[0], env), int(rest[1])
        env[v] = accumulate16(np.cumsum, x, **({} if axis < 0 else {"axis": axis}))
    else:
        raise ValueError(f"unknown statement {op}")
    if op not in ("slice", "transpose", "reshape_view"):
        env[v] = np.array(env[v], order="C")  # row-major, as the library's results are


def run(program, out):
    env = {}
    for words in program:
        step(words, env, out)
    for v in sorted(env):
        out.append(snapshot(env[v]))


def main():
    programs, current = [], None
    with open(sys.argv[1]) as f:
        for line in f:
            words = line.split()
            if not words:
                continue
            if words[0] == "program":
                current = (words[1], [])
                programs.append(current)
            elif words[0] != "end":
                current[1].append(words)
    with open(sys.argv[2], "w") as f, np.errstate(all="ignore"):
        for seed, program in programs:
            out = []
            try:
                run(program, out)
            except Exception as e:  # reported with the program by the test
                out = ["error " + repr(e).replace("\n", " ")]
            f.write(f"program {seed}\n" + "\n".join(out) + "\nend\n")


if __name__ == "__main__":
    main()
