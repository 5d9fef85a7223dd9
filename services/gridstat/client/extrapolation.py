"""Extrapolation functions: fill a missed status event at the subscriber instead of a QoS callback.

Dissertation 2.2.2: a subscriber may ask, with its
subscription, that a missed event be *extrapolated* from the last few received ones rather than
reported as a QoS violation, and the holder then knows that its latest value is extrapolated. The
seed names four built-ins (average, polynomial of a user-set order -- Lagrange interpolation
through the newest order + 1 samples --, the average over several polynomial orders,
Stoer-Bulirsch; we add a least-squares polynomial over the whole window, named apart) and lets
users add their own (``extrapolateValue(double[] x, double[] y)``); here a user function is any
``fn(x, y, at) -> float``, passed directly or registered under a name.

Everything here is pure arithmetic, no I/O, so it is tested against known polynomials and rational
functions. The numbers it sees are made safe first (``Extrapolation.predict``): abscissae are
milliseconds *relative to the newest sample* (absolute epoch milliseconds ~1.7e12 would make any
polynomial fit ill-conditioned), non-finite samples are dropped, and a non-finite result means
"cannot extrapolate" (the subscriber then reports the violation as it would without extrapolation).
The built-ins never raise on numeric input: too few samples lower the degree, a rank-deficient
least-squares fit lowers it further, and Stoer-Bulirsch falls back to the interpolating polynomial, then to the
newest value, when it meets a pole (a zero denominator in the recurrence).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

from gridstat.core.model import TypeSpec, ValueType
from gridstat.errors import DuplicateName, NotFound, ValidationError

#: ``fn(x, y, at) -> value``: samples ``(x[i], y[i])``, oldest first, extrapolated to ``at``.
ExtrapolateFn = Callable[[Sequence[float], Sequence[float], float], float]

#: Past samples a subscription may keep for extrapolation; a bound, not a recommendation.
MAX_WINDOW = 256
#: Highest polynomial order accepted: beyond a few orders extrapolation only amplifies noise.
MAX_ORDER = 16

AVERAGE = "average"
POLYNOMIAL = "polynomial"
POLYNOMIAL_AVERAGE = "polynomial-average"
STOER_BULIRSCH = "stoer-bulirsch"
LEAST_SQUARES = "least-squares"
BUILTIN_METHODS = (AVERAGE, POLYNOMIAL, POLYNOMIAL_AVERAGE, STOER_BULIRSCH, LEAST_SQUARES)

#: Relative size below which a fitted column counts as linearly dependent (rank-deficient fit).
_RANK_TOL = 1e-10
#: Numerical Recipes' ``TINY`` of ``ratint``: keeps a zero sample from making a 0/0 in the tableau.
_TINY = 1e-25


# -- the built-in methods (pure) ------------------------------------------------------------------
def _check(x: Sequence[float], y: Sequence[float]) -> None:
    if len(x) != len(y):
        raise ValidationError(f"{len(x)} abscissae but {len(y)} values", field="x")


def _newest(x: Sequence[float], y: Sequence[float]) -> float:
    """The value of the sample with the largest abscissa (the last one when x is sorted)."""
    best = 0
    for i in range(1, len(x)):
        if x[i] >= x[best]:
            best = i
    return float(y[best])


def average(x: Sequence[float], y: Sequence[float], at: float) -> float:
    """The mean of the window: the missed value is predicted as the recent level (seed, "Average").

    NaN when there are no samples; never raises on numeric input.
    """
    _check(x, y)
    if not y:
        return math.nan
    return sum(float(v) for v in y) / len(y)


def polynomial(x: Sequence[float], y: Sequence[float], at: float, order: int = 1) -> float:
    """The interpolating polynomial through the newest ``order + 1`` samples, evaluated at ``at``.

    The dissertation's polynomial extrapolation (2.2.2, its reference [42]): Lagrange interpolation
    through the last k+1 points, here by Neville's scheme (the same polynomial, evaluated without
    forming its coefficients). A line (order 1) through (3, 9) and (4, 16) predicts 23 at 5. Exact
    for polynomials of degree <= ``order``. Fewer samples with distinct abscissae lower the degree (a
    repeated abscissa keeps its newest sample); NaN when there are no samples. The least-squares fit
    over the whole window, which averages out noise, is :func:`least_squares`.
    """
    _check(x, y)
    if not y:
        return math.nan
    if order < 0:
        raise ValidationError(f"polynomial order must not be negative, got {order}", field="order")
    newest_first = sorted(range(len(x)), key=lambda i: (float(x[i]), i), reverse=True)
    xs: list[float] = []
    ps: list[float] = []
    for i in newest_first:
        xi = float(x[i])
        if not math.isfinite(xi):
            return math.nan
        if xs and xi == xs[-1]:
            continue  # an older sample at the same abscissa
        xs.append(xi)
        ps.append(float(y[i]))
        if len(xs) == order + 1:
            break
    at = float(at)
    for m in range(1, len(xs)):  # Neville: p[i] becomes the polynomial through xs[i..i+m]
        for i in range(len(xs) - m):
            ps[i] = ((at - xs[i + m]) * ps[i] + (xs[i] - at) * ps[i + 1]) / (xs[i] - xs[i + m])
    return ps[0]


def least_squares(x: Sequence[float], y: Sequence[float], at: float, order: int = 1) -> float:
    """The least-squares polynomial of degree ``order`` through the whole window, evaluated at ``at``.

    Not the seed's method (that is :func:`polynomial`, through the newest ``order + 1`` samples), but
    with more samples than ``order + 1`` the extra ones average out measurement noise: over y = x^2 at
    x = 1..4 the order-1 fit predicts 20 at 5 where the interpolating line predicts 23. Exact for
    polynomials of degree <= ``order``. Fewer samples (or repeated abscissae) lower the degree; NaN
    when there are no samples.
    """
    _check(x, y)
    n = len(y)
    if n == 0:
        return math.nan
    if order < 0:
        raise ValidationError(f"polynomial order must not be negative, got {order}", field="order")
    # Scale abscissae into [-1, 1] around the newest sample: a well-conditioned Vandermonde basis.
    origin = max(float(v) for v in x)
    if not math.isfinite(origin):
        return math.nan
    span = max(abs(float(v) - origin) for v in x)
    span = max(span, abs(float(at) - origin))
    if not math.isfinite(span) or span == 0.0:
        span = 1.0
    u = [(float(v) - origin) / span for v in x]
    ys = [float(v) for v in y]
    target = (float(at) - origin) / span
    degree = min(order, n - 1)
    while degree >= 0:
        value = _lstsq_eval(u, ys, target, degree)
        if value is not None:
            return value
        degree -= 1  # rank-deficient at this degree (repeated abscissae): try a lower one
    return _newest(x, y)


def _lstsq_eval(u: list[float], y: list[float], at: float, degree: int) -> float | None:
    """Fit ``sum c_k u^k`` (k <= degree) by QR (modified Gram-Schmidt, orthogonalised twice) and
    evaluate it at ``at``; None when the basis is rank-deficient at this degree."""
    n, m = len(u), degree + 1
    columns: list[list[float]] = [[1.0] * n]
    for _ in range(degree):
        prev = columns[-1]
        columns.append([p * ui for p, ui in zip(prev, u, strict=True)])  # u^k by products, never pow
    q: list[list[float]] = []
    r = [[0.0] * m for _ in range(m)]
    for j, col in enumerate(columns):
        v = list(col)
        norm0 = math.sqrt(sum(c * c for c in v))
        for _ in range(2):  # "twice is enough" (Kahan-Parlett) for a stable Gram-Schmidt
            for i, qi in enumerate(q):
                d = sum(a * b for a, b in zip(qi, v, strict=True))
                r[i][j] += d
                v = [a - d * b for a, b in zip(v, qi, strict=True)]
        norm = math.sqrt(sum(c * c for c in v))
        if not (math.isfinite(norm) and norm > _RANK_TOL * norm0):
            return None
        r[j][j] = norm
        q.append([c / norm for c in v])
    qty = [sum(a * b for a, b in zip(qi, y, strict=True)) for qi in q]
    coef = [0.0] * m
    for i in range(m - 1, -1, -1):  # back substitution R c = Q^T y
        s = qty[i] - sum(r[i][k] * coef[k] for k in range(i + 1, m))
        coef[i] = s / r[i][i]
    value = 0.0
    for c in reversed(coef):  # Horner
        value = value * at + c
    return value


def polynomial_average(x: Sequence[float], y: Sequence[float], at: float,
                       orders: Sequence[int] = (1, 2)) -> float:
    """The mean of the polynomial extrapolations of each order in ``orders`` (seed, "Average over
    a number of orders for Polynomial"); orders whose result is not finite are left out."""
    _check(x, y)
    results = [polynomial(x, y, at, k) for k in orders]
    finite = [v for v in results if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else math.nan


def stoer_bulirsch(x: Sequence[float], y: Sequence[float], at: float) -> float:
    """Bulirsch-Stoer rational-function extrapolation (Numerical Recipes 3.2, ``ratint``).

    The diagonal rational function through every sample, built with the Neville-like recurrence of
    Stoer and Bulirsch and evaluated at ``at``. Exact for rational functions of matching degrees.
    A pole (zero denominator in the tableau) or a non-finite result falls back to the interpolating
    polynomial through the same samples, and then to the newest value; it never raises on numeric
    input. NaN when there are no samples.
    """
    _check(x, y)
    n = len(y)
    if n == 0:
        return math.nan
    if all(v == y[0] for v in y):
        return float(y[0])  # constant: the tableau would only divide zeros by zeros
    value = _ratint([float(v) for v in x], [float(v) for v in y], float(at))
    if value is not None and math.isfinite(value):
        return value
    value = polynomial(x, y, at, n - 1)
    return value if math.isfinite(value) else _newest(x, y)


def _ratint(xa: list[float], ya: list[float], at: float) -> float | None:
    """``ratint`` with 0-based indices; None at a pole of the tableau."""
    n = len(xa)
    scale = max((abs(v) for v in ya), default=0.0)
    tiny = _TINY * scale if math.isfinite(scale) and scale > 0.0 else _TINY
    ns = 0
    hh = abs(at - xa[0])
    for i in range(n):
        h = abs(at - xa[i])
        if h == 0.0:
            return ya[i]
        if h < hh:
            ns, hh = i, h
    c = list(ya)
    d = [v + tiny for v in ya]
    value = ya[ns]
    ns -= 1
    for m in range(1, n):
        for i in range(n - m):
            w = c[i + 1] - d[i]
            h = xa[i + m] - at  # never 0: ``at`` is none of the abscissae
            t = (xa[i] - at) * d[i] / h
            dd = t - c[i + 1]
            if dd == 0.0 or not math.isfinite(dd):
                return None  # a pole of the interpolating rational function at ``at``
            dd = w / dd
            d[i] = c[i + 1] * dd
            c[i] = t * dd
        if 2 * (ns + 1) < n - m:
            value += c[ns + 1]
        else:
            value += d[ns]
            ns -= 1
    return value


# -- user-defined methods ------------------------------------------------------------------------
_USER_METHODS: dict[str, ExtrapolateFn] = {}


def _normalise(name: str) -> str:
    return name.strip().lower().replace("_", "-")


def register_extrapolation(name: str, fn: ExtrapolateFn, *, replace: bool = False) -> None:
    """Make ``fn`` available as ``Extrapolation(method=name)`` (the seed's abstract Extrapolation
    class, 2.2.2). Built-in names cannot be taken; an existing user name only with ``replace``."""
    if not isinstance(name, str) or not _normalise(name):
        raise ValidationError(f"extrapolation method name must be a non-empty string, got {name!r}",
                              field="method")
    if not callable(fn):
        raise ValidationError(f"extrapolation method {name!r} must be callable, got {fn!r}", field="method")
    key = _normalise(name)
    if key in BUILTIN_METHODS:
        raise DuplicateName(f"{key!r} is a built-in extrapolation method", field="method")
    if key in _USER_METHODS and not replace:
        raise DuplicateName(f"extrapolation method {key!r} is already registered", field="method")
    _USER_METHODS[key] = fn


def unregister_extrapolation(name: str) -> None:
    """Forget a user method; subscriptions already made with it keep using it."""
    if _USER_METHODS.pop(_normalise(name), None) is None:
        raise NotFound(f"no user extrapolation method {name!r}", field="method")


def methods() -> tuple[str, ...]:
    """Every method name ``Extrapolation`` accepts: the built-ins, then the registered ones."""
    return BUILTIN_METHODS + tuple(sorted(_USER_METHODS))


# -- the subscription's request ------------------------------------------------------------------
@dataclass(frozen=True)
class Extrapolation:
    """How a subscription fills missed events (dissertation 2.2.2: the function and the number of
    datapoints are given with the subscription request).

    ``method`` is a built-in or registered name, or an ``fn(x, y, at)``; ``order`` is the degree of
    ``polynomial`` (through the newest ``order + 1`` samples) and ``least-squares`` (fitted to the
    whole window), ``orders`` the degrees averaged by ``polynomial-average``; ``window`` is how
    many of the newest *received* samples are kept (extrapolated values are never used as samples);
    ``max_consecutive`` is how many intervals in a row, counted from the newest received sample,
    may be filled before the subscription gives up and reports the QoS violation.
    """

    method: str | ExtrapolateFn = POLYNOMIAL
    order: int = 1
    orders: tuple[int, ...] = (1, 2)
    window: int = 4
    max_consecutive: int = 3
    _fn: ExtrapolateFn = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("order", "window", "max_consecutive"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValidationError(f"extrapolation {name} must be an integer, got {value!r}", field=name)
        if not 1 <= self.window <= MAX_WINDOW:
            raise ValidationError(f"extrapolation window must be within 1..{MAX_WINDOW} samples, got {self.window}",
                                  field="window")
        if self.max_consecutive < 1:
            raise ValidationError(f"max_consecutive must be at least 1, got {self.max_consecutive}",
                                  field="max_consecutive")
        if not isinstance(self.orders, (tuple, list)):
            raise ValidationError(f"extrapolation orders must be a sequence of integers, got {self.orders!r}",
                                  field="orders")
        object.__setattr__(self, "orders", tuple(self.orders))
        fn: ExtrapolateFn
        if callable(self.method):
            fn = self.method
        elif isinstance(self.method, str):
            key = _normalise(self.method)
            object.__setattr__(self, "method", key)
            if key == AVERAGE:
                fn = average
            elif key == POLYNOMIAL:
                self._check_order(self.order, "order")
                fn = partial(polynomial, order=self.order)
            elif key == LEAST_SQUARES:
                self._check_order(self.order, "order")
                fn = partial(least_squares, order=self.order)
            elif key == POLYNOMIAL_AVERAGE:
                if not self.orders:
                    raise ValidationError("polynomial-average needs at least one order", field="orders")
                for k in self.orders:
                    self._check_order(k, "orders")
                fn = partial(polynomial_average, orders=self.orders)
            elif key == STOER_BULIRSCH:
                if self.window < 2:
                    raise ValidationError("stoer-bulirsch needs a window of at least 2 samples", field="window")
                fn = stoer_bulirsch
            elif key in _USER_METHODS:
                fn = _USER_METHODS[key]
            else:
                raise ValidationError(f"unknown extrapolation method {self.method!r}; known: {', '.join(methods())}",
                                      field="method")
        else:
            raise ValidationError(f"extrapolation method must be a name or a callable, got {self.method!r}",
                                  field="method")
        object.__setattr__(self, "_fn", fn)

    def _check_order(self, order: object, name: str) -> None:
        if not isinstance(order, int) or isinstance(order, bool) or not 0 <= order <= MAX_ORDER:
            raise ValidationError(f"polynomial order must be an integer within 0..{MAX_ORDER}, got {order!r}",
                                  field=name)
        if order >= self.window:
            raise ValidationError(f"polynomial order {order} needs a window of at least {order + 1} samples, "
                                  f"got window={self.window}", field=name)

    @property
    def name(self) -> str:
        """The method's name (a callable's ``__name__``)."""
        if isinstance(self.method, str):
            return self.method
        return str(getattr(self.method, "__name__", "custom"))

    def predict(self, timestamps_ms: Sequence[int], values: Sequence[float], at_ms: int) -> float | None:
        """Extrapolate the samples (oldest first) to ``at_ms``; None when that is not possible.

        Abscissae are made relative to the newest sample; samples with a non-finite value are left
        out; a non-finite result is None. Raises only what a user-defined method raises.
        """
        pairs = [(t, float(v)) for t, v in zip(timestamps_ms, values, strict=True) if math.isfinite(float(v))]
        if not pairs:
            return None
        origin = pairs[-1][0]
        x = [float(t - origin) for t, _ in pairs]
        y = [v for _, v in pairs]
        result = float(self._fn(x, y, float(at_ms - origin)))
        return result if math.isfinite(result) else None


#: What ``subscribe(..., extrapolation=...)`` accepts: a spec, a method name, or a function.
ExtrapolationLike = Extrapolation | str | ExtrapolateFn

#: Value kinds that can be extrapolated: numeric scalars only.
NUMERIC_KINDS = (ValueType.INT, ValueType.FLOAT)


def as_extrapolation(spec: ExtrapolationLike | None, type_spec: TypeSpec | None = None, *,
                     alert: bool = False) -> Extrapolation | None:
    """Normalise a subscription's ``extrapolation`` argument, checking it suits the variable:
    only periodic int/float variables can be extrapolated (an alert has no missed instants)."""
    if spec is None:
        return None
    if type_spec is not None and type_spec.kind not in NUMERIC_KINDS:
        raise ValidationError(f"only int and float variables can be extrapolated, not {type_spec.name}",
                              field="extrapolation")
    if alert:
        raise ValidationError("alert variables are aperiodic and cannot be extrapolated", field="extrapolation")
    if isinstance(spec, Extrapolation):
        return spec
    if isinstance(spec, str) or callable(spec):
        return Extrapolation(method=spec)
    raise ValidationError(f"extrapolation must be an Extrapolation, a method name or a function, got {spec!r}",
                          field="extrapolation")
